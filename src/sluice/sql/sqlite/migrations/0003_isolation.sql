-- Isolation levels and ordered groups. A message with a lane (its group, or its
-- writer or block on an isolated queue) waits in state 5 behind the lane's head;
-- only the head (state 1) is claimable by anyone, the rest only by the head's owner.

ALTER TABLE queues ADD COLUMN isolation TEXT NOT NULL DEFAULT 'none'
    CHECK (isolation IN ('none', 'ordered', 'blockwise', 'ordered_blockwise'));
ALTER TABLE messages ADD COLUMN grp TEXT;
ALTER TABLE messages ADD COLUMN lane TEXT;

CREATE INDEX messages_lane ON messages (queue_id, lane, state, id) WHERE lane IS NOT NULL;

DROP INDEX messages_expiring;
CREATE INDEX messages_expiring ON messages (expires_at)
    WHERE state IN (1, 5) AND expires_at IS NOT NULL;
