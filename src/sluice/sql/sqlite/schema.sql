-- The sluice schema for SQLite, as the numbered migrations leave it.
-- A test proves that applying migrations/ from zero yields exactly this.

-- queues.types: JSON array of the message types a queue accepts (NULL: any);
-- queues.priority_functions: JSON object, message type -> priority expression.
-- queues.isolation: how concurrent readers are isolated (docs/isolation.md).
-- messages.grp: the producer's group; messages.lane: the ordering unit (group, writer
-- or block) a message waits in; state 5: waiting behind the lane's head.
-- messages.type: the message's type; t1-t4, n1-n4: declared properties' values
-- (text and numbers), in the slots queue_properties assigns.
-- queues.kind, topic_id, selector, pointer, durable, owner_session, expire_after, used_at,
-- pull_window, priority_levels, max_in_flight, retention and messages.ref, settled_at:
-- topics, subscriptions, priority levels, credit and kept outcomes (0006_topics.sql).
-- queues.paused: claims take nothing from the queue while it is set (0009_pause.sql).
CREATE TABLE queues (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL UNIQUE,
    max_attempts INTEGER,
    error_queue  TEXT,
    durability   TEXT    NOT NULL CHECK (durability IN ('persistent', 'transient')),
    max_size     INTEGER NOT NULL,
    created_at   REAL    NOT NULL,
    types        TEXT,
    priority_functions TEXT,
    isolation    TEXT    NOT NULL DEFAULT 'none'
    CHECK (isolation IN ('none', 'ordered', 'blockwise', 'ordered_blockwise')),
    kind         TEXT    NOT NULL DEFAULT 'queue'
    CHECK (kind IN ('queue', 'topic', 'subscription')),
    topic_id     INTEGER,
    selector     TEXT,
    pointer      INTEGER NOT NULL DEFAULT 0,
    durable      INTEGER NOT NULL DEFAULT 1,
    owner_session INTEGER,
    expire_after REAL,
    used_at      REAL,
    pull_window  INTEGER,
    priority_levels INTEGER,
    max_in_flight INTEGER,
    retention    REAL,
    paused       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX queues_topic ON queues (topic_id) WHERE topic_id IS NOT NULL;

CREATE TABLE sessions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   REAL    NOT NULL,
    heartbeat_at REAL    NOT NULL,
    lease        REAL    NOT NULL,
    heartbeat_mono REAL
);

CREATE TABLE messages (
    id             INTEGER PRIMARY KEY,
    queue_id       INTEGER NOT NULL,
    state          INTEGER NOT NULL,
    priority       INTEGER NOT NULL,
    p_session      INTEGER NOT NULL,
    p_tx           INTEGER NOT NULL,
    p_num          INTEGER NOT NULL,
    c_session      INTEGER,
    c_tx           INTEGER,
    body           BLOB,
    content_type   TEXT,            -- NULL: application/json, the common case (17 bytes a row)
    properties     TEXT,
    correlation_id TEXT,
    reply_to       TEXT,
    enqueued_at    REAL    NOT NULL,
    available_at   REAL    NOT NULL,
    expires_at     REAL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    error          TEXT,
    origin_queue   TEXT,
    type           TEXT,
    t1 TEXT, t2 TEXT, t3 TEXT, t4 TEXT,
    n1 REAL, n2 REAL, n3 REAL, n4 REAL,
    grp            TEXT,
    lane           TEXT,
    ref            INTEGER,
    settled_at     REAL
);

-- One index serves claims (state 1 in delivery order), counts by state and
-- recovery's search for claimed rows; fewer indexes mean fewer pages per commit.
CREATE INDEX messages_queue ON messages (queue_id, state, priority DESC, id, available_at);

CREATE INDEX messages_pending ON messages (p_session, p_tx) WHERE state = 0;

CREATE INDEX messages_settled ON messages (queue_id, settled_at) WHERE state = 6;

CREATE INDEX messages_expiring ON messages (expires_at)
    WHERE state IN (1, 5) AND expires_at IS NOT NULL;

-- A lane's head and waiting messages, and who holds its messages.
CREATE INDEX messages_lane ON messages (queue_id, lane, state, id) WHERE lane IS NOT NULL;

CREATE TABLE message_types (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    kind       TEXT NOT NULL CHECK (kind IN ('json', 'xml')),
    definition TEXT NOT NULL,
    created_at REAL NOT NULL
);

CREATE TABLE properties (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    expression TEXT NOT NULL,
    type       TEXT NOT NULL CHECK (type IN ('text', 'number', 'boolean')),
    created_at REAL NOT NULL
);

CREATE TABLE queue_properties (
    queue_id    INTEGER NOT NULL,
    property_id INTEGER NOT NULL,
    slot        TEXT    NOT NULL CHECK (slot IN ('t1', 't2', 't3', 't4', 'n1', 'n2', 'n3', 'n4')),
    PRIMARY KEY (queue_id, property_id),
    UNIQUE (queue_id, slot)
);


-- Spark streams and sinks (docs/spark.md).
-- streams: a named consumer of a queue that holds what it took until Spark has
-- committed the micro-batch. Its session never expires (pid 0, endless lease), so
-- a stopped query's unacknowledged rounds wait for its restart; c_tx of a held
-- message is the round that took it. round: the last round begun; acked: the last
-- round acknowledged.
-- sinks: per streaming sink, the last micro-batch it published, so a replayed
-- batch publishes nothing twice.
CREATE TABLE streams (
    queue_id   INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    session    INTEGER NOT NULL,
    round      INTEGER NOT NULL DEFAULT 0,
    acked      INTEGER NOT NULL DEFAULT 0,
    created_at REAL    NOT NULL,
    PRIMARY KEY (queue_id, name)
);

CREATE TABLE sinks (
    name       TEXT    PRIMARY KEY,
    batch      INTEGER NOT NULL,
    updated_at REAL    NOT NULL
);

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

-- Declarative rules (0007_rules.sql): stored properties, slices, the applied application.
CREATE TABLE stored_properties (
    queue_id   INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    type       TEXT    NOT NULL
        CHECK (type IN ('text', 'integer', 'real', 'boolean', 'timestamp')),
    expression TEXT,
    fixed      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, name)
);
CREATE TABLE slice_members (
    slicing    TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    message_id INTEGER NOT NULL,
    PRIMARY KEY (slicing, key, message_id)
) WITHOUT ROWID;
CREATE INDEX slice_members_message ON slice_members (message_id);
CREATE TABLE rules_catalog (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    version     INTEGER NOT NULL,
    application TEXT    NOT NULL,
    applied_at  REAL    NOT NULL
);

-- API keys of the HTTP server (0008_server.sql): stored as the SHA-256 of their secrets.
CREATE TABLE api_keys (
    name       TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL UNIQUE,
    grants     TEXT    NOT NULL,
    admin      INTEGER NOT NULL DEFAULT 0,
    created_at REAL    NOT NULL,
    used_at    REAL,
    revoked_at REAL,
    signing    TEXT
);

-- The answers of requests with an Idempotency-Key (0008_server.sql).
CREATE TABLE idempotency (
    owner       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    status      INTEGER,
    answer      TEXT,
    started_at  REAL    NOT NULL,
    PRIMARY KEY (owner, key)
);
CREATE INDEX idempotency_started ON idempotency (started_at);

-- The queues that touch the outside world, and their transports (0010_gateways.sql).
CREATE TABLE gateways (
    queue      TEXT    PRIMARY KEY,
    direction  TEXT    NOT NULL CHECK (direction IN ('in', 'out')),
    transport  TEXT    NOT NULL,
    settings   TEXT    NOT NULL,
    created_at REAL    NOT NULL
);

-- The SQS endpoint's attributes and tags of queues (0012_sqs.sql).
CREATE TABLE sqs_queues (
    name       TEXT    PRIMARY KEY,
    attributes TEXT    NOT NULL,
    tags       TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    changed_at REAL    NOT NULL
);
