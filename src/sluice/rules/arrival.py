"""Arrival order across queues: which processed queues the engine takes together.

Demaq processes messages in arrival order within queue priorities. Taking a batch of
one queue at a time is the same thing only while no message of another queue could
change what the batch's rules see. That holds unless two queues share state the rules
read: a slicing whose slices some rule reads or resets (every queue that joins it
changes what ``slice()`` sees), or a queue that ``queue('q')`` reads (the queue itself,
processed, and every queue whose rules write into it). Queues of one PRIORITY linked
that way form an *arrival group*: the engine takes the group's next messages across
its queues by message priority, then arrival (the id the enqueue gave), and processes
them in that order in one transaction, each run of consecutive messages of one queue
as a batch of that queue (rules/runner.py). A queue linked to none is taken alone,
batched as before: nothing another queue does can change its outcome.

Queues of different priorities are not merged: the engine finishes what is due in the
higher priority first (engine.py's rounds), which is Demaq's order too. Echo queues
are taken alone: they evaluate no rule, and their messages wait on their own clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from sluice.rules.plan import PlannedEnqueue, QueuePlan, slicing_lock

__all__ = ["Group", "arrival_groups"]

Group = tuple[QueuePlan, ...]
"""Plans taken together (one: a queue taken alone), in the application's order."""


def arrival_groups(plans: Sequence[QueuePlan]) -> list[Group]:
    """``plans`` as the engine takes them: each arrival group once, in the position of
    its first plan; every other plan alone."""
    parent = list(range(len(plans)))

    def root(n: int) -> int:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def link(a: int, b: int) -> None:
        if plans[a].definition.priority == plans[b].definition.priority:
            parent[root(a)] = root(b)

    observed: set[object] = {key for plan in plans for key in plan.locks if key < 0}
    observed |= {("queue", name) for plan in plans for name in plan.reads}
    touching: dict[object, list[int]] = {}
    for n, plan in enumerate(plans):
        if plan.echo:
            continue
        for key in _touched(plan, observed):
            touching.setdefault(key, []).append(n)
    for members in touching.values():
        for n in members[1:]:
            link(members[0], n)
    groups: dict[int, list[QueuePlan]] = {}
    for n, plan in enumerate(plans):
        groups.setdefault(root(n), []).append(plan)
    return [tuple(group) for group in groups.values()]


def _touched(plan: QueuePlan, observed: set[object]) -> set[object]:
    """What ``plan``'s processing reads or changes that another queue's rules read: the
    observed slicings (by lock key) it joins, reads or resets, and the observed queues
    (those ``queue('q')`` reads) it reads, writes into, or is."""
    keys: set[object] = {slicing_lock(j.slicing) for j in plan.joins}
    keys |= {key for key in plan.locks if key < 0}
    keys |= {("queue", name) for name in plan.reads}
    keys |= {
        ("queue", action.queue)
        for rule in plan.rules
        for branch in rule.branches
        for action in branch.actions
        if isinstance(action, PlannedEnqueue)
    }
    keys.add(("queue", plan.name))
    return keys & observed
