-- Content-aware queuing: message types, accepted types and priority functions per
-- queue, and declared properties stored in slots (t1-t4 text, n1-n4 numbers).

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

ALTER TABLE queues ADD COLUMN types TEXT;
ALTER TABLE queues ADD COLUMN priority_functions TEXT;
ALTER TABLE messages ADD COLUMN type TEXT;
ALTER TABLE messages ADD COLUMN t1 TEXT;
ALTER TABLE messages ADD COLUMN t2 TEXT;
ALTER TABLE messages ADD COLUMN t3 TEXT;
ALTER TABLE messages ADD COLUMN t4 TEXT;
ALTER TABLE messages ADD COLUMN n1 REAL;
ALTER TABLE messages ADD COLUMN n2 REAL;
ALTER TABLE messages ADD COLUMN n3 REAL;
ALTER TABLE messages ADD COLUMN n4 REAL;

