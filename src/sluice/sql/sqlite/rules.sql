-- fragment: rules_ids
-- A list of message ids, bound as a JSON array.
(SELECT value FROM json_each(:ids))

-- fragment: rules_body
-- A message's body as the rules engine reads it: content type, text, bytes.
m.content_type, m.body, NULL

-- name: rules_take
-- The next messages of a queue the rules engine processes: due, in delivery order.
-- Inside BEGIN IMMEDIATE, so nobody else takes them meanwhile.
SELECT id, properties, enqueued_at FROM messages
WHERE queue_id = :queue_id AND state = 1 AND available_at <= :now
ORDER BY priority DESC, id
LIMIT :limit;
