-- Topics and subscriptions, priority levels, credit and kept outcomes (docs/topics.md).
-- queues.kind: a plain queue, a topic (a destination whose messages each of its
-- subscriptions receives) or a subscription (consumed as a queue of its own).
-- A subscription's topic_id, selector (its where, as written), pointer (the topic's
-- last message id it has taken or passed), durable, owner_session (a non-durable
-- one ends with it), expire_after and used_at (an abandoned one is dropped), and
-- pull_window (how many ready messages it takes from the topic ahead of consumers).
-- priority_levels: producers' priorities map onto this many levels (Qpid's mapping);
-- max_in_flight: the most messages the queue's consumers hold unsettled at once;
-- retention: seconds settled messages are kept (state 6, done), NULL: deleted at once.
-- messages.ref: on a subscription's row, the topic message it was taken from;
-- messages.settled_at: when a kept message was settled.
ALTER TABLE queues ADD COLUMN kind TEXT NOT NULL DEFAULT 'queue'
    CHECK (kind IN ('queue', 'topic', 'subscription'));
ALTER TABLE queues ADD COLUMN topic_id INTEGER;
ALTER TABLE queues ADD COLUMN selector TEXT;
ALTER TABLE queues ADD COLUMN pointer INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queues ADD COLUMN durable INTEGER NOT NULL DEFAULT 1;
ALTER TABLE queues ADD COLUMN owner_session INTEGER;
ALTER TABLE queues ADD COLUMN expire_after REAL;
ALTER TABLE queues ADD COLUMN used_at REAL;
ALTER TABLE queues ADD COLUMN pull_window INTEGER;
ALTER TABLE queues ADD COLUMN priority_levels INTEGER;
ALTER TABLE queues ADD COLUMN max_in_flight INTEGER;
ALTER TABLE queues ADD COLUMN retention REAL;
ALTER TABLE messages ADD COLUMN ref INTEGER;
ALTER TABLE messages ADD COLUMN settled_at REAL;
CREATE INDEX queues_topic ON queues (topic_id) WHERE topic_id IS NOT NULL;
-- Kept outcomes past their retention, found without a scan.
CREATE INDEX messages_settled ON messages (queue_id, settled_at) WHERE state = 6;
