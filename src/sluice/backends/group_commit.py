"""Group commit: commits that arrive while another is being written go to disk together.

At synchronous FULL every commit waits for an fsync, and fsyncs are serial: N
threads committing at once would wait N fsyncs. Here the first committer leads:
it writes every commit queued so far in one database transaction, with one
fsync, then hands the lead to the first commit that queued up meanwhile. Each
commit stays all-or-nothing on its own (the backend gives each a savepoint), and
returns only once it is durable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["GroupCommitter"]

P = TypeVar("P")


class _Pending(Generic[P]):
    __slots__ = ("done", "error", "lead", "plan")

    def __init__(self, plan: P) -> None:
        self.plan = plan
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.lead = False


class GroupCommitter(Generic[P]):
    """Runs ``commit_many`` over whatever commits are waiting, one group at a time.

    ``commit_many`` returns, per plan, None or the exception that plan failed
    with (the others still commit); if it raises, the whole group failed.
    """

    def __init__(self, commit_many: Callable[[Sequence[P]], list[BaseException | None]]) -> None:
        self._commit_many = commit_many
        self._lock = threading.Lock()
        self._queue: list[_Pending[P]] = []
        self._leading = False
        self.groups = 0
        self.commits = 0

    def commit(self, plan: P) -> None:
        """Commit ``plan`` with whatever else is waiting; raises what ``plan`` failed with."""
        me = _Pending(plan)
        with self._lock:
            self._queue.append(me)
            lead = not self._leading
            self._leading = True
        if not lead:
            me.done.wait()
            if not me.lead:
                if me.error is not None:
                    raise me.error
                return
        self._lead()
        if me.error is not None:
            raise me.error

    def _lead(self) -> None:
        with self._lock:
            group, self._queue = self._queue, []
        try:
            results = self._commit_many([p.plan for p in group])
        except BaseException as exc:  # the whole group failed: nothing of it committed
            results = [exc] * len(group)
        self.groups += 1
        self.commits += len(group)
        for pending, error in zip(group, results, strict=True):
            pending.error = error
            pending.done.set()
        with self._lock:
            if self._queue:
                # Hand over rather than go on writing: this thread's own commit is
                # done, and it should not serve a steady stream of others forever.
                successor = self._queue[0]
                successor.lead = True
                successor.done.set()
            else:
                self._leading = False
