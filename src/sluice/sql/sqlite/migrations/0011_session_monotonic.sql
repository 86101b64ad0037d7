-- sessions.heartbeat_mono: the heartbeat's time on the host's monotonic clock as well.
-- A session of this very host (and boot) is judged by it (sluice.engine.lease), so a
-- wall clock stepped forward (an NTP step, an operator's `date`) further than the lease
-- does not make every live session look dead and have its work rolled back.
ALTER TABLE sessions ADD COLUMN heartbeat_mono REAL;
