-- Topics and subscriptions: PostgreSQL's own statements (see common/topics.sql).

-- name: lock_subscription
-- One pull per subscription at a time: a second waits, then starts from the new pointer.
SELECT pointer FROM {schema}.queues WHERE id = %(subscription)s FOR UPDATE;

-- name: refill
-- A pull in one statement (PostgresTopics' refill), where SQLite's (sqlite_topics) is
-- seven statements: the subscription's row, found by its name, locked (one pull
-- per subscription at a time; a second waits, then reads the new pointer), its ready
-- messages counted up to %(half)s, the topic's last committed message past the pointer,
-- and, when fewer than half the window are ready (or %(everything)s is asked), the
-- messages in (pointer, last] that the selector holds for, up to the window's room,
-- inserted as the subscription's, and the pointer moved: to the last one taken when the
-- room ran out, else to the topic's last. The insert and the update see the statement's
-- snapshot, as the lock's row is read again once it is granted: what commits later has a
-- higher id (commit order) and is left for the next pull. Returns the count of ready
-- messages, how many were taken and their lanes (promoted after, in the same
-- transaction), whether the pointer moved, the subscription's id, when it was last
-- used, and whether it refused (below); no row when there is no such subscription.
-- The relax fragment lets it commit without waiting for the WAL flush wherever it runs.
-- Sent with a claim after it and no COMMIT between (PostgresTopics.pull_claim, one
-- implicit transaction), %(lanes)s is false: nothing could promote a lane's head
-- between the two, so when a lane's message is among the first it would take, it takes
-- nothing, leaves the pointer, and says it refused; the caller pulls again in a
-- transaction of its own, as above.
WITH sub AS (
    SELECT q.id, q.topic_id, q.pointer, q.used_at FROM {schema}.queues AS q
    WHERE q.name = %(name)s AND q.kind = 'subscription' {relax}
    FOR UPDATE
), ready AS (
    SELECT count(*) AS n FROM (SELECT 1 FROM {schema}.messages AS r
                               WHERE r.queue_id = (SELECT id FROM sub) AND r.state IN (1, 5)
                               LIMIT %(half)s) AS counted
), wanted AS (
    SELECT sub.id, sub.topic_id, sub.pointer,
           (SELECT max(m.id) FROM {schema}.messages AS m
            WHERE m.id > sub.pointer AND +m.queue_id = sub.topic_id AND m.state <> 0) AS last,
           CASE WHEN %(everything)s THEN NULL ELSE %(window)s - ready.n END AS room
    FROM sub, ready
    WHERE %(everything)s OR ready.n < %(half)s
), laned AS (
    -- The very rows the insert below would take (its conditions, order and limit).
    SELECT NOT %(lanes)s AND EXISTS (
        SELECT 1 FROM (SELECT m.lane FROM {schema}.messages AS m
                       WHERE m.id > (SELECT pointer FROM wanted)
                         AND m.id <= (SELECT last FROM wanted)
                         AND +m.queue_id = (SELECT topic_id FROM wanted)
                         AND m.state IN (1, 5){selector}
                       ORDER BY m.id
                       LIMIT (SELECT room FROM wanted)) AS head
        WHERE head.lane IS NOT NULL) AS refused
), taken AS (
    INSERT INTO {schema}.messages (
        slot, queue_id, state, priority, p_session, p_tx, p_num, body, body_bytes, content_type,
        properties, correlation_id, reply_to, enqueued_at, available_at, expires_at, type,
        t1, t2, t3, t4, n1, n2, n3, n4, grp, lane, ref)
    SELECT (SELECT slot FROM {schema}.rotation), (SELECT id FROM wanted),
           CASE WHEN m.lane IS NULL THEN 1 ELSE 5 END, m.priority, m.p_session, m.p_tx, m.p_num,
           m.body, m.body_bytes, m.content_type, m.properties, m.correlation_id, m.reply_to,
           m.enqueued_at, m.available_at, m.expires_at, m.type, m.t1, m.t2, m.t3, m.t4, m.n1,
           m.n2, m.n3, m.n4, m.grp, m.lane, m.id
    FROM {schema}.messages AS m
    WHERE m.id > (SELECT pointer FROM wanted) AND m.id <= (SELECT last FROM wanted)
      AND +m.queue_id = (SELECT topic_id FROM wanted) AND m.state IN (1, 5){selector}
      AND NOT (SELECT refused FROM laned)
    ORDER BY m.id
    LIMIT (SELECT room FROM wanted)
    RETURNING ref, lane
), moved AS (
    UPDATE {schema}.queues AS q
    SET pointer = greatest(q.pointer,
                           CASE WHEN w.room IS NOT NULL AND (SELECT count(*) FROM taken) >= w.room
                                THEN (SELECT max(ref) FROM taken) ELSE w.last END),
        used_at = %(now)s
    FROM wanted AS w
    WHERE q.id = w.id AND w.last IS NOT NULL AND NOT (SELECT refused FROM laned)
    RETURNING q.pointer
)
SELECT ready.n, (SELECT count(*) FROM taken),
       (SELECT array_agg(DISTINCT lane) FROM taken WHERE lane IS NOT NULL),
       EXISTS (SELECT 1 FROM moved), sub.id, sub.used_at, (SELECT refused FROM laned)
FROM sub, ready;

-- name: claim_subscribed
-- A plain claim from subscription %(queue)s that takes nothing while its topic has a
-- message past its pointer (topic_ahead, as subscription_state asks it): what a
-- consumer would otherwise ask in a round trip of its own before every take while
-- fewer than half its window are ready (PostgresTopics.pull_claim). Whatever the topic
-- has is pulled first, so priority order holds as it does after the question. Nothing
-- claimed: the row of NULLs says in its state column why: -1 the topic is ahead (pull,
-- then claim), -2 there is no such subscription; NULL, nothing is ready. The guard is a
-- one-time filter of the update: when it fails, nothing is picked or locked. As the
-- question's caller does (SqlTopics._touch_if_stale), it marks the subscription used
-- when its last use is %(touch_every)s seconds old.
WITH RECURSIVE sub AS (
    SELECT topic_id, pointer FROM {schema}.queues WHERE name = %(queue)s AND kind = 'subscription'
), touched AS (
    UPDATE {schema}.queues SET used_at = %(now)s
    WHERE name = %(queue)s AND kind = 'subscription'
      AND (used_at IS NULL OR used_at + %(touch_every)s <= %(now)s)
    RETURNING id
), {topic_levels}, news AS MATERIALIZED (
    SELECT (SELECT {topic_ahead} FROM sub) AS ahead
), claimed AS (
    UPDATE {schema}.messages AS m SET state = 2, c_session = %(session)s, c_tx = %(tx)s
    WHERE m.id = ANY(ARRAY(
        {claim_pick})) AND NOT (SELECT ahead FROM news)
    RETURNING {message_columns})
(SELECT * FROM claimed)
UNION ALL
SELECT NULL, (SELECT CASE WHEN ahead IS NULL THEN -2 WHEN ahead THEN -1 END FROM news),
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       {next_due_answer}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE NOT EXISTS (SELECT 1 FROM claimed)
ORDER BY 3 DESC, 1;
