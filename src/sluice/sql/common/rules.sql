-- Declarative rules (sluice.rules, docs/rules.md): the stored properties of queues, the
-- applied application, slices, and the rules engine's unit of work.

-- name: stored_properties
SELECT sp.name, sp.type, sp.expression, sp.fixed
FROM {schema}.stored_properties AS sp
WHERE sp.queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue)
ORDER BY sp.name;

-- name: delete_stored_properties
DELETE FROM {schema}.stored_properties
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);

-- name: delete_queue_stored_properties
DELETE FROM {schema}.stored_properties
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :name);

-- name: insert_stored_property
INSERT INTO {schema}.stored_properties (queue_id, name, type, expression, fixed)
SELECT id, :name, :type, :expression, :fixed FROM {schema}.queues WHERE name = :queue;

-- name: rules_catalog_read
SELECT version, application FROM {schema}.rules_catalog WHERE id = 1;

-- name: rules_version
-- The applied version alone: engines look at it often, the application only when it
-- changed.
SELECT version FROM {schema}.rules_catalog WHERE id = 1;

-- name: rules_catalog_write
INSERT INTO {schema}.rules_catalog (id, version, application, applied_at)
VALUES (1, :version, :application, :now)
ON CONFLICT (id) DO UPDATE SET version = excluded.version,
                               application = excluded.application,
                               applied_at = excluded.applied_at;

-- name: rules_queue_ids
SELECT name, id FROM {schema}.queues;

-- name: rules_kept_count
-- Messages a queue keeps (any state but pending): a property's type may not change
-- under them.
SELECT count(*) FROM {schema}.messages
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue) AND state <> 0;

-- name: rules_forget_slicing
DELETE FROM {schema}.slice_members WHERE slicing = :slicing;

-- name: rules_done
-- The processed messages: kept (done, state 6) for slices and retention to decide.
UPDATE {schema}.messages SET state = 6, settled_at = :now
WHERE id {rules_ids} AND state = 1;

-- name: rules_remove
-- The processed messages of a queue that keeps none (no retention, no slicing holds
-- them, no rule reads the queue): removed at once, as a consumer's ack removes its
-- message, instead of kept (rules_done) for the removal to find a moment later.
DELETE FROM {schema}.messages WHERE id {rules_ids} AND state = 1;

-- name: rules_defer
-- An echo message not yet due: it waits until then.
UPDATE {schema}.messages SET available_at = :due WHERE id = :id AND state = 1;

-- name: rules_evaluate
-- The values every rule of a batch needs, one row per triggering message m, in the
-- order the messages were taken.
SELECT m.id, m.properties, {rules_body}{columns}
FROM {schema}.messages AS m
WHERE m.id {rules_ids}
ORDER BY m.priority DESC, m.id;

-- name: rules_evaluate_lean
-- As rules_evaluate, without the message's own properties and body (NULL in their
-- places): all the enqueues by SQL need; the Python path reads them again in full.
SELECT m.id, NULL, NULL, NULL, NULL{columns}
FROM {schema}.messages AS m
WHERE m.id {rules_ids}
ORDER BY m.priority DESC, m.id;

-- name: rules_message_id
-- The parts of a message's id (Message.id, "session/transaction/number"), for the
-- trigger of an error message.
SELECT p_session, p_tx, p_num FROM {schema}.messages WHERE id = :id;

-- name: rules_join
-- The processed messages join the slices of their queue's slicing ({value}: the key).
INSERT INTO {schema}.slice_members (slicing, key, message_id)
SELECT :slicing, {value}, m.id
FROM {schema}.messages AS m
WHERE m.id {rules_ids} AND {value} IS NOT NULL
ON CONFLICT DO NOTHING;

-- Rules on Spark (sluice.spark.rules): a micro-batch's messages come from the stream, by
-- id; its database part is one rules unit per queue, recorded like a sink's batch.

-- name: rules_take_given
-- rules_take for the messages a micro-batch read: those of ids still due and
-- unprocessed (a replayed batch finds the ones its first run processed gone) in the
-- queues of one queue or arrival group (queues, none paused; rules/arrival.py), in
-- delivery order across them, each with its queue.
SELECT id, properties, enqueued_at,
       (SELECT version FROM {schema}.rules_catalog WHERE id = 1) AS version, queue_id
FROM {schema}.messages
WHERE id {rules_ids} AND state = 1 AND available_at <= :now
  AND queue_id IN (SELECT id FROM {schema}.queues WHERE id {rules_in_queues} AND NOT paused)
ORDER BY priority DESC, id;

-- name: rules_stream_rows
-- A rules stream's messages of a queue up to a position: every one still unprocessed
-- and due at the batch's time, so that what came back behind the position is read too.
SELECT m.id, m.priority, m.properties, {rules_body}, m.enqueued_at,
       m.available_at, m.expires_at, m.attempts, m.type, m.correlation_id, m.reply_to
FROM {schema}.messages AS m
WHERE m.queue_id = :queue_id AND m.state = 1 AND m.id <= :upto AND m.available_at <= :now
ORDER BY m.id;

-- name: rules_stream_behind
-- Whether a rules stream has work behind its position: an echo message come due, or a
-- message deferred and due now.
SELECT 1 FROM {schema}.messages
WHERE queue_id = :queue_id AND state = 1 AND id <= :upto AND available_at <= :now
LIMIT 1;

-- name: rules_kept_rows
-- What queue('q') reads of a queue on Spark: its kept messages (KEPT_STATES), by id.
SELECT m.id, q.name, m.priority, m.properties, {rules_body}, m.enqueued_at,
       m.available_at, m.expires_at, m.attempts, m.type, m.correlation_id, m.reply_to
FROM {schema}.messages AS m
JOIN {schema}.queues AS q ON q.id = m.queue_id
WHERE m.queue_id = :queue_id AND m.state IN (1, 2, 5, 6)
ORDER BY m.id;

-- name: rules_batch_of
-- The last micro-batch a rules stream processed of a queue (kept as a sink's).
SELECT batch FROM {schema}.sinks WHERE name = :name;

-- name: rules_batch_record
INSERT INTO {schema}.sinks (name, batch, updated_at) VALUES (:name, :batch, :now)
ON CONFLICT (name) DO UPDATE SET batch = excluded.batch, updated_at = excluded.updated_at;

-- name: rules_slice_rows
-- The members of the slices a wave reads (keys bound as a JSON array of texts), as the
-- rules read them: the live members' messages, kept.
SELECT sm.slicing, sm.key, m.id, q.name, m.priority, m.properties, {rules_body},
       m.enqueued_at, m.available_at, m.expires_at, m.attempts, m.type, m.correlation_id,
       m.reply_to
FROM {schema}.slice_members AS sm
JOIN {schema}.messages AS m ON m.id = sm.message_id
JOIN {schema}.queues AS q ON q.id = m.queue_id
WHERE sm.slicing = :slicing AND sm.key {rules_keys} AND m.state IN (1, 2, 5, 6);
