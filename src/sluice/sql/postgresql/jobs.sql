-- Statements of jobs and tasks that the dialects write differently (see 0006_jobs.sql);
-- those written alike, and what "effect" and "expect 1" mean, are in common/jobs.sql.
-- Here expect() in the statement checks an "expect 1" statement's row count.

-- name: job_count
-- effect of a finished task: the job's roll-up; the last task ends the job
UPDATE {schema}.jobs
SET succeeded = succeeded + %(ok)s, failed = failed + %(bad)s,
    started_at = least(coalesce(started_at, %(started)s), %(started)s),
    ended_at = CASE WHEN succeeded + failed + %(ok)s + %(bad)s >= total THEN %(now)s::double precision END
WHERE id = %(job)s AND ended_at IS NULL;

-- name: job_alerted
-- effect, expect 1: the completion alert goes out once
WITH done AS (
    UPDATE {schema}.jobs SET alerted_at = %(now)s
    WHERE id = %(id)s AND ended_at IS NOT NULL AND alerted_at IS NULL RETURNING 1)
SELECT {schema}.expect(count(*), 1, 'effect: the job was alerted already') FROM done;

-- name: window_give_back
UPDATE {schema}.rate_windows SET used = greatest(used - %(n)s, 0)
WHERE task_type = %(task_type)s AND kind = %(kind)s AND start = %(start)s;

-- name: schedule_advance
-- effect, expect 1: the due time fires once, whichever worker gets here first
WITH fired AS (
    UPDATE {schema}.schedules SET next_due = %(next)s
    WHERE name = %(name)s AND next_due = %(due)s RETURNING 1)
SELECT {schema}.expect(count(*), 1, 'effect: the schedule fired already') FROM fired;

