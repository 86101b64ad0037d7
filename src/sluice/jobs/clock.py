"""The clocks of sluice.jobs: the engine's own (``sluice.clock``), under their old names."""

from sluice.clock import Clock, FastClock, ManualClock, SystemClock

__all__ = ["Clock", "FastClock", "ManualClock", "SystemClock"]
