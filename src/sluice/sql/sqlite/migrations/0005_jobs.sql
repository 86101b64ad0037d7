-- Jobs, tasks, throughput profiles and schedules (docs/jobs.md).
-- task_types: defaults of a kind of task and the queue its tasks wait in; profile is
-- the throughput profile as JSON (NULL: no limit).
-- jobs: a group of tasks submitted together; its id is the submitting transaction's.
-- succeeded and failed count finished tasks, so status rolls up without a scan;
-- served_at turns late jobs round-robin; alerted_at: the completion alert was sent.
-- tasks: the record of a finished task (an unfinished one is a message).
-- rate_windows: tasks started per task type in one hour or processing cycle, shared
-- by every worker. schedules: cron schedules and when each is next due.
-- metrics: load signals reported by applications, read by load-following profiles.
CREATE TABLE task_types (
    name         TEXT    PRIMARY KEY,
    queue        TEXT    NOT NULL,
    priority     INTEGER NOT NULL,
    duration     REAL,
    max_attempts INTEGER NOT NULL,
    backoff      REAL    NOT NULL,
    backoff_max  REAL    NOT NULL,
    timeout      REAL,
    retention    REAL,
    profile      TEXT
);

CREATE TABLE jobs (
    id          TEXT    PRIMARY KEY,
    name        TEXT    NOT NULL,
    job_type    TEXT,
    priority    INTEGER NOT NULL,
    deadline    REAL,
    owner       TEXT,
    info        TEXT    NOT NULL,
    alert_queue TEXT,
    retention   REAL,
    total       INTEGER NOT NULL,
    succeeded   INTEGER NOT NULL DEFAULT 0,
    failed      INTEGER NOT NULL DEFAULT 0,
    created_at  REAL    NOT NULL,
    started_at  REAL,
    ended_at    REAL,
    alerted_at  REAL,
    served_at   REAL    NOT NULL DEFAULT 0
);
CREATE INDEX jobs_open ON jobs (deadline) WHERE ended_at IS NULL;
CREATE INDEX jobs_ended ON jobs (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE tasks (
    task       TEXT    PRIMARY KEY,
    job_id     TEXT,
    task_type  TEXT    NOT NULL,
    success    INTEGER NOT NULL,
    note       TEXT,
    attempts   INTEGER NOT NULL,
    started_at REAL    NOT NULL,
    ended_at   REAL    NOT NULL,
    expires_at REAL
);
CREATE INDEX tasks_job ON tasks (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX tasks_expiring ON tasks (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE rate_windows (
    task_type TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    start     REAL    NOT NULL,
    used      INTEGER NOT NULL,
    PRIMARY KEY (task_type, kind, start)
);

CREATE TABLE schedules (
    name      TEXT PRIMARY KEY,
    task_type TEXT NOT NULL,
    cron      TEXT NOT NULL,
    tz        TEXT NOT NULL,
    args      TEXT NOT NULL,
    next_due  REAL NOT NULL
);

CREATE TABLE metrics (
    name  TEXT PRIMARY KEY,
    value REAL NOT NULL,
    at    REAL NOT NULL
);

-- The processing order of task queues (sluice.jobs.catalog): every key descending,
-- then delivery order; only task messages (n1, the job priority, is set on every task).
CREATE INDEX messages_tasks ON messages
    (queue_id, state, n1 DESC, n2 DESC, n4 DESC, n3 DESC, priority DESC, id) WHERE n1 IS NOT NULL;
