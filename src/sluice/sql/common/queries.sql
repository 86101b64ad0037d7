-- Statements of the queue engine written alike for SQLite and PostgreSQL (see
-- sluice.sql): ":name" placeholders, tables as {schema}.table. A section starts with
-- "-- name: <statement>", or "-- fragment: <name>" for fixed text that statements take
-- as {name} at load.
-- {message_columns}: the columns of a message row over the alias m, a fragment each
-- backend gives (sluice.backends.base.MESSAGE_COLUMNS).
-- {select} and {order}: holes for a selective or ordering dequeue's condition and keys
-- (compiled expressions over the row m), filled at run time; empty without a selection.
-- Message states: 0 pending (uncommitted enqueue), 1 ready, 2 claimed, 3 expired, 4 failed,
-- 5 waiting behind the head of its lane, 6 done (settled, kept by a queue with retention).

-- fragment: ready_or_own
-- What a transaction may claim: ready messages, and its own uncommitted enqueues (they
-- keep state 0 until commit).
(state = 1 OR (state = 0 AND p_session = :session AND p_tx = :tx))

-- name: close_session
DELETE FROM {schema}.sessions WHERE id = :session;

-- name: insert_queue
-- A subscription starts at :pointer, or (NULL) after the topic's last message: it
-- receives what is published from now on.
INSERT INTO {schema}.queues (name, max_attempts, error_queue, durability, max_size, types,
                             priority_functions, isolation, created_at, kind, topic_id,
                             selector, durable, expire_after, pull_window, priority_levels,
                             max_in_flight, retention, owner_session, used_at, pointer)
SELECT :name, :max_attempts, :error_queue, :durability, :max_size, :types,
       :priority_functions, :isolation, :now, :kind, t.id, :selector, :durable,
       :expire_after, :pull_window, :priority_levels, :max_in_flight, :retention,
       :owner_session, :now,
       coalesce(:pointer, (SELECT max(m.id) FROM {schema}.messages AS m
                           WHERE m.queue_id = t.id), 0)
FROM (SELECT (SELECT id FROM {schema}.queues WHERE name = :topic AND kind = 'topic') AS id) AS t
WHERE :topic IS NULL OR t.id IS NOT NULL;

-- fragment: spec_columns
-- What spec_from_row reads, over the queue q and its topic t.
q.name, q.max_attempts, q.error_queue, q.durability, q.max_size, q.types,
q.priority_functions, q.isolation, q.kind, t.name, q.selector, q.durable, q.expire_after,
q.pull_window, q.priority_levels, q.max_in_flight, q.retention, q.paused

-- name: get_queue
SELECT {spec_columns}
FROM {schema}.queues AS q LEFT JOIN {schema}.queues AS t ON t.id = q.topic_id
WHERE q.name = :name;

-- name: list_queues
SELECT {spec_columns}
FROM {schema}.queues AS q LEFT JOIN {schema}.queues AS t ON t.id = q.topic_id
ORDER BY q.name;

-- name: set_paused
-- Pausing is a column of its own, apart from update_queue's settings: an alter that read
-- the settings before a pause cannot undo it.
UPDATE {schema}.queues SET paused = :paused WHERE name = :name;

-- name: queues_referencing
SELECT name FROM {schema}.queues WHERE error_queue = :name AND name <> :name ORDER BY name;

-- name: delete_queue_messages
DELETE FROM {schema}.messages WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :name);

-- name: delete_queue_properties
DELETE FROM {schema}.queue_properties
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :name);

-- name: delete_queue
DELETE FROM {schema}.queues WHERE name = :name;

-- name: insert_type
INSERT INTO {schema}.message_types (name, kind, definition, created_at)
VALUES (:name, :kind, :definition, :now);

-- name: list_types
SELECT name, kind, definition FROM {schema}.message_types ORDER BY name;

-- name: insert_property
INSERT INTO {schema}.properties (name, expression, type, created_at)
VALUES (:name, :expression, :type, :now);

-- name: insert_queue_property
INSERT INTO {schema}.queue_properties (queue_id, property_id, slot)
SELECT q.id, p.id, :slot FROM {schema}.queues AS q, {schema}.properties AS p
WHERE q.name = :queue AND p.name = :name;

-- name: slot_index_t1
-- One per slot (t1-t4 text, n1-n4 numeric), made when a property first uses the slot:
-- until then no enqueue pays for it. A selection on the property seeks to its value
-- and reads on in delivery order.
CREATE INDEX IF NOT EXISTS messages_t1 ON {schema}.messages
    (queue_id, state, t1, priority DESC, id) WHERE t1 IS NOT NULL;

-- name: slot_index_t2
CREATE INDEX IF NOT EXISTS messages_t2 ON {schema}.messages
    (queue_id, state, t2, priority DESC, id) WHERE t2 IS NOT NULL;

-- name: slot_index_t3
CREATE INDEX IF NOT EXISTS messages_t3 ON {schema}.messages
    (queue_id, state, t3, priority DESC, id) WHERE t3 IS NOT NULL;

-- name: slot_index_t4
CREATE INDEX IF NOT EXISTS messages_t4 ON {schema}.messages
    (queue_id, state, t4, priority DESC, id) WHERE t4 IS NOT NULL;

-- name: slot_index_n1
CREATE INDEX IF NOT EXISTS messages_n1 ON {schema}.messages
    (queue_id, state, n1, priority DESC, id) WHERE n1 IS NOT NULL;

-- name: slot_index_n2
CREATE INDEX IF NOT EXISTS messages_n2 ON {schema}.messages
    (queue_id, state, n2, priority DESC, id) WHERE n2 IS NOT NULL;

-- name: slot_index_n3
CREATE INDEX IF NOT EXISTS messages_n3 ON {schema}.messages
    (queue_id, state, n3, priority DESC, id) WHERE n3 IS NOT NULL;

-- name: slot_index_n4
CREATE INDEX IF NOT EXISTS messages_n4 ON {schema}.messages
    (queue_id, state, n4, priority DESC, id) WHERE n4 IS NOT NULL;

-- name: property_fill_t1
-- One per slot: messages already queued get a new property's value (the hole: the
-- property's compiled expression over the row m), one statement per queue.
UPDATE {schema}.messages AS m SET t1 = {value}
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);

-- name: property_fill_t2
UPDATE {schema}.messages AS m SET t2 = {value}
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);

-- name: property_fill_t3
UPDATE {schema}.messages AS m SET t3 = {value}
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);

-- name: property_fill_t4
UPDATE {schema}.messages AS m SET t4 = {value}
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);

-- name: property_fill_n1
UPDATE {schema}.messages AS m SET n1 = {value}
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);

-- name: property_fill_n2
UPDATE {schema}.messages AS m SET n2 = {value}
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);

-- name: property_fill_n3
UPDATE {schema}.messages AS m SET n3 = {value}
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);

-- name: property_fill_n4
UPDATE {schema}.messages AS m SET n4 = {value}
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);

-- name: queue_properties
SELECT p.name, p.expression, p.type, qp.slot
FROM {schema}.queue_properties AS qp JOIN {schema}.properties AS p ON p.id = qp.property_id
WHERE qp.queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue)
ORDER BY qp.slot;

-- name: delete_pending
DELETE FROM {schema}.messages WHERE state = 0 AND p_session = :session AND p_tx = :tx;

-- name: browse
-- (state < 6: the index range leaves out what a queue with retention kept.)
SELECT {message_columns} FROM {schema}.messages AS m
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue) AND state < 6
  AND (
        (:state = 'ready'
            AND (state IN (1, 5) OR (state = 0 AND p_session = :session AND p_tx = :tx))
            AND available_at <= :now AND (expires_at IS NULL OR expires_at > :now))
     OR (:state = 'delayed' AND state IN (1, 5) AND available_at > :now)
     OR (:state = 'claimed' AND state = 2)
     OR (:state = 'expired' AND state = 3)
     OR (:state = 'failed' AND state = 4)){select}
  -- Paging: after the position (priority, id) of the last message of the page before.
  AND (CAST(:after_id AS bigint) IS NULL OR priority < :after_priority
       OR (priority = :after_priority AND id > :after_id))
ORDER BY {order}priority DESC, id
LIMIT :limit;

-- name: browse_done
-- What a queue with retention kept, in settle order (messages_settled: no sort).
SELECT {message_columns} FROM {schema}.messages AS m
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue) AND state = 6{select}
ORDER BY {order}settled_at, id
LIMIT :limit;

-- name: purge
-- Only kept outcomes (expired, failed) are purged; live messages never are.
DELETE FROM {schema}.messages
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue)
  AND state = :state AND enqueued_at <= :before;

-- name: purge_done
-- Done messages go by when they were settled (through messages_settled).
DELETE FROM {schema}.messages
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue)
  AND state = 6 AND settled_at <= :before;

-- name: purge_ready
-- Everything not yet delivered: ready now or delayed (state 1), or waiting in a lane
-- (state 5), so no lane is left behind a head that went. Claimed (2) and pending (0)
-- rows are their holders' and writers' to settle; a claim that got there first wins.
DELETE FROM {schema}.messages
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue) AND state IN (1, 5);

-- name: failed_origins
-- The queues a queue's failed messages came from, and how many of them (those selected,
-- or the one at :ref) came from each. Failed: rejected or out of attempts, and held by
-- no one: ready in an error queue, or kept as failed where their queue has none.
SELECT m.origin_queue, count(*) FROM {schema}.messages AS m
WHERE m.queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue)
  AND m.state IN (1, 4) AND m.origin_queue IS NOT NULL
  AND (CAST(:ref AS bigint) IS NULL OR m.id = :ref){select}
GROUP BY m.origin_queue;

-- name: retry_failed
-- Failed messages that came from :origin go back to it, in one statement, as fresh:
-- no attempts, no error, and in no lane (theirs went on without them when they failed).
-- They keep their id, hence their place in the queue's delivery order.
UPDATE {schema}.messages AS m
SET queue_id = (SELECT id FROM {schema}.queues WHERE name = :origin),
    state = 1, attempts = 0, error = NULL, origin_queue = NULL, lane = NULL
WHERE m.queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue)
  AND m.state IN (1, 4) AND m.origin_queue = :origin
  AND (CAST(:ref AS bigint) IS NULL OR m.id = :ref){select};

-- name: discard_failed
DELETE FROM {schema}.messages AS m
WHERE m.queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue)
  AND m.state IN (1, 4) AND m.origin_queue IS NOT NULL
  AND (CAST(:ref AS bigint) IS NULL OR m.id = :ref){select};

-- name: next_due
SELECT min(available_at) FROM {schema}.messages
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue AND NOT paused)
  AND state = 1 AND available_at > :now;

-- name: stream_find
-- A Spark stream (see 0004_streams.sql): its session, last round and last acknowledged one.
SELECT s.session, s.round, s.acked
FROM {schema}.streams AS s JOIN {schema}.queues AS q ON q.id = s.queue_id
WHERE q.name = :queue AND s.name = :name;

-- name: queue_retention
SELECT retention FROM {schema}.queues WHERE name = :queue;

-- name: stream_keep
-- Spark committed a stream's rounds (:after, :upto] of a queue with retention: what it
-- holds of them in place becomes done, as a transaction's settled messages do.
UPDATE {schema}.messages SET state = 6, settled_at = :now, c_session = NULL, c_tx = NULL
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue) AND state = 2
  AND c_session = :session AND c_tx > :after AND c_tx <= :upto
RETURNING lane;

-- name: stream_delete
DELETE FROM {schema}.streams WHERE session = :session;

-- name: streams_of_queue
SELECT s.session FROM {schema}.streams AS s JOIN {schema}.queues AS q ON q.id = s.queue_id
WHERE q.name = :name;

-- name: stream_pointer
-- A position stream's queue: how far it has read (a subscription: its place in its topic).
SELECT pointer FROM {schema}.queues WHERE name = :queue;

-- name: stream_last
-- A queue's last message in (:after, :ceiling], pending ones aside (their ids are drawn
-- before their commit, and replaced at it): a position stream passes every message up
-- to it. From the top by id, not by queue (+queue_id).
SELECT m.id FROM {schema}.messages AS m
WHERE m.id > :after AND m.id <= :ceiling
  AND +m.queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue) AND m.state <> 0
ORDER BY m.id DESC
LIMIT 1;

-- name: stream_first
-- As stream_last, the first: a position stream's windows start there, not in the ids of
-- other queues' messages before it.
SELECT m.id FROM {schema}.messages AS m
WHERE m.id > :after AND m.id <= :ceiling
  AND +m.queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue) AND m.state <> 0
ORDER BY m.id
LIMIT 1;

-- name: sink_batch
SELECT batch FROM {schema}.sinks WHERE name = :name;

-- name: sink_orphans
-- The sink's staging sessions of batches up to this one that were not published.
DELETE FROM {schema}.sessions WHERE host = :host AND pid <= :batch;

-- name: sink_forget
DELETE FROM {schema}.sinks WHERE name = :name;

-- name: scan
-- A page of a batch read: as browse, by id within (after, upto]; a Spark read's rows.
SELECT {read_columns} FROM {schema}.messages AS m
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue)
  AND id > :after AND id <= :upto
  AND (
        (:state = 'ready' AND state IN (1, 5)
            AND available_at <= :now AND (expires_at IS NULL OR expires_at > :now))
     OR (:state = 'delayed' AND state IN (1, 5) AND available_at > :now)
     OR (:state = 'claimed' AND state = 2)
     OR (:state = 'expired' AND state = 3)
     OR (:state = 'failed' AND state = 4)
     OR (:state = 'done' AND state = 6)){select}
ORDER BY id
LIMIT :limit;

-- name: id_bounds
SELECT min(id), max(id), count(*) FROM {schema}.messages
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = :queue);
