-- Topics and subscriptions: SQLite's own statements (see common/topics.sql).

-- name: pull
-- The topic's next messages in (pointer, upto] that the selector holds for, up to :room
-- (-1: all), become the subscription's, in the topic's order; a message of a lane waits
-- behind the lane's head (promote follows).
INSERT INTO messages (queue_id, state, priority, p_session, p_tx, p_num, body, content_type,
                      properties, correlation_id, reply_to, enqueued_at, available_at,
                      expires_at, type, t1, t2, t3, t4, n1, n2, n3, n4, grp, lane, ref)
SELECT :subscription, CASE WHEN m.lane IS NULL THEN 1 ELSE 5 END, m.priority, m.p_session,
       m.p_tx, m.p_num, m.body, m.content_type, m.properties, m.correlation_id, m.reply_to,
       m.enqueued_at, m.available_at, m.expires_at, m.type, m.t1, m.t2, m.t3, m.t4, m.n1,
       m.n2, m.n3, m.n4, m.grp, m.lane, m.id
FROM messages AS m
WHERE m.id > :pointer AND m.id <= :upto AND +m.queue_id = :topic AND m.state IN (1, 5){selector}
ORDER BY m.id
LIMIT :room
RETURNING ref, lane;

-- name: set_pointer
UPDATE queues SET pointer = max(pointer, :pointer), used_at = :now WHERE id = :subscription;

-- name: lock_subscription
-- BEGIN IMMEDIATE holds the write lock already: this only reads the pointer.
SELECT pointer FROM queues WHERE id = :subscription;

-- name: subscription_ready
-- How many ready messages a subscription has, counted up to :half (half its window:
-- below that it refills).
SELECT count(*) FROM (SELECT 1 FROM messages AS r
                      WHERE r.queue_id = :subscription AND r.state IN (1, 5)
                      LIMIT :half) AS ready;

-- name: topic_last
-- The topic's last message past :pointer (a pull that took less than it could has
-- passed every message up to it). Not an enqueue still pending (state 0): it is not
-- published until its transaction commits.
SELECT max(m.id) FROM messages AS m
WHERE m.id > :pointer AND +m.queue_id = :topic AND m.state <> 0;
