-- Content-aware queuing: message types, accepted types and priority functions per
-- queue, declared properties stored in slots (t1-t4 text, n1-n4 numbers), and the
-- helper functions compiled expressions call where a plain cast could fail.

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

ALTER TABLE {schema}.queues ADD COLUMN types text;
ALTER TABLE {schema}.queues ADD COLUMN priority_functions text;
ALTER TABLE {schema}.messages ADD COLUMN type text;
-- Text compares by code point ("C"), as on the other engines; indexes follow.
ALTER TABLE {schema}.messages ADD COLUMN t1 text COLLATE "C";
ALTER TABLE {schema}.messages ADD COLUMN t2 text COLLATE "C";
ALTER TABLE {schema}.messages ADD COLUMN t3 text COLLATE "C";
ALTER TABLE {schema}.messages ADD COLUMN t4 text COLLATE "C";
ALTER TABLE {schema}.messages ADD COLUMN n1 double precision;
ALTER TABLE {schema}.messages ADD COLUMN n2 double precision;
ALTER TABLE {schema}.messages ADD COLUMN n3 double precision;
ALTER TABLE {schema}.messages ADD COLUMN n4 double precision;

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

-- Enqueue as before, with the message type and the declared properties' values.
CREATE OR REPLACE FUNCTION {schema}.enqueue(in_session bigint, in_tx bigint, in_ready boolean,
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
        type, t1, t2, t3, t4, n1, n2, n3, n4)
    SELECT (SELECT slot FROM {schema}.rotation), q.id, CASE WHEN in_ready THEN 1 ELSE 0 END,
           e.priority, in_session, in_tx, e.num,
           e.body, decode(e.body_b64, 'base64'), nullif(e.content_type, 'application/json'),
           e.properties, e.correlation_id, e.reply_to, e.enqueued_at, e.available_at,
           e.expires_at, e.type, e.t1, e.t2, e.t3, e.t4, e.n1, e.n2, e.n3, e.n4
    FROM json_to_recordset(in_rows) AS e(
            queue text, num bigint, priority bigint, body text, body_b64 text,
            content_type text, properties text, correlation_id text, reply_to text,
            enqueued_at float8, available_at float8, expires_at float8, type text,
            t1 text, t2 text, t3 text, t4 text, n1 float8, n2 float8, n3 float8, n4 float8)
        JOIN {schema}.queues AS q ON q.name = e.queue
    ORDER BY e.num;  -- the order of enqueue within the transaction
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted <> json_array_length(in_rows) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = 'queue not found';
    END IF;
    RETURN inserted;
END $$;
