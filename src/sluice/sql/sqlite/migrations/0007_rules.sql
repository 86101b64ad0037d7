-- Declarative rules (docs/rules.md).
-- stored_properties: properties a queue's messages carry in their properties JSON,
-- any number per queue: computed at enqueue from ``expression`` where it has one,
-- checked against ``type`` (text, integer, real, boolean, timestamp) where set.
-- ``fixed``: computed only; setting it explicitly is an error.
CREATE TABLE stored_properties (
    queue_id   INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    type       TEXT    NOT NULL
        CHECK (type IN ('text', 'integer', 'real', 'boolean', 'timestamp')),
    expression TEXT,
    fixed      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, name)
);
-- slice_members: which messages each slice holds since its last reset. A message joins
-- the slices of its queue's slicings when the rules engine processes it; RESET deletes
-- a slice's rows, so a message no slice holds may be removed once its retention passed.
CREATE TABLE slice_members (
    slicing    TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    message_id INTEGER NOT NULL,
    PRIMARY KEY (slicing, key, message_id)
) WITHOUT ROWID;
CREATE INDEX slice_members_message ON slice_members (message_id);
-- rules_catalog: the applied rules application (one row), as JSON; its version tells
-- running engines to reload.
CREATE TABLE rules_catalog (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    version     INTEGER NOT NULL,
    application TEXT    NOT NULL,
    applied_at  REAL    NOT NULL
);
