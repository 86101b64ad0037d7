-- Topics and subscriptions (docs/topics.md), written alike for SQLite and PostgreSQL.
-- A topic stores each message once. A subscription is a queue of its own whose
-- pointer is the topic's last message id it has taken or passed: before its
-- consumers claim, it takes (pulls) the topic's next messages its selector holds
-- for, up to its window of ready ones, as rows of its own (ref: the topic's id);
-- its consumers then claim, release and settle them as in any queue. Ids in a topic
-- follow commit order (SQLite has one writer; PostgreSQL's enqueues take the queue's
-- commit lock), so a pointer never passes a message that commits later.
-- {selector}: the subscription's compiled where over the topic's row m (or empty).
-- The topic's scans seek by id, not by queue (+queue_id keeps the queue index out):
-- they start at a pointer, where the queue index would read the whole topic. The one
-- exception, subscription_state's look past the pointer, seeks the queue index one
-- priority at a time (see there).

-- fragment: topic_levels
-- The distinct priorities of the ready (1) and waiting (5) messages of the topic of the
-- subscription row sub, each found by one seek of the delivery index (a loose scan).
levels(state, priority) AS (
    SELECT st.state, (SELECT m.priority FROM {schema}.messages AS m
                      WHERE m.queue_id = (SELECT topic_id FROM sub) AND m.state = st.state
                      ORDER BY m.priority DESC LIMIT 1)
    FROM (SELECT 1 AS state UNION ALL SELECT 5) AS st
    UNION ALL
    SELECT l.state, (SELECT m.priority FROM {schema}.messages AS m
                     WHERE m.queue_id = (SELECT topic_id FROM sub) AND m.state = l.state
                       AND m.priority < l.priority
                     ORDER BY m.priority DESC LIMIT 1)
    FROM levels AS l WHERE l.priority IS NOT NULL
)

-- fragment: topic_ahead
-- Whether the topic of subscription row sub has a message past its pointer: over
-- topic_levels, per priority one seek to its first id past the pointer.
EXISTS (SELECT 1 FROM levels AS l
        WHERE l.priority IS NOT NULL
          AND (SELECT m.id FROM {schema}.messages AS m
               WHERE m.queue_id = sub.topic_id AND m.state = l.state
                 AND m.priority = l.priority AND m.id > sub.pointer
               LIMIT 1) IS NOT NULL)

-- name: subscription_state
-- A subscription's id, topic, pointer, window, whether its topic has a message past the
-- pointer, when a consumer last used it, and its selector. Asked before every take that
-- may need a pull, so the look past the pointer is a loose scan of the delivery index
-- (topic_levels, topic_ahead): the topic's distinct priorities (each found by one seek),
-- then per priority one seek to its first id past the pointer. A seek by id from the
-- pointer instead read every row inserted after it, its subscriptions' copies among them,
-- at every take. The topic is a scalar subquery, not a join with sub: joined, SQLite
-- sorted the topic's rows for each priority and PostgreSQL merged them into one
-- semi-join, both reading every row the topic keeps (a few hundred microseconds per
-- thousand) where a seek reads one. PostgreSQL's claim_subscribed asks the same inside
-- a claim.
WITH RECURSIVE sub AS (
    SELECT id, topic_id, pointer, pull_window, used_at, selector FROM {schema}.queues
    WHERE name = :name AND kind = 'subscription'
), {topic_levels}
SELECT sub.id, sub.topic_id, sub.pointer, coalesce(sub.pull_window, 1000), {topic_ahead},
       sub.used_at, sub.selector
FROM sub;

-- name: subscription_row
-- A subscription's id, topic and pointer: all that stats and the passing of its pointer
-- need, without subscription_state's look past the pointer.
SELECT id, topic_id, pointer FROM {schema}.queues WHERE name = :name AND kind = 'subscription';

-- name: touch_subscription
UPDATE {schema}.queues SET used_at = :now WHERE id = :subscription;

-- name: subscriptions_of
SELECT name FROM {schema}.queues WHERE topic_id = (SELECT id FROM {schema}.queues WHERE name = :name)
ORDER BY name;

-- name: copy_queue_properties
-- A subscription reads its topic's declared properties from the same slots.
INSERT INTO {schema}.queue_properties (queue_id, property_id, slot)
SELECT (SELECT id FROM {schema}.queues WHERE name = :subscription), property_id, slot
FROM {schema}.queue_properties
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :topic);

-- name: topic_floor
-- What may go from a topic: messages up to the lowest pointer of its subscriptions
-- (all, where it has none), past the last collection (the topic's own pointer).
SELECT t.id, t.pointer, (SELECT min(s.pointer) FROM {schema}.queues AS s WHERE s.topic_id = t.id),
       (SELECT max(m.id) FROM {schema}.messages AS m
        WHERE m.id > t.pointer AND +m.queue_id = t.id AND m.state <> 0),
       t.retention
FROM {schema}.queues AS t WHERE t.name = :topic AND t.kind = 'topic';

-- name: collect
-- A bounded range of a topic every subscription has passed (and, with retention,
-- enqueued before :kept_before), with the tombstone of its newest message before.
DELETE FROM {schema}.messages
WHERE id > :after AND id <= :upto AND +queue_id = :topic AND state IN (1, 3, 5, 6)
  AND enqueued_at <= :kept_before;

-- name: topic_tombstone
-- The topic's newest message, passed by every subscription: kept as done, not deleted
-- (see SqlTopics._collect).
UPDATE {schema}.messages SET state = 6, settled_at = :now
WHERE id = :id AND state IN (1, 3, 5) AND enqueued_at <= :kept_before;

-- name: topic_remaining
SELECT min(m.id) FROM {schema}.messages AS m
WHERE m.id > :after AND m.id <= :upto AND +m.queue_id = :topic AND m.state <> 0;

-- name: set_collected
UPDATE {schema}.queues SET pointer = :upto WHERE id = :topic;

-- name: topics
SELECT name FROM {schema}.queues WHERE kind = 'topic' ORDER BY name;

-- name: ended_subscriptions
-- Non-durable subscriptions whose session has ended, and durable ones no consumer has
-- used for their expire_after.
SELECT name FROM {schema}.queues
WHERE kind = 'subscription'
  AND ((owner_session IS NOT NULL AND owner_session NOT IN (SELECT id FROM {schema}.sessions))
       OR (expire_after IS NOT NULL AND used_at + expire_after <= :now))
ORDER BY name;

-- name: subscription_info
SELECT s.name, t.name, s.pointer, s.selector, s.durable, s.expire_after, s.used_at
FROM {schema}.queues AS s JOIN {schema}.queues AS t ON t.id = s.topic_id
WHERE s.kind = 'subscription' AND (CAST(:topic AS text) IS NULL OR t.name = :topic)
ORDER BY s.name;

-- name: subscription_held
-- What a subscription has taken and not settled: how many, and the oldest.
SELECT count(*), min(enqueued_at) FROM {schema}.messages
WHERE queue_id = :subscription AND state IN (1, 2, 5);

-- name: topic_backlog
-- A subscription's messages still in its topic past its pointer: how many, the oldest,
-- and how many of them are not due yet (stats counts those as delayed, not ready).
SELECT count(*), min(m.enqueued_at), count(CASE WHEN m.available_at > :now THEN 1 END)
FROM {schema}.messages AS m
WHERE m.id > :pointer AND +m.queue_id = :topic AND m.state IN (1, 5){selector};

-- name: laggards
-- Selective subscriptions at their topic's lowest pointer: those that hold back its
-- collection, and may pass the messages they will never receive without taking any.
-- Not one a Spark stream reads by position: its uncommitted batch must read the same
-- rows again on replay, so only its commit moves the pointer.
SELECT s.name FROM {schema}.queues AS s
WHERE s.kind = 'subscription' AND s.selector IS NOT NULL
  AND s.pointer = (SELECT min(o.pointer) FROM {schema}.queues AS o WHERE o.topic_id = s.topic_id)
  AND NOT EXISTS (SELECT 1 FROM {schema}.streams AS st WHERE st.queue_id = s.id)
ORDER BY s.name;

-- name: next_selected
-- Within a bounded span past the pointer: the first topic message the selector holds
-- for, and the last message of the topic.
SELECT (SELECT min(m.id) FROM {schema}.messages AS m
        WHERE m.id > :pointer AND m.id <= :upto AND +m.queue_id = :topic
          AND m.state IN (1, 5){selector}),
       (SELECT max(m.id) FROM {schema}.messages AS m
        WHERE m.id > :pointer AND m.id <= :upto AND +m.queue_id = :topic AND m.state <> 0);

-- name: pass_pointer
-- Passing messages is not using the subscription: used_at stays.
UPDATE {schema}.queues SET pointer = :pointer WHERE id = :subscription AND pointer < :pointer;
