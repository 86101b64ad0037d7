-- The sluice schema for PostgreSQL, as the numbered migrations leave it.
-- {schema} is the schema sluice owns (default "sluice"); a test proves that
-- applying migrations/ from zero yields exactly these objects.

CREATE TABLE {schema}.queues (
    id           integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text    NOT NULL UNIQUE,
    max_attempts integer,
    error_queue  text,
    durability   text    NOT NULL CHECK (durability IN ('persistent', 'transient')),
    max_size     bigint  NOT NULL,
    created_at   double precision NOT NULL,
    types        text,            -- JSON array of the message types accepted; NULL: any
    priority_functions text,      -- JSON object: message type -> priority expression
    isolation    text    NOT NULL DEFAULT 'none'  -- how readers are isolated (docs/isolation.md)
        CHECK (isolation IN ('none', 'ordered', 'blockwise', 'ordered_blockwise')),
    -- Topics, subscriptions, levels, credit and kept outcomes (0008_topics.sql).
    kind         text    NOT NULL DEFAULT 'queue'
        CHECK (kind IN ('queue', 'topic', 'subscription')),
    topic_id     integer,
    selector     text,
    pointer      bigint  NOT NULL DEFAULT 0,
    durable      boolean NOT NULL DEFAULT true,
    owner_session bigint,
    expire_after double precision,
    used_at      double precision,
    pull_window  integer,
    priority_levels integer,
    max_in_flight integer,
    retention    double precision,
    -- Claims take nothing from the queue while it is set (0011_pause.sql).
    paused       boolean NOT NULL DEFAULT false
);
CREATE INDEX queues_topic ON {schema}.queues (topic_id) WHERE topic_id IS NOT NULL;

CREATE TABLE {schema}.sessions (
    id           bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host         text    NOT NULL,
    pid          integer NOT NULL,
    started_at   double precision NOT NULL,  -- the database's clock, so hosts agree
    heartbeat_at double precision NOT NULL,
    lease        double precision NOT NULL
);

-- Message ids are the delivery sequence: taken under the queue's commit lock,
-- so within a queue they follow commit order (see the backend's docstring).
CREATE SEQUENCE {schema}.message_ids AS bigint;

-- Messages live in four partitions used in turn (rotation): new messages go to
-- the current slot; every few thousand messages the oldest partition's few
-- remaining rows move to the current one and it is TRUNCATEd, which frees its
-- dead rows even while a long transaction elsewhere keeps VACUUM from doing so.
CREATE TABLE {schema}.rotation (
    slot          smallint NOT NULL,   -- the partition new messages go to
    rotated_at_id bigint   NOT NULL,   -- message_ids' position at the last rotation
    rotated_at    double precision NOT NULL
);
INSERT INTO {schema}.rotation VALUES (0, 0, 0);

CREATE TABLE {schema}.messages (
    id             bigint   NOT NULL DEFAULT nextval('{schema}.message_ids'),
    slot           smallint NOT NULL,
    queue_id       integer  NOT NULL,
    state          smallint NOT NULL,
    priority       bigint   NOT NULL,
    p_session      bigint   NOT NULL,
    p_tx           bigint   NOT NULL,
    p_num          bigint   NOT NULL,
    c_session      bigint,
    c_tx           bigint,
    body           text,            -- JSON and text bodies
    body_bytes     bytea,           -- binary bodies
    content_type   text,            -- NULL: application/json, the common case
    properties     text,
    correlation_id text,
    reply_to       text,
    enqueued_at    double precision NOT NULL,  -- the producer's clock
    available_at   double precision NOT NULL,
    expires_at     double precision,
    attempts       integer  NOT NULL DEFAULT 0,
    error          text,
    origin_queue   text,
    type           text,            -- the message type, if any
    -- Declared properties' values (queue_properties); text by code point, as elsewhere.
    t1 text COLLATE "C", t2 text COLLATE "C", t3 text COLLATE "C", t4 text COLLATE "C",
    n1 double precision, n2 double precision, n3 double precision, n4 double precision,
    grp            text,            -- the producer's group
    lane           text COLLATE "C",  -- the ordering unit: group, writer or block (state 5: waiting)
    ref            bigint,          -- a subscription's row: the topic message it came from
    settled_at     double precision,  -- a kept outcome (state 6): when it was settled
    PRIMARY KEY (id, slot)
) PARTITION BY LIST (slot);
ALTER SEQUENCE {schema}.message_ids OWNED BY {schema}.messages.id;
CREATE TABLE {schema}.messages_0 PARTITION OF {schema}.messages FOR VALUES IN (0);
CREATE TABLE {schema}.messages_1 PARTITION OF {schema}.messages FOR VALUES IN (1);
CREATE TABLE {schema}.messages_2 PARTITION OF {schema}.messages FOR VALUES IN (2);
CREATE TABLE {schema}.messages_3 PARTITION OF {schema}.messages FOR VALUES IN (3);

-- Claims read ready messages of a queue in delivery order.
CREATE INDEX messages_queue ON {schema}.messages (queue_id, state, priority DESC, id);
CREATE INDEX messages_settled ON {schema}.messages (queue_id, settled_at) WHERE state = 6;

-- A transaction's uncommitted enqueues, and what each transaction holds.
CREATE INDEX messages_pending ON {schema}.messages (p_session, p_tx) WHERE state = 0;
CREATE INDEX messages_claimed ON {schema}.messages (c_session, c_tx) WHERE state = 2;

CREATE INDEX messages_expiring ON {schema}.messages (expires_at)
    WHERE state IN (1, 5) AND expires_at IS NOT NULL;

-- A lane's head and waiting messages, and who holds its messages.
CREATE INDEX messages_lane ON {schema}.messages (queue_id, lane, state, id)
    WHERE lane IS NOT NULL;

-- Fails the statement (and so its transaction) when a count is not the one
-- expected: lets a commit check what it settled without a second round trip.
CREATE FUNCTION {schema}.expect(actual bigint, expected bigint, what text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF actual <> expected THEN
        RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = what,
            DETAIL = format('%s of %s', actual, expected);
    END IF;
    RETURN actual;
END $$;

-- Promote: each listed lane that has no head (no message ready or held) gets its
-- oldest waiting message as head. Run after anything that may leave a lane
-- headless: a publish, a commit or abort of held messages, recovery, expiry.
-- Each lane's lock serialises it per lane, and the statements after it run on a
-- fresh snapshot, so two transactions changing one lane at once cannot both miss
-- the other's change (or both make a head).
CREATE FUNCTION {schema}.promote(in_queues text[], in_lanes text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    lane_row record;
    head_id bigint;
    head_slot smallint;
BEGIN
    -- Lane by lane in one sorted order (no deadlocks), each after taking its lock;
    -- small statements with their own prepared plans cost less than one big join.
    FOR lane_row IN
        SELECT DISTINCT qs.id AS queue_id, u.l AS lane,
               hashtextextended(u.q || '/' || u.l, 1936484707) AS k
        FROM unnest(in_queues, in_lanes) AS u(q, l)
        JOIN {schema}.queues AS qs ON qs.name = u.q
        ORDER BY k
    LOOP
        PERFORM pg_advisory_xact_lock(lane_row.k);
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM {schema}.messages AS o
            WHERE o.queue_id = lane_row.queue_id AND o.lane = lane_row.lane AND o.state = 1);
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM {schema}.messages AS o
            WHERE o.queue_id = lane_row.queue_id AND o.lane = lane_row.lane AND o.state = 2
              -- a transaction's claim of its own enqueue holds no lane
              AND (o.c_session <> o.p_session OR o.c_tx <> o.p_tx));
        SELECT w.id, w.slot INTO head_id, head_slot FROM {schema}.messages AS w
        WHERE w.queue_id = lane_row.queue_id AND w.lane = lane_row.lane AND w.state = 5
        ORDER BY w.id LIMIT 1;
        IF FOUND THEN
            UPDATE {schema}.messages SET state = 1
            WHERE id = head_id AND slot = head_slot AND state = 5;
        END IF;
    END LOOP;
END $$;

-- Settle: a commit that only acknowledges held messages of lanes, in one statement
-- (one round trip, no BEGIN/COMMIT): delete them, then give their lanes heads.
CREATE FUNCTION {schema}.settle(in_session bigint, in_tx bigint, in_ids bigint[],
                                in_queues text[], in_lanes text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    settled bigint;
BEGIN
    DELETE FROM {schema}.messages
    WHERE id IN (SELECT unnest(in_ids)) AND state = 2
      AND c_session = in_session AND c_tx = in_tx;
    GET DIAGNOSTICS settled = ROW_COUNT;
    IF settled <> cardinality(in_ids) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = 'lease lost',
            DETAIL = format('%s of %s', settled, cardinality(in_ids));
    END IF;
    PERFORM {schema}.promote(in_queues, in_lanes);
    RETURN settled;
END $$;

-- Expire overdue messages, then give the lanes whose head expired a new head.
CREATE FUNCTION {schema}.expire(in_now double precision) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    expired bigint;
    queues text[];
    lanes text[];
BEGIN
    WITH e AS (
        UPDATE {schema}.messages SET state = 3
        WHERE state IN (1, 5) AND expires_at IS NOT NULL AND expires_at <= in_now
        RETURNING queue_id, lane)
    SELECT count(*), array_agg(q.name) FILTER (WHERE e.lane IS NOT NULL),
           array_agg(e.lane) FILTER (WHERE e.lane IS NOT NULL)
    INTO expired, queues, lanes
    FROM e LEFT JOIN {schema}.queues AS q ON q.id = e.queue_id;
    IF lanes IS NOT NULL THEN
        PERFORM {schema}.promote(queues, lanes);
    END IF;
    RETURN expired;
END $$;

-- Enqueue: one JSON array of envelopes in, one statement. Ready messages first
-- take their queues' commit locks (held until the transaction ends; in_queues
-- names them), so that their ids, drawn afterwards, follow commit order within
-- each queue. A transaction that also publishes pending rows has taken the
-- locks for those already (commit_lock); advisory locks nest.
-- A ready message with a lane waits (state 5): the caller promotes its lanes after.
-- A non-durable call commits without waiting for the WAL flush.
CREATE FUNCTION {schema}.enqueue(in_session bigint, in_tx bigint, in_ready boolean,
                                 in_queues text[], in_rows json, in_durable boolean)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    inserted bigint;
BEGIN
    IF NOT in_durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF in_ready THEN
        PERFORM pg_advisory_xact_lock(1936484707, q.id) FROM (  -- 1936484707: "slic"
            SELECT id FROM {schema}.queues WHERE name = ANY(in_queues) ORDER BY id) AS q;
    END IF;
    INSERT INTO {schema}.messages (
        slot, queue_id, state, priority, p_session, p_tx, p_num, body, body_bytes,
        content_type, properties, correlation_id, reply_to, enqueued_at, available_at, expires_at,
        type, t1, t2, t3, t4, n1, n2, n3, n4, grp, lane)
    SELECT (SELECT slot FROM {schema}.rotation), q.id,
           CASE WHEN NOT in_ready THEN 0 WHEN e.lane IS NULL THEN 1 ELSE 5 END,
           e.priority, in_session, in_tx, e.num,
           e.body, decode(e.body_b64, 'base64'), nullif(e.content_type, 'application/json'),
           e.properties, e.correlation_id, e.reply_to, e.enqueued_at, e.available_at,
           e.expires_at, e.type, e.t1, e.t2, e.t3, e.t4, e.n1, e.n2, e.n3, e.n4, e.grp, e.lane
    FROM json_to_recordset(in_rows) AS e(
            queue text, num bigint, priority bigint, body text, body_b64 text,
            content_type text, properties text, correlation_id text, reply_to text,
            enqueued_at float8, available_at float8, expires_at float8, type text,
            t1 text, t2 text, t3 text, t4 text, n1 float8, n2 float8, n3 float8, n4 float8,
            grp text, lane text)
        JOIN {schema}.queues AS q ON q.name = e.queue
    ORDER BY e.num;  -- the order of enqueue within the transaction
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted <> json_array_length(in_rows) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = 'queue not found';
    END IF;
    RETURN inserted;
END $$;

CREATE TABLE {schema}.message_types (
    id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    kind       text NOT NULL CHECK (kind IN ('json', 'xml')),
    definition text NOT NULL,
    created_at double precision NOT NULL
);

CREATE TABLE {schema}.properties (
    id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    expression text NOT NULL,
    type       text NOT NULL CHECK (type IN ('text', 'number', 'boolean')),
    created_at double precision NOT NULL
);

CREATE TABLE {schema}.queue_properties (
    queue_id    integer NOT NULL,
    property_id integer NOT NULL,
    slot        text    NOT NULL CHECK (slot IN ('t1', 't2', 't3', 't4', 'n1', 'n2', 'n3', 'n4')),
    PRIMARY KEY (queue_id, property_id),
    UNIQUE (queue_id, slot)
);

-- Text to number by the expression language's grammar; NULL where it is not one.
CREATE FUNCTION {schema}.sluice_to_number(value text) RETURNS double precision
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF value !~ '^ *[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)? *$' THEN
        RETURN NULL;
    END IF;
    RETURN value::double precision;
EXCEPTION WHEN numeric_value_out_of_range THEN
    RETURN NULL;
END $$;

-- An ISO 8601 date or UTC date-time as a timestamp; NULL where it is not one.
CREATE FUNCTION {schema}.sluice_timestamp(value text) RETURNS timestamp
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF value !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?)?Z?$' THEN
        RETURN NULL;
    END IF;
    RETURN rtrim(value, 'Z')::timestamp;
EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
    RETURN NULL;
END $$;

CREATE FUNCTION {schema}.sluice_epoch(value text) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN extract(epoch FROM {schema}.sluice_timestamp(value) AT TIME ZONE 'UTC')::double precision;

CREATE FUNCTION {schema}.sluice_date_part(part text, value text) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN date_part(part, {schema}.sluice_timestamp(value));

-- Spark streams and sinks (docs/spark.md).
-- streams: a named consumer of a queue that holds what it took until Spark has
-- committed the micro-batch. Its session never expires (pid 0, endless lease), so
-- a stopped query's unacknowledged rounds wait for its restart; c_tx of a held
-- message is the round that took it. round: the last round begun; acked: the last
-- round acknowledged.
-- sinks: per streaming sink, the last micro-batch it published, so a replayed
-- batch publishes nothing twice.
CREATE TABLE {schema}.streams (
    queue_id   integer NOT NULL,
    name       text    NOT NULL,
    session    bigint  NOT NULL,
    round      bigint  NOT NULL DEFAULT 0,
    acked      bigint  NOT NULL DEFAULT 0,
    created_at double precision NOT NULL,
    PRIMARY KEY (queue_id, name)
);

-- stream_spool: a round taken from a queue without lanes, moved out of messages in one
-- piece (postgres_spool.py): n messages, every column, as a compressed Arrow stream.
-- Already compressed: stored out of line as is.
CREATE TABLE {schema}.stream_spool (
    session bigint  NOT NULL,
    round   bigint  NOT NULL,
    chunk   bigint  NOT NULL,  -- the first id of the statement that took it
    n       integer NOT NULL,
    data    bytea   NOT NULL,
    PRIMARY KEY (session, round, chunk)
);
ALTER TABLE {schema}.stream_spool ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE {schema}.sinks (
    name       text    PRIMARY KEY,
    batch      bigint  NOT NULL,
    updated_at double precision NOT NULL
);

-- Jobs, tasks, throughput profiles and schedules (docs/jobs.md).
-- task_types: defaults of a kind of task and the queue its tasks wait in; profile is
-- the throughput profile as JSON (NULL: no limit).
-- jobs: a group of tasks submitted together; its id is the submitting transaction's.
-- succeeded and failed count finished tasks, so status rolls up without a scan;
-- served_at turns late jobs round-robin; alerted_at: the completion alert was sent.
-- tasks: the record of a finished task (an unfinished one is a message).
-- rate_windows: tasks started per task type in one hour or processing cycle, shared
-- by every worker. schedules: cron schedules and when each is next due.
-- metrics: load signals reported by applications, read by load-following profiles.
CREATE TABLE {schema}.task_types (
    name         text    PRIMARY KEY,
    queue        text    NOT NULL,
    priority     bigint NOT NULL,
    duration     double precision,
    max_attempts bigint NOT NULL,
    backoff      double precision    NOT NULL,
    backoff_max  double precision    NOT NULL,
    timeout      double precision,
    retention    double precision,
    profile      text
);

CREATE TABLE {schema}.jobs (
    id          text    PRIMARY KEY,
    name        text    NOT NULL,
    job_type    text,
    priority    bigint NOT NULL,
    deadline    double precision,
    owner       text,
    info        text    NOT NULL,
    alert_queue text,
    retention   double precision,
    total       bigint NOT NULL,
    succeeded   bigint NOT NULL DEFAULT 0,
    failed      bigint NOT NULL DEFAULT 0,
    created_at  double precision    NOT NULL,
    started_at  double precision,
    ended_at    double precision,
    alerted_at  double precision,
    served_at   double precision    NOT NULL DEFAULT 0
);
CREATE INDEX jobs_open ON {schema}.jobs (deadline) WHERE ended_at IS NULL;
CREATE INDEX jobs_ended ON {schema}.jobs (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE {schema}.tasks (
    task       text    PRIMARY KEY,
    job_id     text,
    task_type  text    NOT NULL,
    success    bigint NOT NULL,
    note       text,
    attempts   bigint NOT NULL,
    started_at double precision    NOT NULL,
    ended_at   double precision    NOT NULL,
    expires_at double precision
);
CREATE INDEX tasks_job ON {schema}.tasks (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX tasks_expiring ON {schema}.tasks (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE {schema}.rate_windows (
    task_type text    NOT NULL,
    kind      text    NOT NULL,
    start     double precision    NOT NULL,
    used      bigint NOT NULL,
    PRIMARY KEY (task_type, kind, start)
);

CREATE TABLE {schema}.schedules (
    name      text PRIMARY KEY,
    task_type text NOT NULL,
    cron      text NOT NULL,
    tz        text NOT NULL,
    args      text NOT NULL,
    next_due  double precision NOT NULL
);

CREATE TABLE {schema}.metrics (
    name  text PRIMARY KEY,
    value double precision NOT NULL,
    at    double precision NOT NULL
);

-- The processing order of task queues (sluice.jobs.catalog): every key descending,
-- NULLs last as the compiled order says, then delivery order; only task messages.
CREATE INDEX messages_tasks ON {schema}.messages
    (queue_id, state, n1 DESC NULLS LAST, n2 DESC NULLS LAST, n4 DESC NULLS LAST,
     n3 DESC NULLS LAST, priority DESC, id) WHERE n1 IS NOT NULL;

-- Declarative rules (0009_rules.sql): stored properties, slices, the applied application.
CREATE TABLE {schema}.stored_properties (
    queue_id   integer NOT NULL,
    name       text    NOT NULL,
    type       text    NOT NULL
        CHECK (type IN ('text', 'integer', 'real', 'boolean', 'timestamp')),
    expression text,
    fixed      boolean NOT NULL DEFAULT false,
    PRIMARY KEY (queue_id, name)
);
CREATE TABLE {schema}.slice_members (
    slicing    text   NOT NULL,
    key        text   NOT NULL,
    message_id bigint NOT NULL,
    PRIMARY KEY (slicing, key, message_id)
);
CREATE INDEX slice_members_message ON {schema}.slice_members (message_id);
CREATE TABLE {schema}.rules_catalog (
    id          integer PRIMARY KEY CHECK (id = 1),
    version     bigint  NOT NULL,
    application text    NOT NULL,
    applied_at  double precision NOT NULL
);

-- API keys of the HTTP server (0010_server.sql): stored as the SHA-256 of their secrets.
CREATE TABLE {schema}.api_keys (
    name       text    PRIMARY KEY,
    hash       text    NOT NULL UNIQUE,
    grants     text    NOT NULL,
    admin      boolean NOT NULL DEFAULT false,
    created_at double precision NOT NULL,
    used_at    double precision,
    revoked_at double precision,
    signing    text
);

-- The answers of requests with an Idempotency-Key (0010_server.sql).
CREATE TABLE {schema}.idempotency (
    owner       text    NOT NULL,
    key         text    NOT NULL,
    fingerprint text    NOT NULL,
    status      integer,
    answer      text,
    started_at  double precision NOT NULL,
    PRIMARY KEY (owner, key)
);
CREATE INDEX idempotency_started ON {schema}.idempotency (started_at);

-- The queues that touch the outside world, and their transports (0012_gateways.sql).
CREATE TABLE {schema}.gateways (
    queue      text    PRIMARY KEY,
    direction  text    NOT NULL CHECK (direction IN ('in', 'out')),
    transport  text    NOT NULL,
    settings   text    NOT NULL,
    created_at double precision NOT NULL
);

-- The SQS endpoint's attributes and tags of queues (0013_sqs.sql).
CREATE TABLE {schema}.sqs_queues (
    name       text    PRIMARY KEY,
    attributes text    NOT NULL,
    tags       text    NOT NULL,
    created_at double precision    NOT NULL,
    changed_at double precision    NOT NULL
);
