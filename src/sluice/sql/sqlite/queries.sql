-- Statements of the SQLite backend that PostgreSQL writes differently; those written
-- alike are in common/queries.sql, whose header explains {message_columns}, {select},
-- {order} and fragments such as {ready_or_own}. A section starts with "-- name: <statement>".
-- Message states: 0 pending (uncommitted enqueue), 1 ready, 2 claimed, 3 expired, 4 failed,
-- 5 waiting behind the head of its lane (a group, or a writer or block of an isolated
-- queue: see 0003_isolation.sql), 6 done (settled, kept by a queue with retention).
-- A lane has at most one head, in state 1 or 2.
-- Columns read back for a message are always {message_columns} (sluice.backends.sqlite);
-- {claimed_columns} are the same with the claimed state (2) in the state column, for the
-- selects a batch claim marks claimed right after.
-- Every claim finds its queue "AND NOT paused": a paused queue (Queue.pause) gives its
-- consumers nothing, decided by the statement itself, whichever process paused it.

-- name: open_session
INSERT INTO sessions (host, pid, started_at, heartbeat_at, lease, heartbeat_mono)
VALUES (:host, :pid, :now, :now, :lease, :mono);

-- name: heartbeat
UPDATE sessions SET heartbeat_at = :now, heartbeat_mono = :mono WHERE id = :session;

-- name: list_sessions
SELECT id, host, pid, heartbeat_at, lease, heartbeat_mono FROM sessions;

-- name: newest_stamp
-- The latest enqueue time among the newest messages (by id, so a seek, not a scan).
SELECT max(enqueued_at) FROM (SELECT enqueued_at FROM messages ORDER BY id DESC LIMIT 1000);

-- name: update_queue
UPDATE queues
SET max_attempts = :max_attempts, error_queue = :error_queue,
    durability = :durability, max_size = :max_size, types = :types,
    priority_functions = :priority_functions, isolation = :isolation,
    expire_after = :expire_after, pull_window = :pull_window, priority_levels = :priority_levels,
    max_in_flight = :max_in_flight, retention = :retention
WHERE name = :name
  -- Lanes are drawn at enqueue: the level changes only while no message lives.
  AND (isolation = :isolation OR NOT EXISTS (
        SELECT 1 FROM messages WHERE queue_id = queues.id AND state IN (0, 1, 2, 5)));

-- name: lock_queue_row
-- BEGIN IMMEDIATE holds the write lock already: this only finds the queue.
SELECT id FROM queues WHERE name = :name;

-- name: queue_credit
-- What a queue with max_in_flight may still hand out: its cap less its claimed messages
-- (counted through the queue index); NULL without a cap. A capped claim runs it first in
-- its BEGIN IMMEDIATE transaction, so no other process claims between count and claim.
SELECT q.max_in_flight - (SELECT count(*) FROM messages AS c
                          WHERE c.queue_id = q.id AND c.state = 2)
FROM queues AS q WHERE q.name = :queue;

-- name: queue_in_flight
SELECT count(*) FROM messages
WHERE queue_id = (SELECT id FROM queues WHERE name = :name) AND state IN (0, 2);

-- name: insert_message
-- Plain placeholders, bound in order (Python 3.12 deprecates numbered ones bound from a
-- sequence; 3.14 refuses them): state, session, tx, then the 2nd to 11th fields of an
-- Envelope in order, then its queue's name (a message without type or properties:
-- binding nine NULLs would cost a third of an insert). No row if the queue is missing.
INSERT INTO messages (state, p_session, p_tx, p_num, priority, body, content_type, properties,
                      correlation_id, reply_to, enqueued_at, available_at, expires_at, queue_id)
SELECT ?, ?, ?, ?, ?, ?, nullif(?, 'application/json'), ?, ?, ?, ?, ?, ?, id
FROM queues WHERE name = ?;

-- name: queue_ids
SELECT name, id FROM queues;

-- name: insert_message_values
-- As insert_message, with the queue's id instead of its name.
INSERT INTO messages (state, p_session, p_tx, queue_id, p_num, priority, body, content_type,
                      properties, correlation_id, reply_to, enqueued_at, available_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, nullif(?, 'application/json'), ?, ?, ?, ?, ?, ?);

-- name: insert_typed_values
-- As insert_message_values, then the message type, the slots t1-t4, n1-n4, the group and
-- the lane. (A ready message with a lane waits, state 5, as the caller binds it: promote
-- follows.)
INSERT INTO messages (state, p_session, p_tx, queue_id, p_num, priority, body, content_type,
                      properties, correlation_id, reply_to, enqueued_at, available_at, expires_at,
                      type, t1, t2, t3, t4, n1, n2, n3, n4, grp, lane)
VALUES (?, ?, ?, ?, ?, ?, ?, nullif(?, 'application/json'), ?, ?, ?, ?, ?, ?,
        ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: publish_pending
-- Re-inserting (rather than flipping the state in place) gives the messages ids
-- in commit order, so a reader that follows ids never skips a late commit.
INSERT INTO messages (queue_id, state, priority, p_session, p_tx, p_num, body, content_type,
                      properties, correlation_id, reply_to, enqueued_at, available_at, expires_at,
                      type, t1, t2, t3, t4, n1, n2, n3, n4, grp, lane)
SELECT queue_id, CASE WHEN lane IS NULL THEN 1 ELSE 5 END, priority, p_session, p_tx, p_num,
       body, content_type, properties, correlation_id, reply_to, enqueued_at, available_at,
       expires_at, type, t1, t2, t3, t4, n1, n2, n3, n4, grp, lane
FROM messages WHERE state = 0 AND p_session = :session AND p_tx = :tx ORDER BY id;

-- name: promote
-- Each lane of :lanes (a JSON array of [queue, lane]) with no head, no message ready or
-- held, gets its oldest waiting message as head. Runs after whatever may have left a
-- lane headless: a publish, a commit or abort of held messages, recovery, expiry.
UPDATE messages SET state = 1
WHERE state = 5 AND id IN (
    SELECT (SELECT w.id FROM messages AS w
            WHERE w.queue_id = l.queue_id AND w.lane = l.lane AND w.state = 5
            ORDER BY w.id LIMIT 1)
    FROM (SELECT DISTINCT q.id AS queue_id, json_extract(j.value, '$[1]') AS lane
          FROM json_each(:lanes) AS j JOIN queues AS q ON q.name = json_extract(j.value, '$[0]')
         ) AS l
    WHERE NOT EXISTS (SELECT 1 FROM messages AS o
                      WHERE o.queue_id = l.queue_id AND o.lane = l.lane AND o.state = 1)
      AND NOT EXISTS (SELECT 1 FROM messages AS o
                      WHERE o.queue_id = l.queue_id AND o.lane = l.lane AND o.state = 2
                        -- a transaction's claim of its own enqueue holds no lane
                        AND (o.c_session <> o.p_session OR o.c_tx <> o.p_tx)));

-- name: lane_front
-- The writer and transaction of a lane's oldest message still waiting (or its head).
-- (Each state its own index seek: one IN would sort the whole lane.)
SELECT p_session, p_tx FROM (
    SELECT * FROM (SELECT id, p_session, p_tx FROM messages
                   WHERE queue_id = (SELECT id FROM queues WHERE name = :queue)
                     AND lane = :lane AND state = 1 ORDER BY id LIMIT 1)
    UNION ALL
    SELECT * FROM (SELECT id, p_session, p_tx FROM messages
                   WHERE queue_id = (SELECT id FROM queues WHERE name = :queue)
                     AND lane = :lane AND state = 5 ORDER BY id LIMIT 1))
ORDER BY id LIMIT 1;

-- name: claim_one
-- One message, in one statement: a scalar subquery is cheaper than materialising an id
-- list.
UPDATE messages SET state = 2, c_session = :session, c_tx = :tx
WHERE id = (
    SELECT id FROM messages AS m
    WHERE queue_id = (SELECT id FROM queues WHERE name = :queue AND NOT paused)
      AND state = 1 AND available_at <= :now AND (expires_at IS NULL OR expires_at > :now){select}
    ORDER BY {order}priority DESC, id
    LIMIT :limit)
RETURNING {message_columns};

-- name: claim_with_own_one
-- As claim_one; a transaction sees its own uncommitted enqueues.
UPDATE messages SET state = 2, c_session = :session, c_tx = :tx
WHERE id = (
    SELECT id FROM messages AS m
    WHERE queue_id = (SELECT id FROM queues WHERE name = :queue AND NOT paused)
      AND {ready_or_own}
      AND available_at <= :now AND (expires_at IS NULL OR expires_at > :now){select}
    ORDER BY {order}priority DESC, id
    LIMIT :limit)
RETURNING {message_columns};

-- name: stream_claim
-- A Spark stream's claim: the rows stay in the database (its tasks read them), so
-- nothing comes back but the count.
UPDATE messages SET state = 2, c_session = :session, c_tx = :tx
WHERE id IN (
    SELECT id FROM messages AS m
    WHERE queue_id = (SELECT id FROM queues WHERE name = :queue AND NOT paused)
      AND state = 1 AND available_at <= :now AND (expires_at IS NULL OR expires_at > :now){select}
    ORDER BY {order}priority DESC, id
    LIMIT :limit);

-- name: select_claimable
-- Batch claims select in delivery order, then mark by id (cheaper than RETURNING many rows).
SELECT {claimed_columns} FROM messages AS m
WHERE queue_id = (SELECT id FROM queues WHERE name = :queue AND NOT paused)
  AND state = 1 AND available_at <= :now AND (expires_at IS NULL OR expires_at > :now){select}
ORDER BY {order}priority DESC, id
LIMIT :limit;

-- name: select_claimable_with_own
SELECT {claimed_columns} FROM messages AS m
WHERE queue_id = (SELECT id FROM queues WHERE name = :queue AND NOT paused)
  AND {ready_or_own}
  AND available_at <= :now AND (expires_at IS NULL OR expires_at > :now){select}
ORDER BY {order}priority DESC, id
LIMIT :limit;

-- name: select_claimable_lanes
-- As select_claimable, and first the next messages of each lane in :lanes (a JSON array of
-- the lanes the transaction holds messages of), which only it may take: up to :run of
-- them in lane order, stopping at the first not yet available; other heads too unless
-- :fill is 0 (finish what it holds first). Each part seeks its own index; neither scans.
-- A lane counts only while the transaction still holds a message of it: one whose
-- session was taken for dead (it stalled) lost them to recovery, and another reader may
-- hold the lane now, whose next messages it would take out of its order.
SELECT {claimed_columns} FROM (
    SELECT 1 AS lane_rank, * FROM (
        SELECT m.* FROM messages AS m
        WHERE :fill AND queue_id = (SELECT id FROM queues WHERE name = :queue AND NOT paused)
          AND state = 1 AND available_at <= :now
          AND (expires_at IS NULL OR expires_at > :now){select}
        ORDER BY {order}priority DESC, id
        LIMIT :limit)
    UNION ALL
    SELECT 0, m.* FROM messages AS m
    WHERE m.id IN (
        SELECT id FROM (
            SELECT r.id, sum(r.available_at > :now OR coalesce(r.expires_at <= :now, 0))
                         OVER (PARTITION BY r.lane ORDER BY r.id) AS blocked
            FROM json_each(:lanes) AS l JOIN messages AS r ON r.id IN (
                SELECT w.id FROM messages AS w
                WHERE w.queue_id = (SELECT id FROM queues WHERE name = :queue AND NOT paused)
                  AND w.lane = l.value AND w.state = 5
                ORDER BY w.id LIMIT :run)
            WHERE EXISTS (SELECT 1 FROM messages AS h
                          WHERE h.queue_id = (SELECT id FROM queues WHERE name = :queue)
                            AND h.lane = l.value AND h.state = 2
                            AND h.c_session = :session AND h.c_tx = :tx))
        WHERE blocked = 0){select}
) AS m
ORDER BY lane_rank, CASE WHEN lane_rank = 0 THEN id END, {order}priority DESC, id
LIMIT :limit;

-- name: select_claimable_with_own_lanes
-- As select_claimable_lanes, with the transaction's own uncommitted enqueues.
SELECT {claimed_columns} FROM (
    SELECT 1 AS lane_rank, * FROM (
        SELECT m.* FROM messages AS m
        WHERE :fill AND queue_id = (SELECT id FROM queues WHERE name = :queue AND NOT paused)
          AND {ready_or_own} AND available_at <= :now
          AND (expires_at IS NULL OR expires_at > :now){select}
        ORDER BY {order}priority DESC, id
        LIMIT :limit)
    UNION ALL
    SELECT 0, m.* FROM messages AS m
    WHERE m.id IN (
        SELECT id FROM (
            SELECT r.id, sum(r.available_at > :now OR coalesce(r.expires_at <= :now, 0))
                         OVER (PARTITION BY r.lane ORDER BY r.id) AS blocked
            FROM json_each(:lanes) AS l JOIN messages AS r ON r.id IN (
                SELECT w.id FROM messages AS w
                WHERE w.queue_id = (SELECT id FROM queues WHERE name = :queue AND NOT paused)
                  AND w.lane = l.value AND w.state = 5
                ORDER BY w.id LIMIT :run)
            WHERE EXISTS (SELECT 1 FROM messages AS h
                          WHERE h.queue_id = (SELECT id FROM queues WHERE name = :queue)
                            AND h.lane = l.value AND h.state = 2
                            AND h.c_session = :session AND h.c_tx = :tx))
        WHERE blocked = 0){select}
) AS m
ORDER BY lane_rank, CASE WHEN lane_rank = 0 THEN id END, {order}priority DESC, id
LIMIT :limit;

-- name: mark_claimed
-- (State 5: a lane's next message, selected for its owner in this same transaction.)
UPDATE messages SET state = 2, c_session = :session, c_tx = :tx
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (state IN (1, 5) OR (state = 0 AND p_session = :session AND p_tx = :tx));

-- name: delete_claimed
DELETE FROM messages
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 2 AND c_session = :session AND c_tx = :tx;

-- name: delete_claimed_one
DELETE FROM messages
WHERE id = :id AND state = 2 AND c_session = :session AND c_tx = :tx;

-- name: keep_claimed
-- A queue with retention keeps what its transactions settle, as done (state 6), until
-- its retention runs out (remove_kept) or it is purged. The lane stays as history: only
-- states 1, 2 and 5 count in a lane.
UPDATE messages SET state = 6, settled_at = :settled_at, c_session = NULL, c_tx = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 2 AND c_session = :session AND c_tx = :tx;

-- name: keep_claimed_one
UPDATE messages SET state = 6, settled_at = :settled_at, c_session = NULL, c_tx = NULL
WHERE id = :id AND state = 2 AND c_session = :session AND c_tx = :tx;

-- name: reject
-- Rejected messages leave for the error queue, or stay as failed where the queue has none.
UPDATE messages
SET queue_id = coalesce(eq.id, messages.queue_id),
    state = CASE WHEN eq.id IS NULL THEN 4 ELSE 1 END,
    c_session = NULL, c_tx = NULL, error = :reason, origin_queue = q.name, lane = NULL
FROM queues AS q LEFT JOIN queues AS eq ON eq.name = q.error_queue AND eq.id <> q.id
WHERE messages.id = :id AND messages.state = 2
  AND messages.c_session = :session AND messages.c_tx = :tx AND q.id = messages.queue_id;

-- name: dead_letter
-- Messages given back for the last allowed time leave for the error queue.
UPDATE messages
SET queue_id = coalesce(eq.id, messages.queue_id),
    state = CASE WHEN eq.id IS NULL THEN 4 ELSE 1 END,
    attempts = messages.attempts + 1,
    c_session = NULL, c_tx = NULL, origin_queue = q.name,
    error = 'reached max_attempts (' || q.max_attempts || ')', lane = NULL
FROM queues AS q LEFT JOIN queues AS eq ON eq.name = q.error_queue AND eq.id <> q.id
WHERE messages.id IN (SELECT value FROM json_each(:ids)) AND messages.state = 2
  AND messages.c_session = :session AND messages.c_tx = :tx
  AND NOT (messages.p_session = :session AND messages.p_tx = :tx)
  AND q.id = messages.queue_id
  AND q.max_attempts IS NOT NULL AND messages.attempts + 1 >= q.max_attempts;

-- name: release
-- Back to the original place (the id is kept); a transaction's own enqueue goes back to
-- pending; a message of a lane waits, until promote makes the lane's oldest its head.
UPDATE messages
SET state = CASE WHEN p_session = :session AND p_tx = :tx THEN 0
                 WHEN lane IS NOT NULL THEN 5 ELSE 1 END,
    attempts = attempts + CASE WHEN p_session = :session AND p_tx = :tx THEN 0 ELSE 1 END,
    c_session = NULL, c_tx = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 2 AND c_session = :session AND c_tx = :tx;

-- name: delete_own_claimed
-- On abort, the transaction's own enqueues that it also claimed vanish with it.
DELETE FROM messages
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 2 AND c_session = :session AND c_tx = :tx
  AND p_session = :session AND p_tx = :tx;

-- name: dead_sessions_pending
DELETE FROM messages
WHERE state = 0 AND p_session NOT IN (SELECT id FROM sessions);

-- name: dead_sessions_own_claims
DELETE FROM messages
WHERE queue_id IN (SELECT id FROM queues) AND state = 2 AND c_session = p_session AND c_tx = p_tx
  AND c_session NOT IN (SELECT id FROM sessions);

-- name: dead_sessions_dead_letter
UPDATE messages
SET queue_id = coalesce(eq.id, messages.queue_id),
    state = CASE WHEN eq.id IS NULL THEN 4 ELSE 1 END,
    attempts = messages.attempts + 1,
    c_session = NULL, c_tx = NULL, origin_queue = q.name,
    error = 'reached max_attempts (' || q.max_attempts || ')', lane = NULL
FROM queues AS q LEFT JOIN queues AS eq ON eq.name = q.error_queue AND eq.id <> q.id
WHERE messages.queue_id IN (SELECT id FROM queues) AND state = 2 AND messages.c_session NOT IN (SELECT id FROM sessions)
  AND q.id = messages.queue_id
  AND q.max_attempts IS NOT NULL AND messages.attempts + 1 >= q.max_attempts;

-- name: dead_sessions_lanes
-- The lanes whose messages dead sessions hold: promoted after the release.
-- Through the claims (queue, state 2), not the lane index: that would read every lane.
SELECT DISTINCT q.name, m.lane FROM messages AS m INDEXED BY messages_queue
JOIN queues AS q ON q.id = m.queue_id
WHERE m.queue_id IN (SELECT id FROM queues) AND m.state = 2 AND m.lane IS NOT NULL
  AND m.c_session NOT IN (SELECT id FROM sessions);

-- name: dead_sessions_release
-- Claimed rows are found through the queue index (queue_id, state), hence the IN.
UPDATE messages
SET state = CASE WHEN lane IS NULL THEN 1 ELSE 5 END, attempts = attempts + 1,
    c_session = NULL, c_tx = NULL
WHERE queue_id IN (SELECT id FROM queues) AND state = 2 AND c_session NOT IN (SELECT id FROM sessions);

-- name: expiring_lanes
SELECT DISTINCT q.name, m.lane FROM messages AS m JOIN queues AS q ON q.id = m.queue_id
WHERE m.state IN (1, 5) AND m.expires_at IS NOT NULL AND m.expires_at <= :now
  AND m.lane IS NOT NULL;

-- name: expire
UPDATE messages SET state = 3
WHERE state IN (1, 5) AND expires_at IS NOT NULL AND expires_at <= :now;

-- name: stats
-- Done messages are counted apart: a plain count of their index range, a tenth of the
-- grouped count's cost per row (a queue with retention may keep millions).
SELECT state, available_at > :now AS delayed, count(*) FROM messages
WHERE queue_id = (SELECT id FROM queues WHERE name = :queue) AND state < 6
GROUP BY 1, 2
UNION ALL
SELECT 6, 0, count(*) FROM messages
WHERE queue_id = (SELECT id FROM queues WHERE name = :queue) AND state = 6;

-- name: queue_gauges
-- Every queue's stats at once, for the server's metrics: one statement over the queue
-- index instead of one per queue. Each (state, delayed) group's earliest available_at
-- gives, for ready messages, when the oldest of them became takeable.
SELECT q.name, m.state, m.available_at > :now AS delayed, count(*), min(m.available_at)
FROM queues AS q JOIN messages AS m ON m.queue_id = q.id
WHERE m.state < 6
GROUP BY 1, 2, 3
UNION ALL
SELECT q.name, 6, 0, count(*), NULL
FROM queues AS q JOIN messages AS m ON m.queue_id = q.id
WHERE m.state = 6
GROUP BY 1;

-- name: stream_insert
INSERT INTO streams (queue_id, name, session, created_at)
SELECT id, :name, :session, :now FROM queues WHERE name = :queue;

-- name: stream_set_round
UPDATE streams SET round = max(round, :round) WHERE session = :session;

-- name: stream_set_acked
UPDATE streams SET acked = max(acked, :acked) WHERE session = :session;

-- name: stream_held
-- What a stream holds from rounds (:after, :upto], one of :parts shares of it by id.
SELECT {message_columns}, c_tx FROM messages
WHERE queue_id = (SELECT id FROM queues WHERE name = :queue) AND state = 2
  AND c_session = :session AND c_tx > :after AND c_tx <= :upto AND id % :parts = :part
ORDER BY c_tx, id;

-- name: stream_held_count
SELECT count(*) FROM messages
WHERE queue_id = (SELECT id FROM queues WHERE name = :queue) AND state = 2
  AND c_session = :session AND c_tx > :after AND c_tx <= :upto;

-- name: stream_settle
-- Spark committed the stream's rounds (:after, :upto]: what it holds of them goes, by
-- range; the caller promotes the lanes returned.
DELETE FROM messages
WHERE queue_id = (SELECT id FROM queues WHERE name = :queue) AND state = 2
  AND c_session = :session AND c_tx > :after AND c_tx <= :upto
RETURNING lane;

-- fragment: read_columns
-- A Spark read's row (sluice.backends.base.READ_COLUMNS): the message's id spelled out,
-- a binary body as bytes (SQLite keeps it in body), only what a Spark row shows.
m.id, m.p_session || '/' || m.p_tx || '/' || m.p_num, m.priority, m.body, NULL,
coalesce(m.content_type, 'application/json'), m.properties, m.type, m.grp, m.correlation_id,
m.reply_to, m.attempts, m.enqueued_at, m.available_at, m.expires_at

-- name: stream_span
-- One window of a position stream's next range (Streams.stream_span): of the messages
-- with ids in (:after, :upto] that are ready or waiting, unexpired at :now and
-- selected, how many, the last, and the first not due yet. By id, not by queue
-- (+queue_id), and with no order to keep: the planner reads the window's id range,
-- whatever it guesses of the queue's share of it (an ORDER BY ... LIMIT over a range
-- it guessed small had it sort the whole table).
SELECT count(*), max(m.id), min(CASE WHEN m.available_at > :now THEN m.id END)
FROM messages AS m
WHERE m.id > :after AND m.id <= :upto
  AND +m.queue_id = (SELECT id FROM queues WHERE name = :queue)
  AND m.state IN (1, 5) AND (m.expires_at IS NULL OR m.expires_at > :now){select};

-- name: stream_nth
-- The id of a window's (stream_span's) :skip+1-th message: where a range that wants no
-- more ends.
SELECT m.id FROM messages AS m
WHERE m.id > :after AND m.id <= :upto
  AND +m.queue_id = (SELECT id FROM queues WHERE name = :queue)
  AND m.state IN (1, 5) AND (m.expires_at IS NULL OR m.expires_at > :now){select}
ORDER BY m.id
LIMIT 1 OFFSET :skip;

-- name: stream_rows
-- A page of a position range (Streams.stream_rows): what was due and unexpired at :at,
-- by id; a message expired since (state 3) was read all the same.
SELECT {read_columns} FROM messages AS m
WHERE m.id > :after AND m.id <= :upto
  AND +m.queue_id = (SELECT id FROM queues WHERE name = :queue)
  AND m.state IN (1, 3, 5) AND m.available_at <= :at
  AND (m.expires_at IS NULL OR m.expires_at > :at){select}
ORDER BY m.id
LIMIT :limit;

-- name: stream_behind
-- Ready messages a position stream takes by rounds, up to :position
-- (Streams.stream_behind). In the queue index's order, which the planner then
-- follows, whatever it guesses of the queue's size (else: a scan of the table).
SELECT count(*) FROM (
    SELECT 1 FROM messages AS m
    WHERE m.queue_id = (SELECT id FROM queues WHERE name = :queue) AND m.state = 1
      AND m.id <= :position
      AND m.available_at <= :now AND (m.expires_at IS NULL OR m.expires_at > :now){select}
    ORDER BY m.priority DESC, m.id
    LIMIT :limit);

-- name: stream_remove
-- An exclusive stream's acknowledged ranges, from the queue's pointer up to :upto: what
-- they read (as stream_rows reads it) goes, by id range.
DELETE FROM messages AS m
WHERE m.id > (SELECT pointer FROM queues WHERE name = :queue) AND m.id <= :upto
  AND +m.queue_id = (SELECT id FROM queues WHERE name = :queue)
  AND m.state IN (1, 3, 5) AND m.available_at <= :at
  AND (m.expires_at IS NULL OR m.expires_at > :at){select};

-- name: stream_advance
-- A position stream's pointer moves on, never back; a subscription's counts as used.
UPDATE queues SET pointer = max(pointer, :upto),
                  used_at = CASE WHEN kind = 'subscription' THEN :now ELSE used_at END
WHERE name = :queue;

-- name: sink_record
INSERT INTO sinks (name, batch, updated_at) VALUES (:name, :batch, :now)
ON CONFLICT (name) DO UPDATE SET batch = excluded.batch, updated_at = excluded.updated_at;

-- name: staging_close
-- Every staging session of an aborted batch write (and the write's own: pid NULL), or
-- of one micro-batch of a streaming sink (pid the batch id).
DELETE FROM sessions WHERE host = :host AND (:pid IS NULL OR pid = :pid);


-- name: remove_kept
-- At most :limit done messages past their queue's retention (a queue whose retention
-- was turned off keeps none): per queue one seek of messages_settled up to
-- :now - retention, never a scan (CROSS JOIN keeps the queues outside).
DELETE FROM messages WHERE id IN (
    SELECT m.id FROM queues AS q
    CROSS JOIN messages AS m INDEXED BY messages_settled
        ON m.queue_id = q.id AND m.state = 6 AND m.settled_at <= :now - coalesce(q.retention, 0)
    -- A topic's done message is its newest's tombstone: collection removes it.
    WHERE q.kind <> 'topic'
      -- A message a rules slice holds stays until the slice is reset (docs/rules.md).
      AND NOT EXISTS (SELECT 1 FROM slice_members AS s WHERE s.message_id = m.id)
    LIMIT :limit);
