-- Declarative rules (docs/rules.md); the tables are explained in the SQLite migration
-- of the same name.
CREATE TABLE {schema}.stored_properties (
    queue_id   integer NOT NULL,
    name       text    NOT NULL,
    type       text    NOT NULL
        CHECK (type IN ('text', 'integer', 'real', 'boolean', 'timestamp')),
    expression text,
    fixed      boolean NOT NULL DEFAULT false,
    PRIMARY KEY (queue_id, name)
);
CREATE TABLE {schema}.slice_members (
    slicing    text   NOT NULL,
    key        text   NOT NULL,
    message_id bigint NOT NULL,
    PRIMARY KEY (slicing, key, message_id)
);
CREATE INDEX slice_members_message ON {schema}.slice_members (message_id);
CREATE TABLE {schema}.rules_catalog (
    id          integer PRIMARY KEY CHECK (id = 1),
    version     bigint  NOT NULL,
    application text    NOT NULL,
    applied_at  double precision NOT NULL
);
