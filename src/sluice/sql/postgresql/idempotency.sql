-- What the dialects write differently of common/idempotency.sql.

-- name: idempotency_done
-- effect, expect 1: as SQLite's; expect() checks the count here (jobs.sql says why).
WITH done AS (
    UPDATE {schema}.idempotency SET status = %(status)s, answer = %(answer)s
    WHERE owner = %(owner)s AND key = %(key)s AND status IS NULL RETURNING 1)
SELECT {schema}.expect(count(*), 1, 'effect: the request was answered already') FROM done;

-- name: idempotency_record
-- effect, expect count: as SQLite's. A key another transaction is writing makes this
-- insert wait for that one's end, then find its row.
WITH kept AS (
    INSERT INTO {schema}.idempotency (owner, key, fingerprint, status, answer, started_at)
    SELECT %(owner)s, r ->> 0, r ->> 1, %(status)s, (r -> 2)::text, %(now)s
    FROM jsonb_array_elements(%(keys)s::jsonb) AS r
    ON CONFLICT (owner, key) DO NOTHING RETURNING 1)
SELECT {schema}.expect(count(*), %(count)s, 'effect: an Idempotency-Key was used already')
FROM kept;

-- name: enqueue_idempotency_record
-- enqueue (queries.sql) and the effect idempotency_record as one statement, its own
-- transaction in one round trip (PostgresBackend.route joins them): a request's
-- messages and its keys' rows commit together, or neither when a key was there.
WITH kept AS (
    INSERT INTO {schema}.idempotency (owner, key, fingerprint, status, answer, started_at)
    SELECT %(owner)s, r ->> 0, r ->> 1, %(status)s, (r -> 2)::text, %(now)s
    FROM jsonb_array_elements(%(keys)s::jsonb) AS r
    ON CONFLICT (owner, key) DO NOTHING RETURNING 1)
SELECT {schema}.expect((SELECT count(*) FROM kept), %(count)s,
                       'effect: an Idempotency-Key was used already'),
       {schema}.enqueue(%(session)s, %(tx)s, %(ready)s, %(queues)s::text[], %(rows)s::json,
                        %(durable)s);
