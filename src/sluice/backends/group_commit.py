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
        with self._lock:
            lead = not self._leading
            self._leading = True
            me = None if lead else _Pending(plan)
            if me is not None:
                self._queue.append(me)
        if me is None:
            # Nobody was writing, so nobody is queued: commit alone, with no event to
            # make or set (a single-threaded caller's every commit comes here).
            error = self._run([plan])[0]
            self._hand_over()
            if error is not None:
                raise error
            return
        me.done.wait()
        if not me.lead:
            if me.error is not None:
                raise me.error
            return
        self._lead()
        if me.error is not None:
            raise me.error

    def _run(self, plans: list[P]) -> list[BaseException | None]:
        try:
            results = self._commit_many(plans)
        except BaseException as exc:  # the whole group failed: nothing of it committed
            results = [exc] * len(plans)
        self.groups += 1
        self.commits += len(plans)
        return results

    def _lead(self) -> None:
        with self._lock:
            group, self._queue = self._queue, []
        results = self._run([p.plan for p in group])
        for pending, error in zip(group, results, strict=True):
            pending.error = error
            pending.done.set()
        self._hand_over()

    def _hand_over(self) -> None:
        with self._lock:
            if self._queue:
                # Hand over rather than go on writing: this thread's own commit is
                # done, and it should not serve a steady stream of others forever.
                successor = self._queue[0]
                successor.lead = True
                successor.done.set()
            else:
                self._leading = False
