-- Gateway queues (sluice.gateways; backends/gateways.py): which transport serves a
-- queue, in which direction, with what settings (a JSON object).

-- name: gateways_put
-- Defining a gateway again replaces its transport and settings: applying a definition
-- file twice is idempotent, and a changed one takes effect at the next `sluice run`.
INSERT INTO {schema}.gateways (queue, direction, transport, settings, created_at)
VALUES (:queue, :direction, :transport, :settings, :now)
ON CONFLICT (queue) DO UPDATE
SET direction = excluded.direction, transport = excluded.transport,
    settings = excluded.settings;

-- name: gateways_list
SELECT queue, direction, transport, settings, created_at
FROM {schema}.gateways
ORDER BY queue;

-- name: gateways_drop
DELETE FROM {schema}.gateways WHERE queue = :queue;
