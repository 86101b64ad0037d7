-- The SQS-compatible endpoint (sluice.server.sqs; backends/sqs.py): the attributes and
-- tags SQS gives a queue (the sqs_queues table of 0012_sqs.sql / 0013_sqs.sql), and the
-- deduplication ids of FIFO queues, kept for five minutes in the idempotency table under
-- the owner 'sqs:' || queue (API keys' names have no colon, so no key's requests meet them).

-- name: sqs_queue_find
SELECT attributes, tags, created_at, changed_at
FROM {schema}.sqs_queues
WHERE name = :name;

-- name: sqs_queue_put
INSERT INTO {schema}.sqs_queues (name, attributes, tags, created_at, changed_at)
VALUES (:name, :attributes, :tags, :now, :now)
ON CONFLICT (name) DO UPDATE
SET attributes = excluded.attributes, tags = excluded.tags, changed_at = excluded.changed_at;

-- name: sqs_queue_add
-- A new queue's SQS record, unless it has one: written before the queue is made, so a
-- CreateQueue of the same name at the same time finds it (sluice.server.sqs.queues).
INSERT INTO {schema}.sqs_queues (name, attributes, tags, created_at, changed_at)
VALUES (:name, :attributes, :tags, :now, :now)
ON CONFLICT (name) DO NOTHING;

-- name: sqs_queue_forget
DELETE FROM {schema}.sqs_queues WHERE name = :name;

-- name: sqs_dedup_forget
-- A queue deleted forgets its deduplication ids: one made again under its name is new.
DELETE FROM {schema}.idempotency WHERE owner = :owner;

-- name: sqs_dedup_find
SELECT answer
FROM {schema}.idempotency
WHERE owner = :owner AND key = :key AND started_at >= :since;
