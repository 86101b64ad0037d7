"""Declarative rules: the behaviour every backend must show (docs/rules.md)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import sluice
from sluice import ManualClock
from sluice.errors import ConfigurationError, MessageError, RuleDefinitionError
from sluice.rules import batch, fast
from sluice.rules.runner import BatchResult

T0 = 1_700_000_000.0


@pytest.fixture
def clock(db: sluice.Database) -> ManualClock:
    db.clock = clock = ManualClock(T0)
    return clock


def bodies(db: sluice.Database, queue: str) -> list[Any]:
    """What a queue holds now, processed or not, in order (browsing takes nothing)."""
    return [m.body for m in db.queue(queue).browse(limit=1000)] + [
        m.body for m in db.queue(queue).browse(state="done", limit=1000)
    ]


def ready(db: sluice.Database, queue: str) -> list[Any]:
    return [m.body for m in db.queue(queue).browse(limit=1000)]


ROUTING = """
-- one message in, three out, one computed property
CREATE QUEUE orders;
CREATE QUEUE billing;
CREATE QUEUE shipping;
CREATE QUEUE audit;
CREATE PROPERTY total AS real QUEUE billing, shipping, audit VALUE body.total;
CREATE RULE route FOR orders
  IF body.total > 0 THEN
    ENQUEUE json_object('order', body.id, 'total', body.total) INTO billing,
    ENQUEUE json_object('order', body.id) INTO shipping,
    ENQUEUE json_object('order', body.id, 'seen', now()) INTO audit
  ELSE
    ENQUEUE json_object('refused', body.id) INTO audit;
"""


def test_a_routing_rule_enqueues_its_actions_once_with_computed_properties(
    db: sluice.Database, clock: ManualClock
) -> None:
    db.apply(ROUTING)
    orders = db.queue("orders")
    orders.put_many([{"id": n, "total": n * 10.0} for n in range(5)])
    stats = db.rules.run_until_idle()
    assert stats.processed == 5
    assert ready(db, "billing") == [{"order": n, "total": n * 10.0} for n in range(1, 5)]
    assert ready(db, "shipping") == [{"order": n} for n in range(1, 5)]
    assert ready(db, "audit") == [{"refused": 0}] + [{"order": n, "seen": T0} for n in range(1, 5)]
    billed = db.queue("billing").browse(limit=10)
    assert [m.properties["total"] for m in billed] == [10.0, 20.0, 30.0, 40.0]
    first = billed[0].properties
    assert first["rule"] == "route"
    assert first["trigger_queue"] == "orders"
    assert first["created_at"] == T0
    # Processed once: running again does nothing more.
    assert db.rules.run_until_idle().processed == 0
    assert len(ready(db, "billing")) == 4


def test_applying_the_same_file_twice_changes_nothing(db: sluice.Database) -> None:
    first = db.apply(ROUTING)
    second = db.apply(ROUTING)
    assert first == second
    db.queue("orders").put({"id": 1, "total": 1.0})
    assert db.rules.run_until_idle().processed == 1
    assert len(ready(db, "billing")) == 1


def test_a_changed_rule_applies_to_messages_not_yet_processed(db: sluice.Database) -> None:
    db.apply(ROUTING)
    db.queue("orders").put({"id": 1, "total": 1.0})
    db.rules.run_until_idle()
    db.apply(
        "CREATE RULE route FOR orders IF true THEN ENQUEUE json_object('v2', body.id) INTO audit;"
    )
    db.queue("orders").put({"id": 2, "total": 1.0})
    db.rules.run_until_idle()
    assert ready(db, "audit")[-1] == {"v2": 2}
    assert len(ready(db, "billing")) == 1


def test_static_mistakes_are_refused_with_their_line(db: sluice.Database) -> None:
    with pytest.raises(RuleDefinitionError, match="line 3"):
        db.apply(
            "CREATE QUEUE a;\nCREATE QUEUE b;\n"
            "CREATE RULE r FOR a IF true THEN ENQUEUE 1 INTO nowhere;"
        )
    with pytest.raises(RuleDefinitionError, match="slice"):
        db.apply("CREATE QUEUE a;\nCREATE RULE r FOR a IF slicekey() = 'x' THEN RESET;")
    # Nothing of a refused file was applied.
    assert db.backend.get_queue("a") is None


SLICES = """
CREATE QUEUE parts;
CREATE QUEUE assembled;
CREATE PROPERTY orderID AS text QUEUE parts VALUE body.order;
CREATE SLICING byOrder ON orderID;
CREATE RULE assemble FOR byOrder
  IF (SELECT count(*) FROM slice() AS s) = 3 THEN
    ENQUEUE json_object('order', slicekey(),
                        'sum', (SELECT sum(s.body.n) FROM slice() AS s)) INTO assembled,
    RESET;
"""


def test_a_slicing_joins_parallel_messages_and_reset_starts_a_new_lifetime(
    db: sluice.Database,
) -> None:
    db.apply(SLICES)
    parts = db.queue("parts")
    for n in range(1, 7):
        parts.put({"order": "a" if n % 2 else "b", "n": n})
    db.rules.run_until_idle()
    assert ready(db, "assembled") == [{"order": "a", "sum": 9}, {"order": "b", "sum": 12}]
    # After the reset, the slice starts empty: three more are needed.
    parts.put_many([{"order": "a", "n": 10}, {"order": "a", "n": 20}])
    db.rules.run_until_idle()
    assert len(ready(db, "assembled")) == 2
    parts.put({"order": "a", "n": 30})
    db.rules.run_until_idle()
    assert ready(db, "assembled")[-1] == {"order": "a", "sum": 60}


def test_retention_removes_processed_messages_only_once_no_slice_holds_them(
    db: sluice.Database, clock: ManualClock
) -> None:
    db.apply(SLICES)
    parts = db.queue("parts")
    parts.put_many([{"order": "a", "n": 1}, {"order": "a", "n": 2}, {"order": "b", "n": 1}])
    db.rules.run_until_idle()
    # Two of slice a and one of b are held: nothing is removed.
    assert len(db.queue("parts").browse(state="done", limit=10)) == 3
    parts.put({"order": "a", "n": 3})
    stats = db.rules.run_until_idle()  # a is complete and reset: its three may go
    assert stats.removed == 3
    left = db.queue("parts").browse(state="done", limit=10)
    assert [m.body for m in left] == [{"order": "b", "n": 1}]


ECHO = """
CREATE QUEUE timers KIND echo;
CREATE QUEUE due;
CREATE PROPERTY echo_target AS text QUEUE timers;
CREATE PROPERTY echo_after AS real QUEUE timers;
"""


def test_an_echo_queue_returns_a_message_to_its_target_once_at_its_time(
    db: sluice.Database, clock: ManualClock
) -> None:
    db.apply(ECHO)
    db.queue("timers").put({"remind": 1}, properties={"echo_target": "due", "echo_after": 60})
    db.rules.run_until_idle()
    assert ready(db, "due") == []
    clock.advance(59)
    db.rules.run_until_idle()
    assert ready(db, "due") == []
    clock.advance(1)
    db.rules.run_until_idle()
    db.rules.run_until_idle()
    assert ready(db, "due") == [{"remind": 1}]
    (fired,) = db.queue("due").browse(limit=10)
    assert "echo_target" not in fired.properties


def test_a_runtime_failure_becomes_an_error_message_and_the_trigger_does_not_loop(
    db: sluice.Database,
) -> None:
    db.apply(
        """
        SET ERRORQUEUE fileErrors;
        CREATE QUEUE fileErrors;
        CREATE QUEUE inbox ERRORQUEUE inboxErrors;
        CREATE QUEUE inboxErrors;
        CREATE QUEUE out;
        CREATE QUEUE out2;
        CREATE PROPERTY qty AS integer QUEUE out;
        CREATE RULE copy FOR inbox IF true THEN
            ENQUEUE json_object('n', body.n) INTO out WITH qty = body.n,
            ENQUEUE json_object('n', body.n) INTO out2;
        """
    )
    inbox = db.queue("inbox")
    inbox.put_many([{"n": 1}, {"n": 2.5}, {"n": 3}])
    stats = db.rules.run_until_idle()
    assert stats.processed == 3
    assert stats.errors == 1
    # The failing message's actions are all undone, the others done.
    assert ready(db, "out") == [{"n": 1}, {"n": 3}]
    assert ready(db, "out2") == [{"n": 1}, {"n": 3}]
    (error,) = ready(db, "inboxErrors")
    assert error["error"] == "message"
    assert error["rule"] == "copy"
    assert "integer" in error["message"]
    assert error["trigger"]["queue"] == "inbox"
    assert error["trigger"]["body"] == {"n": 2.5}
    assert ready(db, "fileErrors") == []
    assert db.rules.run_until_idle().processed == 0


def test_error_queues_may_have_rules(db: sluice.Database) -> None:
    db.apply(
        """
        CREATE QUEUE inbox ERRORQUEUE errs;
        CREATE QUEUE errs;
        CREATE QUEUE alerts;
        CREATE RULE fail FOR inbox IF true THEN ENQUEUE body.missing INTO alerts;
        CREATE RULE deadLink FOR errs IF true THEN
            ENQUEUE json_object('alert', body.rule, 'kind', body.error) INTO alerts;
        """
    )
    db.queue("inbox").put({"n": 1})
    db.rules.run_until_idle()
    assert ready(db, "alerts") == [{"alert": "fail", "kind": "body"}]


def test_a_fixed_property_cannot_be_set_by_a_producer(db: sluice.Database) -> None:
    db.apply("CREATE QUEUE q; CREATE PROPERTY k AS text FIXED QUEUE q VALUE upper(body.name);")
    q = db.queue("q")
    q.put({"name": "ab"})
    assert q.browse(limit=1)[0].properties == {"k": "AB"}
    with pytest.raises(MessageError, match="FIXED"):
        q.put({"name": "cd"}, properties={"k": "x"})


def test_a_property_type_cannot_change_while_messages_keep_it(db: sluice.Database) -> None:
    db.apply("CREATE QUEUE q; CREATE PROPERTY k AS text QUEUE q VALUE body.name;")
    db.queue("q").put({"name": "ab"})
    with pytest.raises(ConfigurationError, match="keeps 1 message"):
        db.apply("CREATE PROPERTY k AS integer QUEUE q VALUE body.n;")


def test_relations_read_kept_messages_of_other_queues(db: sluice.Database) -> None:
    db.apply(
        """
        CREATE QUEUE blocked;
        CREATE QUEUE requests;
        CREATE QUEUE accepted;
        CREATE QUEUE refused;
        CREATE PROPERTY customer AS text QUEUE blocked, requests VALUE body.customer;
        CREATE RULE check FOR requests
          IF EXISTS (SELECT 1 FROM queue('blocked') AS b
                     WHERE b.props.customer = property('customer'))
          THEN ENQUEUE body INTO refused
          ELSE ENQUEUE body INTO accepted;
        """
    )
    db.queue("blocked").put({"customer": "c2"})
    db.queue("requests").put_many([{"customer": c} for c in ("c1", "c2", "c3")])
    db.rules.run_until_idle()
    assert ready(db, "accepted") == [{"customer": "c1"}, {"customer": "c3"}]
    assert ready(db, "refused") == [{"customer": "c2"}]


def test_queue_priority_orders_the_scheduler(db: sluice.Database) -> None:
    db.apply(
        """
        CREATE QUEUE low PRIORITY 1;
        CREATE QUEUE high PRIORITY 5;
        CREATE QUEUE log;
        CREATE RULE l FOR low IF true THEN ENQUEUE json_object('q', 'low') INTO log;
        CREATE RULE h FOR high IF true THEN ENQUEUE json_object('q', 'high') INTO log;
        """
    )
    db.queue("low").put(1)
    db.queue("high").put(1)
    db.rules.run_until_idle()
    assert ready(db, "log") == [{"q": "high"}, {"q": "low"}]


def test_the_rules_run_in_the_background_until_stopped(db: sluice.Database) -> None:
    db.apply(ROUTING)
    db.rules.start()
    try:
        db.queue("orders").put({"id": 1, "total": 5.0})
        with db.transaction() as tx:
            (m,) = tx.dequeue("billing", wait=10)
            assert m.body == {"order": 1, "total": 5.0}
    finally:
        db.rules.stop()


def test_a_file_applied_while_the_engine_runs_takes_effect_without_a_restart(
    db: sluice.Database,
) -> None:
    db.apply(ROUTING)
    db.rules.start()
    try:
        db.queue("orders").put({"id": 1, "total": 5.0})
        with db.transaction() as tx:
            assert [m.body for m in tx.dequeue("shipping", wait=10)] == [{"order": 1}]
        db.apply(
            "CREATE RULE route FOR orders IF true THEN ENQUEUE json_object('v2', body.id) "
            "INTO shipping;"
        )
        db.queue("orders").put({"id": 2, "total": 5.0})
        with db.transaction() as tx:
            assert [m.body for m in tx.dequeue("shipping", wait=10)] == [{"v2": 2}]
    finally:
        db.rules.stop()


def test_two_engines_on_one_database_process_each_message_once(shared_url: str) -> None:
    """Two processes' engines (two Databases) share the work: nothing twice, nothing lost."""
    first, second = sluice.connect(shared_url), sluice.connect(shared_url)
    try:
        first.apply(ROUTING + SLICES)
        first.queue("orders").put_many([{"id": n, "total": 1.0} for n in range(600)])
        first.queue("parts").put_many([{"order": f"o{n // 3}", "n": 1} for n in range(300)])
        first.rules.start(batch=16)
        second.rules.start(batch=16)
        with first.transaction() as tx:
            got: list[int] = []
            while len(got) < 600:
                got += [m.body["order"] for m in tx.dequeue("shipping", limit=100, wait=20)]
        assert sorted(got) == list(range(600))
        with first.transaction() as tx:
            done: list[dict[str, Any]] = []
            while len(done) < 100:
                done += [m.body for m in tx.dequeue("assembled", limit=100, wait=20)]
        assert sorted(d["order"] for d in done) == sorted(f"o{n}" for n in range(100))
        assert all(d["sum"] == 3 for d in done)
    finally:
        first.rules.stop()
        second.rules.stop()
        first.close()
        second.close()


def test_the_sql_enqueue_and_the_python_one_make_the_same_messages(
    db: sluice.Database, clock: ManualClock
) -> None:
    """A batch is enqueued by SQL (rules/fast.py), also where two actions' messages go to
    one queue; the second batch here by Python (a check fails: sent back whole): the
    results agree."""
    db.apply(ROUTING)
    orders = db.queue("orders")
    orders.put_many([{"id": 1, "total": 5.0}, {"id": 2, "total": 7.5}])  # SQL
    db.rules.run_until_idle()
    orders.put_many([{"id": 3, "total": 5.0}, {"id": 0, "total": 0}])
    db.rules.run_until_idle()
    billed = db.queue("billing").browse(limit=10)
    assert [m.body for m in billed] == [
        {"order": 1, "total": 5.0},
        {"order": 2, "total": 7.5},
        {"order": 3, "total": 5.0},
    ]
    by_sql, by_python = billed[0], billed[2]
    for m in (by_sql, by_python):
        assert m.content_type == "application/json"
        assert set(m.properties) == {"total", "rule", "created_at", "trigger_id", "trigger_queue"}
        assert m.properties["rule"] == "route"
        assert m.properties["created_at"] == T0
        assert m.properties["trigger_queue"] == "orders"
    assert by_sql.properties["total"] == by_python.properties["total"] == 5.0
    assert isinstance(by_sql.properties["trigger_id"], int)
    assert [m.body for m in db.queue("audit").browse(limit=10)] == [
        {"order": 1, "seen": T0},
        {"order": 2, "seen": T0},
        {"order": 3, "seen": T0},
        {"refused": 0},
    ]


FANOUT = """
CREATE QUEUE orders;
CREATE QUEUE billing;
CREATE QUEUE audit;
CREATE PROPERTY region AS text INHERITED QUEUE orders, billing, audit;
CREATE PROPERTY urgent AS boolean QUEUE billing;
CREATE PROPERTY total AS real QUEUE billing, audit VALUE body.total;
CREATE PROPERTY label AS text QUEUE audit VALUE body.meta.label;
CREATE RULE fan FOR orders
  IF body.total > 0 THEN
    ENQUEUE json_object('order', body.id, 'n', 1, 'meta', body.meta) INTO audit,
    ENQUEUE json_object('order', body.id, 'total', body.total) INTO billing
      WITH urgent = body.total > 10,
    ENQUEUE json_object('order', body.id, 'n', 2, 'total', body.total) INTO audit
  ELSE
    ENQUEUE body.id INTO audit;
"""


def _made(db: sluice.Database) -> list[tuple[str, Any, str, dict[str, Any]]]:
    """What the targets hold, in delivery order, without what differs between runs."""
    made = []
    for queue in ("billing", "audit"):
        for m in db.queue(queue).browse(limit=100):
            kept = {k: v for k, v in m.properties.items() if k != "trigger_id"}
            made.append((queue, m.body, m.content_type, kept))
    return made


def test_the_sql_enqueue_makes_what_the_python_path_makes_message_for_message(
    db: sluice.Database, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two actions into one queue, WITH, inherited and computed properties (also read off
    the trigger's body through the made body's entries), a body that is a JSON scalar: per
    queue in (trigger, action) order, by SQL as by Python."""
    db.apply(FANOUT)
    orders = [
        {"id": 1, "total": 5.0, "meta": {"label": "a"}},
        {"id": 2, "total": 0},
        {"id": 3, "total": 12.5, "meta": {"label": "c"}},
    ]
    regions = ["north", None, "south"]

    def run() -> list[tuple[str, Any, str, dict[str, Any]]]:
        for body, region in zip(orders, regions, strict=True):
            db.queue("orders").put(body, properties={"region": region} if region else None)
        assert db.rules.run_until_idle().processed == len(orders)
        made = _made(db)
        with db.transaction() as tx:  # consumed: the next run's start empty
            for queue in ("billing", "audit"):
                tx.dequeue(queue, limit=100)
        return made

    writes: list[object] = []
    fast_write = batch.Batch._fast_write
    monkeypatch.setattr(
        batch.Batch, "_fast_write", lambda self, *a: writes.append(fast_write(self, *a))
    )
    by_sql = run()
    assert len(writes) == 1  # one batch, by SQL
    # A computed property of another type: the batch goes by Python, which refuses it.
    db.queue("orders").put({"id": 4, "total": 1.0, "meta": {"label": 7}})
    stats = db.rules.run_until_idle()
    assert (stats.processed, stats.errors, len(writes)) == (1, 1, 1)
    (error,) = ready(db, "sluice_rule_errors")
    assert error["error"] == "message"
    assert "'label'" in error["message"]
    assert ready(db, "billing") == []
    monkeypatch.setattr(fast, "usable", lambda *_: False)  # no target takes SQL's
    by_python = run()
    assert by_sql == by_python
    assert [(q, b) for q, b, _, _ in by_sql] == [
        ("billing", {"order": 1, "total": 5.0}),
        ("billing", {"order": 3, "total": 12.5}),
        ("audit", {"order": 1, "n": 1, "meta": {"label": "a"}}),
        ("audit", {"order": 1, "n": 2, "total": 5.0}),
        ("audit", 2),
        ("audit", {"order": 3, "n": 1, "meta": {"label": "c"}}),
        ("audit", {"order": 3, "n": 2, "total": 12.5}),
    ]
    assert by_sql[2][3]["label"] == "a"
    assert by_sql[5][3]["label"] == "c"
    billed = by_sql[0][3]
    assert billed == {"region": "north", "urgent": False, "total": 5.0, "rule": "fan",
                      "created_at": T0, "trigger_queue": "orders"}  # fmt: skip


def test_workers_process_batches_at_once_and_keep_the_order_of_what_they_make(
    db: sluice.Database,
) -> None:
    db.apply(ROUTING)
    db.queue("orders").put_many([{"id": n, "total": 1.0 + n} for n in range(200)])
    stats = db.rules.run_until_idle(batch=8, workers=3)
    assert (stats.processed, stats.errors) == (200, 0)
    # Each order once, in every target in the orders' order: a queue's batches write in
    # the order they were taken, whichever worker took them.
    for queue in ("billing", "shipping", "audit"):
        assert [m["order"] for m in ready(db, queue)] == list(range(200))
    with pytest.raises(ConfigurationError, match="workers must be at least 1"):
        db.rules.run_until_idle(workers=0)


def test_applying_an_unchanged_file_keeps_the_version(db: sluice.Database) -> None:
    db.apply(ROUTING)
    (first,) = db.backend.rules_read("rules_version", {})
    db.apply(ROUTING)
    assert db.backend.rules_read("rules_version", {}) == [first]
    db.apply("DROP RULE route;")
    assert db.backend.rules_read("rules_version", {})[0][0] == first[0] + 1


def test_queues_of_one_priority_take_turns(db: sluice.Database) -> None:
    db.apply(
        """
        CREATE QUEUE a;
        CREATE QUEUE b;
        CREATE QUEUE log;
        CREATE RULE la FOR a IF true THEN ENQUEUE json_object('q', 'a') INTO log;
        CREATE RULE lb FOR b IF true THEN ENQUEUE json_object('q', 'b') INTO log;
        """
    )
    db.queue("a").put_many([1, 2, 3])
    db.queue("b").put_many([1, 2, 3])
    db.rules.run_until_idle(batch=1)
    assert [m["q"] for m in ready(db, "log")] == ["a", "b", "a", "b", "a", "b"]


def _reading(queue: str) -> str:
    """A condition that is always true but reads ``queue``: rules that write it then go a
    message at a time, the reference the waves are compared with."""
    return f"AND NOT EXISTS (SELECT 1 FROM queue('{queue}') AS x WHERE 1 = 0)"


def _sliced(suffix: str, *, one_at_a_time: bool) -> str:
    """SLICES with a reset by a queue rule too; ``one_at_a_time``: its rules also read
    a queue they write (an empty read), which makes the engine go a message at a time."""
    extra = _reading(f"made{suffix}") if one_at_a_time else ""
    return f"""
    CREATE QUEUE parts{suffix};
    CREATE QUEUE made{suffix};
    CREATE PROPERTY order{suffix} AS text QUEUE parts{suffix} VALUE body.order;
    CREATE SLICING by{suffix} ON order{suffix};
    CREATE RULE assemble{suffix} FOR by{suffix}
      IF (SELECT count(*) FROM slice() AS s) = 3 {extra} THEN
        ENQUEUE json_object('order', slicekey(), 'n', body.n,
                            'sum', (SELECT sum(s.body.n) FROM slice() AS s)) INTO made{suffix},
        RESET;
    CREATE RULE cancel{suffix} FOR parts{suffix}
      IF body.cancel THEN ENQUEUE json_object('cancelled', body.order) INTO made{suffix},
                          RESET by{suffix}
      ELSE ENQUEUE json_object('seen', body.n) INTO made{suffix};
    """


def test_a_batch_of_messages_sharing_slices_gives_what_one_at_a_time_gives(
    db: sluice.Database,
) -> None:
    """Messages of one slice in one batch are evaluated in successive waves: each sees
    the joins and resets of those before it, and the made messages keep the batch's
    order, exactly as a message at a time."""
    db.apply(_sliced("W", one_at_a_time=False) + _sliced("S", one_at_a_time=True))
    keys = "aabacbbaabcacabbbaaccb"
    for suffix in ("W", "S"):
        db.queue(f"parts{suffix}").put_many(
            [{"order": k, "n": n, "cancel": n % 7 == 6} for n, k in enumerate(keys)]
        )
    assert db.rules.run_until_idle(batch=256).processed == 2 * len(keys)
    made = ready(db, "madeW")
    assert made == ready(db, "madeS")
    # Parts 0, 1 and 3 complete slice a: its message comes before part 3's own.
    assert made[:5] == [{"seen": 0}, {"seen": 1}, {"seen": 2}, {"order": "a", "n": 3, "sum": 4},
                        {"seen": 3}]  # fmt: skip
    assert {"cancelled": "a"} in made


def test_a_failure_in_a_wave_undoes_that_message_alone(db: sluice.Database) -> None:
    """A message of a wave whose action fails gets its error message in the batch's
    order, and its reset is undone: the next message of its slice still sees it."""
    text = """
    CREATE QUEUE pairs{s} ERRORQUEUE errors{s};
    CREATE QUEUE errors{s};
    CREATE QUEUE out{s};
    CREATE PROPERTY pair{s} AS text QUEUE pairs{s} VALUE body.pair;
    CREATE SLICING by{s} ON pair{s};
    CREATE RULE match{s} FOR by{s}
      IF (SELECT count(*) FROM slice() AS s) = 2 {extra} THEN
        ENQUEUE body.label INTO out{s}, RESET;
    """
    db.apply(text.format(s="W", extra="") + text.format(s="S", extra=_reading("outS")))
    parts = [
        {"pair": "a", "label": "a1"},
        {"pair": "b"},
        {"pair": "a", "label": "a2"},
        {"pair": "b", "label": None},  # completes b with a NULL body: an error, no reset
        {"pair": "b", "label": "b3"},  # b holds three now: nothing
        {"pair": "a", "label": "a3"},
        {"pair": "a", "label": "a4"},
    ]
    for s in ("W", "S"):
        db.queue(f"pairs{s}").put_many(parts)
    stats = db.rules.run_until_idle(batch=256)
    assert stats.processed == 14
    assert stats.errors == 2
    assert ready(db, "outW") == ready(db, "outS") == ["a2", "a4"]
    (error,) = ready(db, "errorsW")
    assert error["error"] == "body"
    assert error["trigger"]["body"] == {"pair": "b", "label": None}
    assert [e["trigger"]["body"] for e in ready(db, "errorsS")] == [error["trigger"]["body"]]


def test_the_background_engine_tells_of_each_committed_batch(db: sluice.Database) -> None:
    db.apply(ROUTING)
    told: list[tuple[str, int, dict[str, int]]] = []
    done = threading.Event()

    def on_batch(queue: str, result: BatchResult) -> None:
        told.append((queue, result.processed, dict(result.produced)))
        done.set()

    db.rules.start(on_batch=on_batch)
    try:
        db.queue("orders").put({"id": 1, "total": 2.0})
        assert done.wait(10.0)
    finally:
        db.rules.stop()
    assert told == [("orders", 1, {"billing": 1, "shipping": 1, "audit": 1})]
    assert ready(db, "billing") == [{"order": 1, "total": 2.0}]


def test_a_run_of_several_workers_stops_whole_when_one_fails(db: sluice.Database) -> None:
    db.apply(ROUTING)
    db.queue("orders").put_many([{"id": n, "total": 1.0} for n in range(20)])

    def on_batch(queue: str, result: BatchResult) -> None:
        raise RuntimeError("the monitor broke")

    stop = threading.Event()
    with pytest.raises(RuntimeError, match="the monitor broke"):
        db.rules.run(batch=5, workers=2, on_batch=on_batch, stop=stop)
    assert stop.is_set()  # the other worker was stopped too: run returned


def test_a_made_body_its_target_refuses_becomes_an_error_message(db: sluice.Database) -> None:
    """The SQL enqueue leaves out a body over the target's largest size or a NULL one;
    the batch then goes by Python, which makes their error messages."""
    db.apply(
        """
        CREATE QUEUE inbox ERRORQUEUE bad;
        CREATE QUEUE bad;
        CREATE QUEUE out;
        CREATE QUEUE names;
        CREATE RULE copy FOR inbox IF true THEN
          ENQUEUE json_object('text', body.text) INTO out,
          ENQUEUE body.name INTO names;
        """
    )
    db.alter_queue("out", max_size=40)
    inbox = db.queue("inbox")
    inbox.put_many([{"text": "short", "name": "a"}, {"text": "x" * 60, "name": "b"},
                    {"text": "fine", "name": None}, {"text": "ok", "name": "d"}])  # fmt: skip
    stats = db.rules.run_until_idle()
    assert (stats.processed, stats.errors) == (4, 2)
    assert ready(db, "out") == [{"text": "short"}, {"text": "ok"}]
    assert ready(db, "names") == ["a", "d"]
    errors = ready(db, "bad")
    assert [e["error"] for e in errors] == ["message", "body"]
    assert [e["trigger"]["body"]["name"] for e in errors] == ["b", None]


def test_a_message_made_by_python_keeps_its_system_properties(db: sluice.Database) -> None:
    # A NULL body sends the batch down the Python path, which makes the error message;
    # the other message is made there too, on a queue with no declared properties.
    db.apply("""
        CREATE QUEUE a; CREATE QUEUE b;
        CREATE RULE r FOR a IF true THEN ENQUEUE body.x INTO b;
    """)
    db.queue("a").put_many([{"x": 1}, {"y": 2}])
    db.rules.run_until_idle()
    (made,) = db.queue("b").browse()
    assert made.body == 1
    assert made.properties["rule"] == "r"
    assert made.properties["trigger_queue"] == "a"
