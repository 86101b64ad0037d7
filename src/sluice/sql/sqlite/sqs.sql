-- name: sqs_dedup
-- effect, expect 1: a FIFO message's deduplication id, written by the commit of its
-- enqueue; one kept since :since (five minutes) changes nothing, and the enqueue does not
-- commit (the sender is answered as the first time). An older one is taken over.
INSERT INTO idempotency (owner, key, fingerprint, status, answer, started_at)
VALUES (:owner, :key, 'sqs-dedup', 200, :answer, :now)
ON CONFLICT (owner, key) DO UPDATE
SET answer = excluded.answer, started_at = excluded.started_at
WHERE idempotency.started_at < :since;
