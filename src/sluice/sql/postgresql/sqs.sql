-- name: sqs_dedup
-- effect, expect 1: as SQLite's; expect() checks the count here (jobs.sql says why).
WITH kept AS (
    INSERT INTO {schema}.idempotency AS i (owner, key, fingerprint, status, answer, started_at)
    VALUES (%(owner)s, %(key)s, 'sqs-dedup', 200, %(answer)s, %(now)s)
    ON CONFLICT (owner, key) DO UPDATE
    SET answer = excluded.answer, started_at = excluded.started_at
    WHERE i.started_at < %(since)s
    RETURNING 1)
SELECT {schema}.expect(count(*), 1, 'effect: a duplicate of a message sent already')
FROM kept;
