-- What the dialects write differently of common/idempotency.sql.

-- name: idempotency_done
-- effect, expect 1: the answer commits with the request's work, in one transaction, so
-- a retry finds either no work done (and runs it) or the work and its answer.
UPDATE idempotency SET status = :status, answer = :answer
WHERE owner = :owner AND key = :key AND status IS NULL;

-- name: idempotency_record
-- effect, expect count: requests that ran without a claim (Idempotency.once), each
-- key's row written whole by the commit of their work; a key there already (answered,
-- running, or another request's) changes nothing, and the work does not commit.
-- keys: a JSON array of [key, fingerprint, answer (as JSON)].
INSERT INTO idempotency (owner, key, fingerprint, status, answer, started_at)
SELECT :owner, value ->> 0, value ->> 1, :status, value -> 2, :now
FROM json_each(:keys) WHERE true
ON CONFLICT (owner, key) DO NOTHING;
