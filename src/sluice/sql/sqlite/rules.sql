-- fragment: rules_ids
-- "is one of a list of message ids", the list bound as a JSON array.
IN (SELECT value FROM json_each(:ids))

-- fragment: rules_in_queues
-- "is one of a list of queue ids" (an arrival group's), bound as queues as rules_ids
-- binds ids.
IN (SELECT value FROM json_each(:queues))

-- fragment: rules_keys
-- "is one of a list of slice keys", the list bound as a JSON array of texts.
IN (SELECT value FROM json_each(:keys))

-- fragment: rules_body
-- A message's body as the rules engine reads it: content type, text, bytes.
m.content_type, m.body, NULL

-- name: rules_take
-- The next messages of a queue the rules engine processes: due, in delivery order,
-- with the applied rules' version (the batch checks it is the one it compiled); none
-- from a paused queue. Inside BEGIN IMMEDIATE, so nobody else takes them meanwhile.
SELECT id, properties, enqueued_at,
       (SELECT version FROM rules_catalog WHERE id = 1) AS version
FROM messages
WHERE queue_id = (SELECT id FROM queues WHERE id = :queue_id AND NOT paused)
  AND state = 1 AND available_at <= :now
ORDER BY priority DESC, id
LIMIT :limit;

-- name: rules_take_group
-- rules_take for an arrival group (rules/arrival.py): the next due messages of the
-- queues ids (none paused), in delivery order across them, each with its queue.
SELECT id, properties, enqueued_at,
       (SELECT version FROM rules_catalog WHERE id = 1) AS version, queue_id
FROM messages
WHERE queue_id IN (SELECT id FROM queues WHERE id {rules_ids} AND NOT paused)
  AND state = 1 AND available_at <= :now
ORDER BY priority DESC, id
LIMIT :limit;

-- name: rules_insert
-- The fast way a batch's rules enqueue: every message its actions make, built by SQL
-- from their triggering messages, in one statement. parts: per action a materialized
-- n<k>, the new messages' body, content type and properties over their triggers m
-- (built once); rows: per action its rows over n<k> with their queue, p_num (the
-- trigger and the action) and final properties (the queue's computed properties over
-- n<k>), joined by UNION ALL. In p_num's order: per queue, trigger by trigger and action
-- by action, as the Python path makes them.
INSERT INTO messages (queue_id, state, priority, p_session, p_tx, p_num, body, content_type,
                      properties, enqueued_at, available_at)
WITH {parts}
SELECT a.queue_id, 1, 0, :session, :tx, a.p_num, a.body, a.content_type, a.properties,
       :now, :now
FROM ({rows}) AS a
ORDER BY a.p_num;

-- name: rules_reset
-- The slices a batch's rules reset, their members forgotten: pairs is a JSON array of
-- [slicing, key].
DELETE FROM slice_members
WHERE (slicing, key) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:pairs));

-- name: rules_take_evaluate
-- rules_take and rules_evaluate_lean in one statement, for a queue evaluated a batch at
-- once: the next due messages with the rules' columns and (last) the applied version.
SELECT m.id, NULL, NULL, NULL, NULL{columns},
       (SELECT version FROM rules_catalog WHERE id = 1) AS version
FROM messages AS m
WHERE m.queue_id = (SELECT id FROM queues WHERE id = :queue_id AND NOT paused)
  AND m.state = 1 AND m.available_at <= :now
ORDER BY m.priority DESC, m.id
LIMIT :limit;
