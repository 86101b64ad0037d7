-- Topics and subscriptions: PostgreSQL's own statements (see common/topics.sql).

-- name: pull
-- As SQLite's: the topic's next messages in (pointer, upto] that the selector holds for,
-- up to %(room)s (NULL: all), become the subscription's, in the topic's order.
INSERT INTO {schema}.messages (
    slot, queue_id, state, priority, p_session, p_tx, p_num, body, body_bytes, content_type,
    properties, correlation_id, reply_to, enqueued_at, available_at, expires_at, type,
    t1, t2, t3, t4, n1, n2, n3, n4, grp, lane, ref)
SELECT (SELECT slot FROM {schema}.rotation), %(subscription)s,
       CASE WHEN m.lane IS NULL THEN 1 ELSE 5 END, m.priority, m.p_session, m.p_tx, m.p_num,
       m.body, m.body_bytes, m.content_type, m.properties, m.correlation_id, m.reply_to,
       m.enqueued_at, m.available_at, m.expires_at, m.type, m.t1, m.t2, m.t3, m.t4, m.n1,
       m.n2, m.n3, m.n4, m.grp, m.lane, m.id
FROM {schema}.messages AS m
WHERE m.id > %(pointer)s AND m.id <= %(upto)s AND +m.queue_id = %(topic)s
  AND m.state IN (1, 5){selector}
ORDER BY m.id
LIMIT %(room)s
RETURNING ref, lane;

-- name: set_pointer
UPDATE {schema}.queues SET pointer = greatest(pointer, %(pointer)s), used_at = %(now)s
WHERE id = %(subscription)s;

-- name: lock_subscription
-- One pull per subscription at a time: a second waits, then starts from the new pointer.
SELECT pointer FROM {schema}.queues WHERE id = %(subscription)s FOR UPDATE;
