-- What the dialects write differently of common/idempotency.sql.

-- name: idempotency_done
-- effect, expect 1: as SQLite's; expect() checks the count here (jobs.sql says why).
WITH done AS (
    UPDATE {schema}.idempotency SET status = %(status)s, answer = %(answer)s
    WHERE owner = %(owner)s AND key = %(key)s AND status IS NULL RETURNING 1)
SELECT {schema}.expect(count(*), 1, 'effect: the request was answered already') FROM done;
