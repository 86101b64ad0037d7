-- The answers of requests made with an Idempotency-Key header (sluice.server.idempotency;
-- the idempotency table of 0008_server.sql / 0010_server.sql): per API key (owner), the
-- client's key, the request's fingerprint and, once it ran, its status and answer.

-- name: idempotency_claim
-- The first request with this key: it runs (status NULL meanwhile); a row there already
-- leaves this one to be told what that row says.
INSERT INTO {schema}.idempotency (owner, key, fingerprint, started_at)
VALUES (:owner, :key, :fingerprint, :now)
ON CONFLICT (owner, key) DO NOTHING;

-- name: idempotency_find
SELECT fingerprint, status, answer, started_at
FROM {schema}.idempotency
WHERE owner = :owner AND key = :key;

-- name: idempotency_restart
-- A first request that never answered and never will (its server died before its
-- commit, which would have answered it): the same request runs again in its place.
UPDATE {schema}.idempotency SET started_at = :now
WHERE owner = :owner AND key = :key AND fingerprint = :fingerprint AND status IS NULL
  AND started_at < :stale;

-- name: idempotency_answer
-- The answer of a request whose work failed with a client's error: kept as its answer.
UPDATE {schema}.idempotency SET status = :status, answer = :answer
WHERE owner = :owner AND key = :key AND status IS NULL;

-- name: idempotency_forget
-- A request that failed on the server's side (the database was away): a retry may run.
DELETE FROM {schema}.idempotency
WHERE owner = :owner AND key = :key AND status IS NULL;

-- name: idempotency_expire
-- Keys are kept a day; a client retrying later makes a new request.
DELETE FROM {schema}.idempotency WHERE started_at < :before;
