-- Statements of jobs and tasks that the dialects write differently (see 0005_jobs.sql);
-- those written alike, and what "effect" and "expect 1" mean, are in common/jobs.sql.
-- Here the backend checks an "expect 1" statement's row count.

-- name: job_count
-- effect of a finished task: the job's roll-up; the last task ends the job
UPDATE jobs
SET succeeded = succeeded + :ok, failed = failed + :bad,
    started_at = min(coalesce(started_at, :started), :started),
    ended_at = CASE WHEN succeeded + failed + :ok + :bad >= total THEN :now END
WHERE id = :job AND ended_at IS NULL;

-- name: job_alerted
-- effect, expect 1: the completion alert goes out once
UPDATE jobs SET alerted_at = :now WHERE id = :id AND ended_at IS NOT NULL AND alerted_at IS NULL;

-- name: window_give_back
UPDATE rate_windows SET used = max(used - :n, 0)
WHERE task_type = :task_type AND kind = :kind AND start = :start;

-- name: schedule_advance
-- effect, expect 1: the due time fires once, whichever worker gets here first
UPDATE schedules SET next_due = :next WHERE name = :name AND next_due = :due;

