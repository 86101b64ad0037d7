-- Statements of jobs, tasks, profiles and schedules (docs/jobs.md) written alike for
-- SQLite and PostgreSQL (see sluice.sql and common/queries.sql); the dialects' jobs.sql
-- hold the rest. Statements run as commit effects are marked "effect"; "expect 1" ones
-- fail the commit unless they change exactly one row.
-- A task message's declared properties: t1 job, n1 job priority, n2 job deadline,
-- n3 task deadline (sluice.jobs.catalog fixes the slots).

-- name: task_type_upsert
INSERT INTO {schema}.task_types (name, queue, priority, duration, max_attempts, backoff, backoff_max,
                        timeout, retention, profile)
VALUES (:name, :queue, :priority, :duration, :max_attempts, :backoff, :backoff_max,
        :timeout, :retention, :profile)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, duration = excluded.duration,
    max_attempts = excluded.max_attempts, backoff = excluded.backoff,
    backoff_max = excluded.backoff_max, timeout = excluded.timeout,
    retention = excluded.retention, profile = coalesce(excluded.profile, task_types.profile);

-- name: task_type_profile
UPDATE {schema}.task_types SET profile = :profile WHERE name = :name;

-- name: task_types
SELECT name, queue, priority, duration, max_attempts, backoff, backoff_max, timeout,
       retention, profile
FROM {schema}.task_types ORDER BY name;

-- name: job_insert
-- effect of a submission
INSERT INTO {schema}.jobs (id, name, job_type, priority, deadline, owner, info, alert_queue,
                  retention, total, created_at)
VALUES (:id, :name, :job_type, :priority, :deadline, :owner, :info, :alert_queue,
        :retention, :total, :now);

-- name: job_add_tasks
-- effect: tasks added to an open job
UPDATE {schema}.jobs SET total = total + :count WHERE id = :id AND ended_at IS NULL;

-- name: job_columns
SELECT id, name, job_type, priority, deadline, owner, info, alert_queue, retention, total,
       succeeded, failed, created_at, started_at, ended_at, alerted_at
FROM {schema}.jobs WHERE id = :id;

-- name: job_list
SELECT id, name, job_type, priority, deadline, owner, info, alert_queue, retention, total,
       succeeded, failed, created_at, started_at, ended_at, alerted_at
FROM {schema}.jobs WHERE (:open = 0 OR ended_at IS NULL)
ORDER BY created_at DESC, id DESC LIMIT :limit;

-- name: job_live
-- A job's unfinished tasks by state: waiting (ready, delayed, in a lane) or running.
SELECT CASE WHEN m.state = 2 THEN 'running' ELSE 'waiting' END, count(*)
FROM {schema}.messages AS m
WHERE m.queue_id IN (SELECT q.id FROM {schema}.queues AS q JOIN {schema}.task_types AS t ON t.queue = q.name)
  AND m.state IN (1, 2, 5) AND m.t1 = :id
GROUP BY 1;

-- name: job_info
UPDATE {schema}.jobs SET info = :info WHERE id = :id;

-- name: job_tasks
SELECT task, task_type, success, note, attempts, started_at, ended_at
FROM {schema}.tasks WHERE job_id = :id ORDER BY ended_at, task;

-- name: task_record
-- effect of a finished task: its record, kept until its job's retention ends
INSERT INTO {schema}.tasks (task, job_id, task_type, success, note, attempts, started_at, ended_at,
                   expires_at)
VALUES (:task, :job, :task_type, :success, :note, :attempts, :started, :now, :expires);

-- name: job_served
-- A turn number, not a time: turns taken within one tick of the clock stay ordered.
UPDATE {schema}.jobs SET served_at = (SELECT coalesce(max(served_at), 0) + 1 FROM {schema}.jobs) WHERE id = :id;

-- name: late_jobs
-- Late jobs with a task of the queue ready now, least recently served first.
SELECT j.id FROM {schema}.jobs AS j
WHERE j.ended_at IS NULL AND j.deadline < :now
  AND EXISTS (SELECT 1 FROM {schema}.messages AS m
              WHERE m.queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue)
                AND m.state = 1 AND m.t1 = j.id AND m.available_at <= :now)
ORDER BY j.served_at, j.id LIMIT :limit;

-- name: jobs_unalerted
SELECT id FROM {schema}.jobs WHERE ended_at IS NOT NULL AND alerted_at IS NULL ORDER BY ended_at LIMIT 100;

-- name: jobs_finish_stale
-- Jobs whose counts say finished but whose end was not stamped (a job emptied by a
-- cancelled task, say): ended now.
UPDATE {schema}.jobs SET ended_at = :now
WHERE ended_at IS NULL AND succeeded + failed >= total AND total > 0;

-- name: task_hold_back
-- A failed attempt's message waits for its retry and keeps the failure's note.
UPDATE {schema}.messages SET available_at = :until, error = :note
WHERE id = :ref AND state = 2 AND c_session = :session AND c_tx = :tx;

-- name: window_open
INSERT INTO {schema}.rate_windows (task_type, kind, start, used) VALUES (:task_type, :kind, :start, 0)
ON CONFLICT DO NOTHING;

-- name: window_take
-- expect 1: a start within the window's cap, counted for every worker at once
UPDATE {schema}.rate_windows SET used = used + :n
WHERE task_type = :task_type AND kind = :kind AND start = :start AND used + :n <= :cap;

-- name: window_used
SELECT kind, start, used FROM {schema}.rate_windows WHERE task_type = :task_type AND start >= :since
ORDER BY start;

-- name: windows_expire
DELETE FROM {schema}.rate_windows WHERE start < :before;

-- name: schedule_upsert
INSERT INTO {schema}.schedules (name, task_type, cron, tz, args, next_due)
VALUES (:name, :task_type, :cron, :tz, :args, :next_due)
ON CONFLICT (name) DO UPDATE SET
    task_type = excluded.task_type, args = excluded.args,
    next_due = CASE WHEN schedules.cron = excluded.cron AND schedules.tz = excluded.tz
                    THEN schedules.next_due ELSE excluded.next_due END,
    cron = excluded.cron, tz = excluded.tz;

-- name: schedules_due
SELECT name, task_type, cron, tz, args, next_due FROM {schema}.schedules
WHERE next_due <= :now ORDER BY next_due;

-- name: schedule_list
SELECT name, task_type, cron, tz, args, next_due FROM {schema}.schedules ORDER BY name;

-- name: schedule_delete
DELETE FROM {schema}.schedules WHERE name = :name;

-- name: metric_set
INSERT INTO {schema}.metrics (name, value, at) VALUES (:name, :value, :now)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, at = excluded.at;

-- name: metric_get
SELECT value, at FROM {schema}.metrics WHERE name = :name;

-- name: tasks_expire
DELETE FROM {schema}.tasks WHERE expires_at <= :now;

-- name: jobs_expire_tasks
DELETE FROM {schema}.tasks WHERE job_id IN (
    SELECT id FROM {schema}.jobs WHERE ended_at IS NOT NULL AND alerted_at IS NOT NULL
      AND retention IS NOT NULL AND ended_at + retention <= :now);

-- name: jobs_expire
DELETE FROM {schema}.jobs WHERE ended_at IS NOT NULL AND alerted_at IS NOT NULL
  AND retention IS NOT NULL AND ended_at + retention <= :now;
