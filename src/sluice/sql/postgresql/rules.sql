-- fragment: rules_ids
-- "is one of a list of message ids": = ANY keeps the primary key's index in every plan,
-- statistics or none (IN (SELECT unnest(...)) became a hash join over a scan without).
= ANY(%(ids)s::bigint[])

-- fragment: rules_in_queues
-- "is one of a list of queue ids" (an arrival group's), bound as queues as rules_ids
-- binds ids.
= ANY(%(queues)s::bigint[])

-- fragment: rules_keys
-- "is one of a list of slice keys", the list bound as a JSON array of texts.
IN (SELECT jsonb_array_elements_text(%(keys)s::jsonb))

-- fragment: rules_body
-- A message's body as the rules engine reads it: content type, text, bytes.
m.content_type, m.body, m.body_bytes

-- name: rules_take
-- The next messages of a queue the rules engine processes: due, in delivery order,
-- with the applied rules' version (the batch checks it is the one it compiled), none
-- from a paused queue; locked until this transaction ends, skipping those another
-- engine is processing.
SELECT id, properties, enqueued_at,
       (SELECT version FROM {schema}.rules_catalog WHERE id = 1) AS version
FROM {schema}.messages
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE id = %(queue_id)s AND NOT paused)
  AND state = 1 AND available_at <= %(now)s
ORDER BY priority DESC, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: rules_lock
-- Messages whose rules read relations or reset slices are processed by one engine at a
-- time per queue and per slicing they read (their outcomes may depend on each other): a
-- lock held until the transaction ends. key: a queue id, or a slicing's negative key.
SELECT pg_advisory_xact_lock(%(lock_class)s, %(key)s::integer);

-- name: rules_take_group
-- rules_take for an arrival group (rules/arrival.py): the next due messages of the
-- queues ids (none paused), in delivery order across them, each with its queue.
SELECT id, properties, enqueued_at,
       (SELECT version FROM {schema}.rules_catalog WHERE id = 1) AS version, queue_id
FROM {schema}.messages
WHERE queue_id IN (SELECT id FROM {schema}.queues WHERE id {rules_ids} AND NOT paused)
  AND state = 1 AND available_at <= %(now)s
ORDER BY priority DESC, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: rules_insert
-- As SQLite's (see there); the rows go to the current partition. And the batch's
-- triggers (ids) are settled in the same statement (one round trip less): done is
-- rules_done or rules_remove. The parts read the triggers from t, which parses each
-- JSON body once (j) for all the paths every part reads into it; t, like every part
-- of the statement, sees the triggers as they were before done. picks, aligned with
-- ids: per trigger the actions it chose, bit k for action k (each part takes its own).
WITH done AS ({done}),
     t AS MATERIALIZED (SELECT m.*, {rules_json_body} AS j, c.pick
                        FROM unnest(%(ids)s::bigint[], %(picks)s::bigint[]) AS c (id, pick)
                        JOIN {schema}.messages AS m ON m.id = c.id
                        WHERE m.state = 1),
     {parts}
INSERT INTO {schema}.messages (slot, queue_id, state, priority, p_session, p_tx, p_num, body,
                               body_bytes, content_type, properties, enqueued_at, available_at)
SELECT (SELECT slot FROM {schema}.rotation), a.queue_id, 1, 0, %(session)s, %(tx)s, a.p_num,
       a.body, a.body_bytes, a.content_type, a.properties, %(now)s, %(now)s
FROM ({rows}) AS a
ORDER BY a.p_num;

-- name: rules_commit_lock
-- The commit lock every enqueue takes on its queues (see the enqueue function), so that
-- messages become visible in commit order.
SELECT pg_advisory_xact_lock(%(lock_class)s, q.id)
FROM (SELECT id FROM {schema}.queues WHERE id = ANY(%(queue_ids)s::integer[]) ORDER BY id) AS q;

-- name: rules_reset
-- The slices a batch's rules reset, their members forgotten: pairs is a JSON array of
-- [slicing, key].
DELETE FROM {schema}.slice_members
WHERE (slicing, key) IN (SELECT p ->> 0, p ->> 1 FROM jsonb_array_elements(%(pairs)s::jsonb) AS p);

-- name: rules_take_evaluate
-- rules_take and rules_evaluate_lean in one statement, for a queue evaluated a batch at
-- once: the next due messages, locked, with the rules' columns and (last) the applied
-- version. The columns read the JSON body parsed once (j), as rules_insert's parts do.
SELECT m.id, NULL, NULL, NULL, NULL{columns},
       (SELECT version FROM {schema}.rules_catalog WHERE id = 1) AS version
FROM (SELECT m.*, {rules_json_body} AS j
      FROM {schema}.messages AS m
      WHERE m.queue_id = (SELECT id FROM {schema}.queues WHERE id = %(queue_id)s AND NOT paused)
        AND m.state = 1 AND m.available_at <= %(now)s
      ORDER BY m.priority DESC, m.id
      LIMIT %(limit)s
      FOR UPDATE OF m SKIP LOCKED) AS m
ORDER BY m.priority DESC, m.id;
