"""Turns (rules/turns.py): a queue's batches write in the order they were taken."""

from __future__ import annotations

import threading

import pytest

from sluice.rules.turns import Retake, Turns


def test_a_batch_writes_after_every_batch_taken_before_it_is_done() -> None:
    turns = Turns()
    with turns.taking() as first:
        pass
    with turns.taking() as second:
        pass
    assert (first, second) == (0, 1)
    wrote: list[int] = []
    waiting = threading.Event()

    def later() -> None:
        waiting.set()
        turns.wait(second)
        wrote.append(second)

    thread = threading.Thread(target=later)
    thread.start()
    waiting.wait()
    turns.wait(first)  # the first batch's turn at once
    wrote.append(first)
    assert wrote == [first]  # the second waits for the first to be done
    turns.done(first)
    thread.join(timeout=10)
    assert wrote == [first, second]


def test_batches_done_out_of_order_count_once_all_before_them_are() -> None:
    turns = Turns()
    tickets = []
    for _ in range(3):
        with turns.taking() as ticket:
            tickets.append(ticket)
    turns.done(tickets[1])  # rolled back early, while the first still runs
    turns.wait(tickets[0])  # the first's turn: it returns at once
    turns.done(tickets[0])
    turns.wait(tickets[2])  # the first and second done: the third's turn at once


def test_a_batch_rolled_back_voids_the_batches_taken_after_it() -> None:
    """They may hold messages behind its own (a PostgreSQL take skips rows others hold):
    they roll back too, and the next take waits until they have, so that it starts at
    the front of the queue again."""
    turns = Turns()
    tickets = []
    for _ in range(3):
        with turns.taking() as ticket:
            tickets.append(ticket)
    first, second, third = tickets
    turns.done(first, rolled_back=True)  # its connection was lost
    with pytest.raises(Retake):
        turns.wait(second)
    turns.done(second)  # rolled back for the Retake: that voids nothing more
    taken: list[int] = []

    def take() -> None:
        with turns.taking() as ticket:
            taken.append(ticket)

    thread = threading.Thread(target=take)
    thread.start()
    thread.join(timeout=0.1)
    assert taken == []  # the third still holds what it took
    turns.done(third)
    thread.join(timeout=10)
    assert taken == [3]
    turns.wait(3)  # a take after the rollbacks writes in its turn
