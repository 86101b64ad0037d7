"""What the group-commit tests (blocking and sluice.aio) put in a committer's place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Queued(list[Any]):
    """A group committer's queue that calls ``full`` once ``count`` commits wait in it:
    the event a test waits for before it lets the write in flight end."""

    def __init__(self, count: int, full: Callable[[], object]) -> None:
        super().__init__()
        self.wanted, self.full = count, full

    def append(self, item: Any) -> None:
        super().append(item)
        if len(self) >= self.wanted:
            self.full()
