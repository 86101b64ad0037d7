-- The sluice schema for SQLite, as the numbered migrations leave it.
-- A test proves that applying migrations/ from zero yields exactly this.

CREATE TABLE queues (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL UNIQUE,
    max_attempts INTEGER,
    error_queue  TEXT,
    durability   TEXT    NOT NULL CHECK (durability IN ('persistent', 'transient')),
    max_size     INTEGER NOT NULL,
    created_at   REAL    NOT NULL
);

CREATE TABLE sessions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   REAL    NOT NULL,
    heartbeat_at REAL    NOT NULL,
    lease        REAL    NOT NULL
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
    origin_queue   TEXT
);

-- One index serves claims (state 1 in delivery order), counts by state and
-- recovery's search for claimed rows; fewer indexes mean fewer pages per commit.
CREATE INDEX messages_queue ON messages (queue_id, state, priority DESC, id, available_at);

CREATE INDEX messages_pending ON messages (p_session, p_tx) WHERE state = 0;

CREATE INDEX messages_expiring ON messages (expires_at) WHERE state = 1 AND expires_at IS NOT NULL;
