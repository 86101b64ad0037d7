-- Settle deletes the ids it is given through a hash join: as `id = ANY(in_ids)` under
-- a generic plan (plpgsql's, after a few calls) it compared every row with every id,
-- so a commit of 20,000 messages of lanes took most of a second.
CREATE OR REPLACE FUNCTION {schema}.settle(in_session bigint, in_tx bigint, in_ids bigint[],
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
