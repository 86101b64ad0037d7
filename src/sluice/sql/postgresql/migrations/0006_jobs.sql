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
CREATE TABLE {schema}.task_types (
    name         text    PRIMARY KEY,
    queue        text    NOT NULL,
    priority     bigint NOT NULL,
    duration     double precision,
    max_attempts bigint NOT NULL,
    backoff      double precision    NOT NULL,
    backoff_max  double precision    NOT NULL,
    timeout      double precision,
    retention    double precision,
    profile      text
);

CREATE TABLE {schema}.jobs (
    id          text    PRIMARY KEY,
    name        text    NOT NULL,
    job_type    text,
    priority    bigint NOT NULL,
    deadline    double precision,
    owner       text,
    info        text    NOT NULL,
    alert_queue text,
    retention   double precision,
    total       bigint NOT NULL,
    succeeded   bigint NOT NULL DEFAULT 0,
    failed      bigint NOT NULL DEFAULT 0,
    created_at  double precision    NOT NULL,
    started_at  double precision,
    ended_at    double precision,
    alerted_at  double precision,
    served_at   double precision    NOT NULL DEFAULT 0
);
CREATE INDEX jobs_open ON {schema}.jobs (deadline) WHERE ended_at IS NULL;
CREATE INDEX jobs_ended ON {schema}.jobs (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE {schema}.tasks (
    task       text    PRIMARY KEY,
    job_id     text,
    task_type  text    NOT NULL,
    success    bigint NOT NULL,
    note       text,
    attempts   bigint NOT NULL,
    started_at double precision    NOT NULL,
    ended_at   double precision    NOT NULL,
    expires_at double precision
);
CREATE INDEX tasks_job ON {schema}.tasks (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX tasks_expiring ON {schema}.tasks (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE {schema}.rate_windows (
    task_type text    NOT NULL,
    kind      text    NOT NULL,
    start     double precision    NOT NULL,
    used      bigint NOT NULL,
    PRIMARY KEY (task_type, kind, start)
);

CREATE TABLE {schema}.schedules (
    name      text PRIMARY KEY,
    task_type text NOT NULL,
    cron      text NOT NULL,
    tz        text NOT NULL,
    args      text NOT NULL,
    next_due  double precision NOT NULL
);

CREATE TABLE {schema}.metrics (
    name  text PRIMARY KEY,
    value double precision NOT NULL,
    at    double precision NOT NULL
);

-- The processing order of task queues (sluice.jobs.catalog): every key descending,
-- NULLs last as the compiled order says, then delivery order; only task messages.
CREATE INDEX messages_tasks ON {schema}.messages
    (queue_id, state, n1 DESC NULLS LAST, n2 DESC NULLS LAST, n4 DESC NULLS LAST,
     n3 DESC NULLS LAST, priority DESC, id) WHERE n1 IS NOT NULL;
