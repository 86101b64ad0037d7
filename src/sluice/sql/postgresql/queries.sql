-- Statements of the PostgreSQL backend that SQLite writes differently; those written
-- alike are in common/queries.sql, whose header explains {schema}, {select}, {order} and
-- fragments. A section starts with "-- name: <statement>" or "-- fragment: <name>".
-- {message_columns}: the columns of a message row over the alias m, given by the backend
-- (sluice.backends.base.MESSAGE_COLUMNS, then body_bytes); {spool_columns} and
-- {spool_names}: every column of the messages table (postgres_schema.MESSAGES_TABLE),
-- over m and bare. In claims, {select} and {order} are over the claim's row s.
-- Message states: 0 pending (uncommitted enqueue), 1 ready, 2 claimed, 3 expired, 4 failed,
-- 5 waiting behind the head of its lane, 6 done (kept by a queue with retention).
-- Times: sessions use the database's clock ({db_now}); messages the Database's clock
-- (%(now)s), by default the database's clock read through server_time's offset.
-- Every claim finds its queue "AND NOT paused": a paused queue (Queue.pause) gives its
-- consumers nothing, decided by the statement itself, whichever process paused it.

-- fragment: db_now
extract(epoch FROM clock_timestamp())

-- fragment: relax
-- Lets a claim commit without waiting for the WAL flush (set_config(..., true) lasts
-- for the transaction).
AND set_config('synchronous_commit', 'off', true) IS NOT NULL

-- fragment: lane_held
-- A lane's next messages only while the transaction still holds a message of the lane
-- (l.lane): a reader whose lane recovery gave to another must not follow it (FOR SHARE
-- against that recovery running meanwhile).
EXISTS (SELECT 1 FROM {schema}.messages AS h
        WHERE h.queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s)
          AND h.lane = l.lane AND h.state = 2
          AND h.c_session = %(session)s AND h.c_tx = %(tx)s
        FOR SHARE)

-- name: open_session
INSERT INTO {schema}.sessions (host, pid, started_at, heartbeat_at, lease)
VALUES (%(host)s, %(pid)s, {db_now}, {db_now}, %(lease)s)
RETURNING id;

-- name: heartbeat
-- Returns the server's clock too: the offset of this host's from it, in the same round trip.
UPDATE {schema}.sessions SET heartbeat_at = {db_now} WHERE id = %(session)s
RETURNING id, {db_now};

-- name: server_time
-- The server's clock, for the offset of this host's from it.
SELECT {db_now};

-- name: list_sessions
-- Heartbeats rebased onto the caller's clock, so leases are judged by one clock.
SELECT id, host, pid, heartbeat_at - {db_now} + %(now)s, lease FROM {schema}.sessions
FOR UPDATE;

-- name: recovery_idle_limit
-- The recovery transaction is a few quick statements; one idle longer than this is
-- held by a stopped process, and the server ends it (releasing the recovery lock).
SELECT set_config('idle_in_transaction_session_timeout', '5s', true);

-- name: try_recovery_lock
-- One recoverer of the schema at a time; the heartbeats' passes skip instead of queueing
-- behind it.
SELECT pg_try_advisory_xact_lock(%(lock_class)s, %(key)s);

-- name: recovery_lock
-- An asked-for pass (db.recover()) waits its turn instead: the holder may be the backend
-- of a process killed in its own pass, which holds the lock until the server notices.
-- The wait is short: a pass is a few statements, and an idle one ends in 5 s.
SELECT pg_advisory_xact_lock(%(lock_class)s, %(key)s);

-- name: update_queue
UPDATE {schema}.queues
SET max_attempts = %(max_attempts)s, error_queue = %(error_queue)s,
    durability = %(durability)s, max_size = %(max_size)s, types = %(types)s,
    priority_functions = %(priority_functions)s, isolation = %(isolation)s,
    expire_after = %(expire_after)s, pull_window = %(pull_window)s, priority_levels = %(priority_levels)s,
    max_in_flight = %(max_in_flight)s, retention = %(retention)s
WHERE name = %(name)s
  -- Lanes are drawn at enqueue: the level changes only while no message lives.
  AND (isolation = %(isolation)s OR NOT EXISTS (
        SELECT 1 FROM {schema}.messages AS m
        WHERE m.queue_id = queues.id AND m.state IN (0, 1, 2, 5)));

-- name: lock_queue_row
SELECT id FROM {schema}.queues WHERE name = %(name)s FOR UPDATE;

-- name: queue_in_flight
-- Held or enqueued by open transactions, or taken by a stream that Spark has not committed.
SELECT (SELECT count(*) FROM {schema}.messages
        WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(name)s)
          AND state IN (0, 2))
     + (SELECT coalesce(sum(p.n), 0) FROM {schema}.stream_spool AS p
        JOIN {schema}.streams AS s ON s.session = p.session
        WHERE s.queue_id = (SELECT id FROM {schema}.queues WHERE name = %(name)s));

-- name: credit_lock
-- Taken before a claim on a queue with max_in_flight, in the same transaction, and held
-- until it commits: claimers of one capped queue count (queue_credit, a statement of its
-- own, so it sees every claim committed before the lock was had) and claim one after the
-- other, and never overshoot together. A queue without a cap takes none.
SELECT pg_advisory_xact_lock(%(lock_class)s, id) FROM {schema}.queues
WHERE name = %(queue)s AND max_in_flight IS NOT NULL;

-- name: purge_lock
-- The queue's commit lock (as commit_lock takes it), held by a purge of ready messages
-- until it commits: a publish into the queue then commits wholly before the purge's
-- DELETE takes its snapshot, or after it, and promotes its lanes seeing their heads
-- gone. Without it a lane could get a waiting message whose head the purge deletes.
SELECT pg_advisory_xact_lock(%(lock_class)s, id) FROM {schema}.queues WHERE name = %(queue)s;

-- name: queue_credit
-- What a queue with max_in_flight may still hand out: its cap less its claimed messages
-- (counted through the queue index) and what streams hold in their spools; NULL without
-- a cap.
SELECT q.max_in_flight
       - (SELECT count(*) FROM {schema}.messages AS c WHERE c.queue_id = q.id AND c.state = 2)
       - (SELECT coalesce(sum(p.n), 0) FROM {schema}.stream_spool AS p
          JOIN {schema}.streams AS t ON t.session = p.session WHERE t.queue_id = q.id)
FROM {schema}.queues AS q WHERE q.name = %(queue)s;

-- name: commit_lock
-- Taken just before a transaction's messages get their ids and held until it
-- commits, so that within a queue ids follow commit order: the queues it enqueues
-- to and those of its pending rows, in one sorted pass (no deadlocks).
SELECT pg_advisory_xact_lock(%(lock_class)s, id) FROM (
    SELECT id FROM {schema}.queues WHERE name = ANY(%(queues)s)
    UNION
    SELECT queue_id FROM {schema}.messages
    WHERE state = 0 AND p_session = %(session)s AND p_tx = %(tx)s
    ORDER BY 1) AS q;

-- name: enqueue
SELECT {schema}.enqueue(%(session)s, %(tx)s, %(ready)s, %(queues)s::text[], %(rows)s::json,
                        %(durable)s);

-- name: enqueue_notify
-- As enqueue, with the wake-up NOTIFY delivered by this very commit: used when the
-- process has sent none for a while (see postgres_notify), so it costs no contention.
SELECT {schema}.enqueue(%(session)s, %(tx)s, %(ready)s, %(queues)s::text[], %(rows)s::json,
                        %(durable)s),
       pg_notify(%(channel)s, %(payload)s);

-- name: publish_pending
-- Re-inserting (rather than flipping the state in place) gives the messages ids
-- in commit order, like every other enqueue.
WITH moved AS (
    DELETE FROM {schema}.messages
    WHERE state = 0 AND p_session = %(session)s AND p_tx = %(tx)s
    RETURNING *
), ins AS (
    INSERT INTO {schema}.messages (
        slot, queue_id, state, priority, p_session, p_tx, p_num, body, body_bytes,
        content_type, properties, correlation_id, reply_to, enqueued_at, available_at, expires_at,
        type, t1, t2, t3, t4, n1, n2, n3, n4, grp, lane)
    SELECT (SELECT slot FROM {schema}.rotation), queue_id,
           CASE WHEN lane IS NULL THEN 1 ELSE 5 END, priority, p_session, p_tx, p_num,
           body, body_bytes, content_type,
           properties, correlation_id, reply_to, enqueued_at, available_at, expires_at,
           type, t1, t2, t3, t4, n1, n2, n3, n4, grp, lane
    FROM moved ORDER BY id
    RETURNING 1)
SELECT {schema}.expect((SELECT count(*) FROM ins), %(pending)s, 'lease lost');

-- name: promote
-- Lanes (queue, lane key) whose head may have gone get their oldest waiting message
-- as head; see the function.
SELECT {schema}.promote(%(lane_queues)s::text[], %(lane_keys)s::text[]);

-- name: settle
SELECT {schema}.settle(%(session)s, %(tx)s, %(ids)s, %(lane_queues)s::text[],
                       %(lane_keys)s::text[]);

-- name: lane_front
-- The writer and transaction of a lane's oldest message still waiting (or its head).
-- (Each state its own index seek: one IN would sort the whole lane.)
SELECT p_session, p_tx FROM (
    (SELECT id, p_session, p_tx FROM {schema}.messages
     WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s)
       AND lane = %(lane)s AND state = 1 ORDER BY id LIMIT 1)
    UNION ALL
    (SELECT id, p_session, p_tx FROM {schema}.messages
     WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s)
       AND lane = %(lane)s AND state = 5 ORDER BY id LIMIT 1)) AS fronts
ORDER BY id LIMIT 1;

-- fragment: claim_pick
-- The ready messages of queue %(queue)s a plain claim takes, in delivery order, locked
-- (claim; topics.sql's claim_subscribed).
SELECT id FROM {schema}.messages AS s
WHERE queue_id = (SELECT id FROM {schema}.queues
                  WHERE name = %(queue)s AND NOT paused {relax})
  AND state = 1 AND available_at <= %(now)s
  AND (expires_at IS NULL OR expires_at > %(now)s){select}
ORDER BY {order}priority DESC, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- fragment: next_due_answer
-- When queue %(queue)s's next delayed message is due (an empty claim's answer).
(SELECT min(available_at) FROM {schema}.messages
 WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s AND NOT paused)
   AND state = 1 AND available_at > %(now)s)

-- name: claim
-- The relax fragment lets the claim commit without waiting for the WAL flush: it sits
-- in the queue's lookup, which runs once per execution. One statement, one round trip.
-- Variants below: claim_with_own, _in_caller_tx, _lanes; stream_take picks alike.
-- The picked ids are an array, not a subquery joined on id: under the generic plan of a
-- prepared statement the join became a hash join over the whole table, one scan of
-- every message per claim (tests/postgresql/test_plans.py).
WITH claimed AS (
    UPDATE {schema}.messages AS m SET state = 2, c_session = %(session)s, c_tx = %(tx)s
    WHERE m.id = ANY(ARRAY(
        {claim_pick}))
    RETURNING {message_columns})
(SELECT * FROM claimed)
UNION ALL
-- Nothing claimed: one row of NULLs but for available_at, which says when the
-- queue's next delayed message is due (saves the waiting consumer a round trip).
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       {next_due_answer}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE NOT EXISTS (SELECT 1 FROM claimed)
ORDER BY 3 DESC, 1;

-- name: claim_with_own
-- As claim; a transaction sees its own uncommitted enqueues.
WITH claimed AS (
    UPDATE {schema}.messages AS m SET state = 2, c_session = %(session)s, c_tx = %(tx)s
    WHERE m.id = ANY(ARRAY(
        SELECT id FROM {schema}.messages AS s
        WHERE queue_id = (SELECT id FROM {schema}.queues
                          WHERE name = %(queue)s AND NOT paused {relax})
          AND {ready_or_own} AND available_at <= %(now)s
          AND (expires_at IS NULL OR expires_at > %(now)s){select}
        ORDER BY {order}priority DESC, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
    RETURNING {message_columns})
(SELECT * FROM claimed)
UNION ALL
-- Nothing claimed: one row of NULLs but for available_at, which says when the
-- queue's next delayed message is due (saves the waiting consumer a round trip).
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       (SELECT min(available_at) FROM {schema}.messages
        WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s AND NOT paused)
          AND state = 1 AND available_at > %(now)s),
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE NOT EXISTS (SELECT 1 FROM claimed)
ORDER BY 3 DESC, 1;

-- name: claim_in_caller_tx
-- As claim, inside a caller's transaction (the outbox), without the relax fragment:
-- sluice must not change how the caller's commit is flushed.
WITH claimed AS (
    UPDATE {schema}.messages AS m SET state = 2, c_session = %(session)s, c_tx = %(tx)s
    WHERE m.id = ANY(ARRAY(
        SELECT id FROM {schema}.messages AS s
        WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s AND NOT paused)
          AND state = 1 AND available_at <= %(now)s
          AND (expires_at IS NULL OR expires_at > %(now)s){select}
        ORDER BY {order}priority DESC, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
    RETURNING {message_columns})
(SELECT * FROM claimed)
UNION ALL
-- Nothing claimed: one row of NULLs but for available_at, which says when the
-- queue's next delayed message is due (saves the waiting consumer a round trip).
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       (SELECT min(available_at) FROM {schema}.messages
        WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s AND NOT paused)
          AND state = 1 AND available_at > %(now)s),
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE NOT EXISTS (SELECT 1 FROM claimed)
ORDER BY 3 DESC, 1;

-- name: claim_with_own_in_caller_tx
-- As claim_with_own, inside a caller's transaction (see claim_in_caller_tx).
WITH claimed AS (
    UPDATE {schema}.messages AS m SET state = 2, c_session = %(session)s, c_tx = %(tx)s
    WHERE m.id = ANY(ARRAY(
        SELECT id FROM {schema}.messages AS s
        WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s AND NOT paused)
          AND {ready_or_own} AND available_at <= %(now)s
          AND (expires_at IS NULL OR expires_at > %(now)s){select}
        ORDER BY {order}priority DESC, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
    RETURNING {message_columns})
(SELECT * FROM claimed)
UNION ALL
-- Nothing claimed: one row of NULLs but for available_at, which says when the
-- queue's next delayed message is due (saves the waiting consumer a round trip).
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       (SELECT min(available_at) FROM {schema}.messages
        WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s AND NOT paused)
          AND state = 1 AND available_at > %(now)s),
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE NOT EXISTS (SELECT 1 FROM claimed)
ORDER BY 3 DESC, 1;

-- fragment: lane_claim
-- What the four lane claims (claim_lanes and the rest) do after their own `free` CTE,
-- the heads any reader may take: `next`, each held lane's next messages (only this
-- transaction may take them, in lane order, stopping at the first not yet available),
-- then the pick of both in order and the claim.
next AS (
    SELECT 0 AS lane_rank, s.* FROM {schema}.messages AS s
    WHERE s.id = ANY(ARRAY(
        SELECT id FROM (
            SELECT r.id, count(*) FILTER (
                       WHERE r.available_at > %(now)s OR r.expires_at <= %(now)s)
                       OVER (PARTITION BY r.lane ORDER BY r.id) AS blocked
            FROM unnest(%(lanes)s::text[]) AS l(lane) CROSS JOIN LATERAL (
                SELECT w.id, w.lane, w.available_at, w.expires_at FROM {schema}.messages AS w
                WHERE w.queue_id = (SELECT id FROM {schema}.queues
                                    WHERE name = %(queue)s AND NOT paused)
                  AND w.lane = l.lane AND w.state = 5
                  AND {lane_held}
                ORDER BY w.id LIMIT %(run)s) AS r) AS runs
        WHERE blocked = 0)){select}
), pick AS (
    SELECT s.id, row_number() OVER (
               ORDER BY lane_rank, CASE WHEN lane_rank = 0 THEN id END, {order}priority DESC, id) AS pos
    FROM (SELECT * FROM free UNION ALL SELECT * FROM next) AS s
    ORDER BY pos
    LIMIT %(limit)s
), claimed AS (
    UPDATE {schema}.messages AS m SET state = 2, c_session = %(session)s, c_tx = %(tx)s
    WHERE m.id = ANY(ARRAY(SELECT id FROM pick)) AND m.state IN (0, 1, 5)
    RETURNING {message_columns})
SELECT claimed.* FROM claimed JOIN pick ON pick.id = claimed.id ORDER BY pick.pos

-- name: claim_lanes
-- As claim, and first the next messages of each lane in lanes (those the transaction
-- holds messages of), which only it may take: up to run of them in lane order, stopping
-- at the first not yet available; other heads too unless fill is false (finish what it
-- holds first). A lane counts only while the transaction still holds a message of it,
-- locked against recovery meanwhile: one whose session was taken for dead (it stalled)
-- lost them, and another reader may hold the lane now, whose next messages it would take
-- out of its order.
WITH free AS (
    SELECT 1 AS lane_rank, s.* FROM {schema}.messages AS s
    WHERE %(fill)s AND queue_id = (SELECT id FROM {schema}.queues
                                   WHERE name = %(queue)s AND NOT paused {relax})
      AND state = 1 AND available_at <= %(now)s
      AND (expires_at IS NULL OR expires_at > %(now)s){select}
    ORDER BY {order}priority DESC, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {lane_claim};

-- name: claim_with_own_lanes
-- As claim_lanes; a transaction sees its own uncommitted enqueues.
WITH free AS (
    SELECT 1 AS lane_rank, s.* FROM {schema}.messages AS s
    WHERE %(fill)s AND queue_id = (SELECT id FROM {schema}.queues
                                   WHERE name = %(queue)s AND NOT paused {relax})
      AND {ready_or_own} AND available_at <= %(now)s
      AND (expires_at IS NULL OR expires_at > %(now)s){select}
    ORDER BY {order}priority DESC, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {lane_claim};

-- name: claim_lanes_in_caller_tx
-- As claim_lanes, inside a caller's transaction (see claim_in_caller_tx).
WITH free AS (
    SELECT 1 AS lane_rank, s.* FROM {schema}.messages AS s
    WHERE %(fill)s AND queue_id = (SELECT id FROM {schema}.queues
                                   WHERE name = %(queue)s AND NOT paused)
      AND state = 1 AND available_at <= %(now)s
      AND (expires_at IS NULL OR expires_at > %(now)s){select}
    ORDER BY {order}priority DESC, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {lane_claim};

-- name: claim_with_own_lanes_in_caller_tx
-- As claim_with_own_lanes, inside a caller's transaction (see claim_in_caller_tx).
WITH free AS (
    SELECT 1 AS lane_rank, s.* FROM {schema}.messages AS s
    WHERE %(fill)s AND queue_id = (SELECT id FROM {schema}.queues
                                   WHERE name = %(queue)s AND NOT paused)
      AND {ready_or_own} AND available_at <= %(now)s
      AND (expires_at IS NULL OR expires_at > %(now)s){select}
    ORDER BY {order}priority DESC, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {lane_claim};

-- name: claimed_in_order
-- What an ordering dequeue just claimed, in its order_by's order (a claim's RETURNING
-- keeps no order).
SELECT {message_columns} FROM {schema}.messages AS m
WHERE m.id = ANY(%(ids)s) AND m.state = 2
ORDER BY {order}m.priority DESC, m.id;

-- name: stream_take
-- A Spark stream's take (postgres_spool.py) moves what claim would pick: the same
-- conditions, order and locks; the rows are deleted and sent out as CSV, every column
-- (spool_columns). Its transaction relaxes its own commit, so no relax fragment here.
COPY (
    DELETE FROM {schema}.messages AS m
    WHERE m.id = ANY(ARRAY(
        SELECT id FROM {schema}.messages AS s
        WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s AND NOT paused)
          AND state = 1 AND available_at <= %(now)s
          AND (expires_at IS NULL OR expires_at > %(now)s){select}
        ORDER BY {order}priority DESC, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
    RETURNING {spool_columns}
) TO STDOUT (FORMAT csv);

-- name: delete_claimed
WITH d AS (
    DELETE FROM {schema}.messages
    WHERE id IN (SELECT unnest(%(ids)s::bigint[]))
      AND state = 2 AND c_session = %(session)s AND c_tx = %(tx)s
    RETURNING 1)
SELECT {schema}.expect((SELECT count(*) FROM d), %(expected)s, 'lease lost');

-- name: delete_claimed_pairs
-- Plain acknowledgements of one session's several transactions (Database.ack_many): one
-- statement, one round trip, however many transactions they were taken in.
WITH d AS (
    DELETE FROM {schema}.messages AS m
    USING unnest(%(ids)s::bigint[], %(txs)s::bigint[]) AS t(id, tx)
    WHERE m.id = t.id AND m.state = 2 AND m.c_session = %(session)s AND m.c_tx = t.tx
    RETURNING 1)
SELECT {schema}.expect((SELECT count(*) FROM d), %(expected)s, 'lease lost');

-- name: keep_claimed
-- A queue with retention keeps what its transactions settle, as done (state 6), until
-- its retention runs out (remove_kept) or it is purged. The lane stays as history: only
-- states 1, 2 and 5 count in a lane.
WITH k AS (
    UPDATE {schema}.messages SET state = 6, settled_at = %(settled_at)s,
                                 c_session = NULL, c_tx = NULL
    WHERE id IN (SELECT unnest(%(ids)s::bigint[]))
      AND state = 2 AND c_session = %(session)s AND c_tx = %(tx)s
    RETURNING 1)
SELECT {schema}.expect((SELECT count(*) FROM k), %(expected)s, 'lease lost');

-- name: reject
-- Rejected messages leave for the error queue, or stay as failed where the queue has none.
WITH r AS (
    UPDATE {schema}.messages AS m
    SET queue_id = coalesce(eq.id, m.queue_id),
        state = CASE WHEN eq.id IS NULL THEN 4 ELSE 1 END,
        c_session = NULL, c_tx = NULL, error = %(reason)s, origin_queue = q.name, lane = NULL
    FROM {schema}.queues AS q
        LEFT JOIN {schema}.queues AS eq ON eq.name = q.error_queue AND eq.id <> q.id
    WHERE m.id = %(id)s AND m.state = 2
      AND m.c_session = %(session)s AND m.c_tx = %(tx)s AND q.id = m.queue_id
    RETURNING 1)
SELECT {schema}.expect((SELECT count(*) FROM r), 1, 'lease lost');

-- fragment: to_error_queue
-- A message given back for the last allowed time (q its queue, eq the queue's error
-- queue, if any): out of its lane into the error queue, or failed where there is none.
SET queue_id = coalesce(eq.id, m.queue_id),
    state = CASE WHEN eq.id IS NULL THEN 4 ELSE 1 END,
    attempts = m.attempts + 1,
    c_session = NULL, c_tx = NULL, origin_queue = q.name,
    error = 'reached max_attempts (' || q.max_attempts || ')', lane = NULL

-- name: dead_letter
-- Messages given back for the last allowed time leave for the error queue.
UPDATE {schema}.messages AS m
{to_error_queue}
FROM {schema}.queues AS q
    LEFT JOIN {schema}.queues AS eq ON eq.name = q.error_queue AND eq.id <> q.id
WHERE m.state = 2 AND m.c_session = %(session)s AND m.c_tx = %(tx)s
  AND (%(ids)s::bigint[] IS NULL OR m.id IN (SELECT unnest(%(ids)s::bigint[])))
  AND NOT (m.p_session = %(session)s AND m.p_tx = %(tx)s)
  AND q.id = m.queue_id
  AND q.max_attempts IS NOT NULL AND m.attempts + 1 >= q.max_attempts;

-- name: release
-- Back to the original place (the id is kept); a transaction's own enqueue goes back
-- to pending; a message of a lane waits, until promote makes the lane's oldest its head.
-- ids NULL: everything the transaction holds.
UPDATE {schema}.messages
SET state = CASE WHEN p_session = %(session)s AND p_tx = %(tx)s THEN 0
                 WHEN lane IS NOT NULL THEN 5 ELSE 1 END,
    attempts = attempts + CASE WHEN p_session = %(session)s AND p_tx = %(tx)s THEN 0 ELSE 1 END,
    c_session = NULL, c_tx = NULL
WHERE state = 2 AND c_session = %(session)s AND c_tx = %(tx)s
  AND (%(ids)s::bigint[] IS NULL OR id IN (SELECT unnest(%(ids)s::bigint[])));

-- name: release_unheard
-- The claims of a transaction that it never heard of (a claim's connection broke after
-- the claim may have committed): back to their places as if never taken, no attempt
-- counted (nobody saw them), a transaction's own enqueue back to pending, and the lanes
-- whose heads went back promoted (the client cannot name them; a lane left without a
-- head waits for ever). known: the claims it did hear of, which its other statements
-- settle. The lanes are read whole (DISTINCT) before promote runs, and promote's own
-- queries see this statement's release (a volatile function's take a new snapshot).
WITH released AS (
    UPDATE {schema}.messages
    SET state = CASE WHEN p_session = %(session)s AND p_tx = %(tx)s THEN 0
                     WHEN lane IS NOT NULL THEN 5 ELSE 1 END,
        c_session = NULL, c_tx = NULL
    WHERE state = 2 AND c_session = %(session)s AND c_tx = %(tx)s
      AND NOT id = ANY(%(known)s::bigint[])
    RETURNING queue_id, lane),
lanes AS (
    SELECT DISTINCT q.name, r.lane FROM released AS r
    JOIN {schema}.queues AS q ON q.id = r.queue_id
    WHERE r.lane IS NOT NULL)
SELECT {schema}.promote(array_agg(name), array_agg(lane)) FROM lanes;

-- name: delete_own_claimed
-- On abort, the transaction's own enqueues that it also claimed vanish with it.
DELETE FROM {schema}.messages
WHERE state = 2 AND c_session = %(session)s AND c_tx = %(tx)s
  AND p_session = %(session)s AND p_tx = %(tx)s;

-- name: dead_sessions_pending
DELETE FROM {schema}.messages AS m
WHERE state = 0 AND NOT EXISTS (SELECT 1 FROM {schema}.sessions AS s WHERE s.id = m.p_session);

-- name: dead_sessions_own_claims
DELETE FROM {schema}.messages AS m
WHERE state = 2 AND c_session = p_session AND c_tx = p_tx
  AND NOT EXISTS (SELECT 1 FROM {schema}.sessions AS s WHERE s.id = m.c_session);

-- name: dead_sessions_dead_letter
-- The lanes of the messages it moves (promoted after the release), read as it locks
-- them: the move takes them out of their lanes.
WITH doomed AS (
    SELECT m.id, m.slot, m.lane FROM {schema}.messages AS m
    JOIN {schema}.queues AS q ON q.id = m.queue_id
    WHERE m.state = 2
      AND NOT EXISTS (SELECT 1 FROM {schema}.sessions AS s WHERE s.id = m.c_session)
      AND q.max_attempts IS NOT NULL AND m.attempts + 1 >= q.max_attempts
    FOR UPDATE OF m),
moved AS (
    UPDATE {schema}.messages AS m
    {to_error_queue}
    FROM doomed AS d, {schema}.queues AS q
        LEFT JOIN {schema}.queues AS eq ON eq.name = q.error_queue AND eq.id <> q.id
    WHERE m.id = d.id AND m.slot = d.slot AND q.id = m.queue_id
    RETURNING q.name, d.lane)
SELECT DISTINCT name, lane FROM moved WHERE lane IS NOT NULL;

-- name: dead_sessions_release
-- The lanes of the messages it releases, to be promoted: a claim that committed after
-- any earlier statement's snapshot is released here, so only this statement knows them.
WITH released AS (
    UPDATE {schema}.messages AS m
    SET state = CASE WHEN lane IS NULL THEN 1 ELSE 5 END, attempts = attempts + 1,
        c_session = NULL, c_tx = NULL
    WHERE state = 2 AND NOT EXISTS (SELECT 1 FROM {schema}.sessions AS s WHERE s.id = m.c_session)
    RETURNING queue_id, lane)
SELECT DISTINCT q.name, r.lane FROM released AS r
JOIN {schema}.queues AS q ON q.id = r.queue_id
WHERE r.lane IS NOT NULL;

-- name: expire
SELECT {schema}.expire(%(now)s);

-- name: stats
-- What streams took into their spools (and Spark has not committed) counts as claimed.
-- Done messages are counted apart: a plain count of their index range (a queue with
-- retention may keep millions).
SELECT state, available_at > %(now)s AS delayed, count(*) FROM {schema}.messages
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s) AND state < 6
GROUP BY 1, 2
UNION ALL
SELECT 6, false, count(*) FROM {schema}.messages
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s) AND state = 6
UNION ALL
SELECT 2, false, sum(p.n) FROM {schema}.stream_spool AS p
JOIN {schema}.streams AS s ON s.session = p.session
WHERE s.queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s)
HAVING count(*) > 0;

-- name: queue_gauges
-- Every queue's stats at once, for the server's metrics: one statement over the queue
-- index instead of one per queue. Each (state, delayed) group's earliest available_at
-- gives, for ready messages, when the oldest of them became takeable. As in stats,
-- what streams took into their spools counts as claimed.
SELECT q.name, m.state, m.available_at > %(now)s AS delayed, count(*), min(m.available_at)
FROM {schema}.queues AS q JOIN {schema}.messages AS m ON m.queue_id = q.id
WHERE m.state < 6
GROUP BY 1, 2, 3
UNION ALL
SELECT q.name, 6, false, count(*), NULL
FROM {schema}.queues AS q JOIN {schema}.messages AS m ON m.queue_id = q.id
WHERE m.state = 6
GROUP BY 1
UNION ALL
SELECT q.name, 2, false, sum(p.n), NULL
FROM {schema}.stream_spool AS p
JOIN {schema}.streams AS s ON s.session = p.session
JOIN {schema}.queues AS q ON q.id = s.queue_id
GROUP BY 1;

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: dead_rows
-- Dead and live row counts of the message partitions, as the statistics system has them.
SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(n_live_tup), 0) FROM pg_stat_user_tables
WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = '{schema}.messages'::regclass);

-- name: partition_statistics
-- Each message partition: its name, its live rows as the statistics system counts
-- them, and the rows the planner believes it holds (reltuples: -1 until analyzed).
SELECT c.relname, coalesce(s.n_live_tup, 0), c.reltuples
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE i.inhparent = '{schema}.messages'::regclass
ORDER BY c.relname;

-- name: rotation_due
-- Locks the rotation row: one rotation at a time.
SELECT r.slot, (SELECT last_value FROM {schema}.message_ids) - r.rotated_at_id
FROM {schema}.rotation AS r
FOR UPDATE;

-- name: rotation_done
UPDATE {schema}.rotation
SET slot = %(slot)s, rotated_at_id = (SELECT last_value FROM {schema}.message_ids),
    rotated_at = {db_now};

-- name: stream_insert
-- Two starters at once: the second finds the row made by the first (ON CONFLICT).
INSERT INTO {schema}.streams (queue_id, name, session, created_at)
SELECT id, %(name)s, %(session)s, extract(epoch FROM clock_timestamp())
FROM {schema}.queues WHERE name = %(queue)s
ON CONFLICT (queue_id, name) DO NOTHING
RETURNING session;

-- name: stream_set_round
UPDATE {schema}.streams SET round = greatest(round, %(round)s) WHERE session = %(session)s;

-- name: stream_set_acked
UPDATE {schema}.streams SET acked = greatest(acked, %(acked)s) WHERE session = %(session)s;

-- name: stream_held
-- What a stream holds from rounds (after, upto], one of %(parts)s shares of it by id.
SELECT {message_columns}, c_tx FROM {schema}.messages AS m
WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s) AND state = 2
  AND c_session = %(session)s AND c_tx > %(after)s AND c_tx <= %(upto)s
  AND id %% %(parts)s = %(part)s
ORDER BY c_tx, id;

-- name: stream_held_count
-- Claimed in place (queues with lanes) and moved into the spool.
SELECT (SELECT count(*) FROM {schema}.messages
        WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s) AND state = 2
          AND c_session = %(session)s AND c_tx > %(after)s AND c_tx <= %(upto)s)
     + (SELECT coalesce(sum(n), 0) FROM {schema}.stream_spool
        WHERE session = %(session)s AND round > %(after)s AND round <= %(upto)s);

-- name: stream_settle
-- Spark committed the stream's rounds (after, upto]: what it holds of them goes, by
-- range (one index range, however many rounds); the caller promotes the lanes returned.
WITH d AS (
    DELETE FROM {schema}.messages
    WHERE queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s) AND state = 2
      AND c_session = %(session)s AND c_tx > %(after)s AND c_tx <= %(upto)s
    RETURNING lane)
SELECT DISTINCT lane FROM d WHERE lane IS NOT NULL;

-- fragment: read_columns
-- A Spark read's row (sluice.backends.base.READ_COLUMNS): the message's id spelled out,
-- a binary body as bytes, only what a Spark row shows.
m.id, m.p_session || '/' || m.p_tx || '/' || m.p_num, m.priority, m.body, m.body_bytes,
coalesce(m.content_type, 'application/json'), m.properties, m.type, m.grp, m.correlation_id,
m.reply_to, m.attempts, m.enqueued_at, m.available_at, m.expires_at

-- name: stream_span
-- One window of a position stream's next range (Streams.stream_span): of the messages
-- with ids in (%(after)s, %(upto)s] that are ready or waiting, unexpired at %(now)s and
-- selected, how many, the last, and the first not due yet. By id, not by queue
-- (+queue_id), and with no order to keep: the planner reads the window's id range,
-- whatever it guesses of the queue's share of it (an ORDER BY ... LIMIT over a range
-- it guessed small had it sort the whole table).
SELECT count(*), max(s.id), min(CASE WHEN s.available_at > %(now)s THEN s.id END)
FROM {schema}.messages AS s
WHERE s.id > %(after)s AND s.id <= %(upto)s
  AND +s.queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s)
  AND s.state IN (1, 5) AND (s.expires_at IS NULL OR s.expires_at > %(now)s){select};

-- name: stream_nth
-- The id of a window's (stream_span's) %(skip)s+1-th message: where a range that wants no
-- more ends.
SELECT s.id FROM {schema}.messages AS s
WHERE s.id > %(after)s AND s.id <= %(upto)s
  AND +s.queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s)
  AND s.state IN (1, 5) AND (s.expires_at IS NULL OR s.expires_at > %(now)s){select}
ORDER BY s.id
LIMIT 1 OFFSET %(skip)s;

-- name: stream_rows
-- A page of a position range (Streams.stream_rows): what was due and unexpired at %(at)s,
-- by id; a message expired since (state 3) was read all the same.
SELECT {read_columns} FROM (
    SELECT * FROM {schema}.messages AS s
    WHERE s.id > %(after)s AND s.id <= %(upto)s
      AND +s.queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s)
      AND s.state IN (1, 3, 5) AND s.available_at <= %(at)s
      AND (s.expires_at IS NULL OR s.expires_at > %(at)s){select}
    ORDER BY s.id
    LIMIT %(limit)s) AS m
ORDER BY m.id;

-- name: stream_behind
-- Ready messages a position stream takes by rounds, up to %(position)s
-- (Streams.stream_behind). In the queue index's order, which the planner then
-- follows, whatever it guesses of the queue's size (else: a scan of the table).
SELECT count(*) FROM (
    SELECT 1 FROM {schema}.messages AS s
    WHERE s.queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s) AND s.state = 1
      AND s.id <= %(position)s
      AND s.available_at <= %(now)s AND (s.expires_at IS NULL OR s.expires_at > %(now)s){select}
    ORDER BY s.priority DESC, s.id
    LIMIT %(limit)s) AS behind;

-- name: stream_remove
-- An exclusive stream's acknowledged ranges, from the queue's pointer up to %(upto)s: what
-- they read (as stream_rows reads it) goes, by id range.
DELETE FROM {schema}.messages AS s
WHERE s.id > (SELECT pointer FROM {schema}.queues WHERE name = %(queue)s)
  AND s.id <= %(upto)s
  AND +s.queue_id = (SELECT id FROM {schema}.queues WHERE name = %(queue)s)
  AND s.state IN (1, 3, 5) AND s.available_at <= %(at)s
  AND (s.expires_at IS NULL OR s.expires_at > %(at)s){select};

-- name: stream_advance
-- A position stream's pointer moves on, never back; a subscription's counts as used.
UPDATE {schema}.queues SET pointer = greatest(pointer, %(upto)s),
    used_at = CASE WHEN kind = 'subscription' THEN %(now)s ELSE used_at END
WHERE name = %(queue)s;

-- name: stream_spool_insert
INSERT INTO {schema}.stream_spool (session, round, chunk, n, data)
VALUES (%(session)s, %(round)s, %(chunk)s, %(n)s, %(data)s);

-- name: stream_spool_read
SELECT round, data FROM {schema}.stream_spool
WHERE session = %(session)s AND round > %(after)s AND round <= %(upto)s
ORDER BY round, chunk;

-- name: stream_spool_settle
DELETE FROM {schema}.stream_spool WHERE session = %(session)s AND round <= %(upto)s;

-- name: stream_spool_all
SELECT round, data FROM {schema}.stream_spool WHERE session = %(session)s ORDER BY round, chunk;

-- name: stream_spool_drop
DELETE FROM {schema}.stream_spool WHERE session = %(session)s;

-- name: stream_restore
-- A dropped stream's spooled rounds go back into the queue as they were, claimed by the
-- stream's session, which is then closed like any other.
COPY {schema}.messages ({spool_names}) FROM STDIN;

-- name: sink_batch_lock
-- The sink's row is locked until the publish commits: two drivers publishing the same
-- batch at once (a zombie and its replacement) publish it once.
SELECT batch FROM {schema}.sinks WHERE name = %(name)s FOR UPDATE;

-- name: sink_record
INSERT INTO {schema}.sinks (name, batch, updated_at)
VALUES (%(name)s, %(batch)s, extract(epoch FROM clock_timestamp()))
ON CONFLICT (name) DO UPDATE SET batch = excluded.batch, updated_at = excluded.updated_at;

-- name: staging_close
-- Every staging session of an aborted batch write (and the write's own: pid NULL), or
-- of one micro-batch of a streaming sink (pid the batch id).
DELETE FROM {schema}.sessions WHERE host = %(host)s AND (%(pid)s::bigint IS NULL OR pid = %(pid)s);


-- name: remove_kept
-- At most %(limit)s done messages past their queue's retention (a queue whose
-- retention was turned off keeps none): per queue one range of messages_settled up to
-- now - retention, never a scan. Nodes sweeping at once skip each other's rows.
WITH pick AS (
    SELECT k.id, k.slot FROM {schema}.queues AS q
    CROSS JOIN LATERAL (
        SELECT m.id, m.slot FROM {schema}.messages AS m
        WHERE m.queue_id = q.id AND m.state = 6
          AND m.settled_at <= %(now)s - coalesce(q.retention, 0)
          -- A message a rules slice holds stays until the slice is reset (docs/rules.md).
          AND NOT EXISTS (SELECT 1 FROM {schema}.slice_members AS s WHERE s.message_id = m.id)
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) AS k
    -- A topic's done message is its newest's tombstone: collection removes it.
    WHERE q.kind <> 'topic'
    LIMIT %(limit)s
), gone AS (
    DELETE FROM {schema}.messages AS d
    WHERE d.id = ANY(ARRAY(SELECT id FROM pick))
    RETURNING 1)
SELECT count(*) FROM gone;
