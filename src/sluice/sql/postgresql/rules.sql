-- fragment: rules_ids
(SELECT unnest(%(ids)s::bigint[]))

-- fragment: rules_body
-- A message's body as the rules engine reads it: content type, text, bytes.
m.content_type, m.body, m.body_bytes

-- name: rules_take
-- The next messages of a queue the rules engine processes: due, in delivery order;
-- locked until this transaction ends, skipping those another engine is processing.
SELECT id, properties, enqueued_at FROM {schema}.messages
WHERE queue_id = %(queue_id)s AND state = 1 AND available_at <= %(now)s
ORDER BY priority DESC, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: rules_lock
-- Messages whose rules read relations or reset slices are processed by one engine at a
-- time per queue and per slicing they read (their outcomes may depend on each other): a
-- lock held until the transaction ends. key: a queue id, or a slicing's negative key.
SELECT pg_advisory_xact_lock(%(lock_class)s, %(key)s::integer);
