-- Topics and subscriptions, priority levels, credit and kept outcomes (docs/topics.md);
-- the columns are explained in the SQLite migration of the same name.
ALTER TABLE {schema}.queues ADD COLUMN kind text NOT NULL DEFAULT 'queue'
    CHECK (kind IN ('queue', 'topic', 'subscription'));
ALTER TABLE {schema}.queues ADD COLUMN topic_id integer;
ALTER TABLE {schema}.queues ADD COLUMN selector text;
ALTER TABLE {schema}.queues ADD COLUMN pointer bigint NOT NULL DEFAULT 0;
ALTER TABLE {schema}.queues ADD COLUMN durable boolean NOT NULL DEFAULT true;
ALTER TABLE {schema}.queues ADD COLUMN owner_session bigint;
ALTER TABLE {schema}.queues ADD COLUMN expire_after double precision;
ALTER TABLE {schema}.queues ADD COLUMN used_at double precision;
ALTER TABLE {schema}.queues ADD COLUMN pull_window integer;
ALTER TABLE {schema}.queues ADD COLUMN priority_levels integer;
ALTER TABLE {schema}.queues ADD COLUMN max_in_flight integer;
ALTER TABLE {schema}.queues ADD COLUMN retention double precision;
ALTER TABLE {schema}.messages ADD COLUMN ref bigint;
ALTER TABLE {schema}.messages ADD COLUMN settled_at double precision;
CREATE INDEX queues_topic ON {schema}.queues (topic_id) WHERE topic_id IS NOT NULL;
CREATE INDEX messages_settled ON {schema}.messages (queue_id, settled_at) WHERE state = 6;
