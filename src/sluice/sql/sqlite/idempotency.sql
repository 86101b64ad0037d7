-- What the dialects write differently of common/idempotency.sql.

-- name: idempotency_done
-- effect, expect 1: the answer commits with the request's work, in one transaction, so
-- a retry finds either no work done (and runs it) or the work and its answer.
UPDATE idempotency SET status = :status, answer = :answer
WHERE owner = :owner AND key = :key AND status IS NULL;
