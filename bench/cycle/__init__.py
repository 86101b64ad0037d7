"""The queue cycle (enqueue + claim + acknowledge) on SQLite: sluice against raw statements
and SQLite-backed peers, concurrent producers, and what each part of sluice's schema costs."""
