-- queues.paused: claims take nothing from a paused queue; explained in the SQLite
-- migration of the same name.
ALTER TABLE {schema}.queues ADD COLUMN paused boolean NOT NULL DEFAULT false;
