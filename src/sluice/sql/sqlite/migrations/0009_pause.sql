-- queues.paused: while set (Queue.pause), claims take nothing from the queue; producers
-- still enqueue and browsing still shows its messages (docs/queues.md#pausing). Every
-- claim reads it in its own statement, so a pause in any process holds at once.
ALTER TABLE queues ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
