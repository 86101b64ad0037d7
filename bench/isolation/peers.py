"""The peer line of the isolation benchmark: RabbitMQ on the same drain workload.

A durable classic queue, the messages published persistent with publisher confirms
and preloaded; 4 consumer processes with ``prefetch_count=1`` acknowledge each
message (batch size 1, like sluice's one-message transactions). With
``single_active=True`` the queue is declared ``x-single-active-consumer``: RabbitMQ's
way to keep a queue's messages in order across consumers (one consumer at a time
takes the whole queue), the nearest it comes to a sluice group.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

RABBIT_HOST, RABBIT_PORT, RABBIT_USER, RABBIT_PASSWORD = "127.0.0.1", 5672, "guest", "guest"


def _params() -> Any:
    import pika

    return pika.ConnectionParameters(
        host=RABBIT_HOST,
        port=RABBIT_PORT,
        credentials=pika.PlainCredentials(RABBIT_USER, RABBIT_PASSWORD),
        heartbeat=60,
    )


def _consume(queue: str, stop_at: int, sync: tuple[Any, Any, Any]) -> None:
    import pika

    counter, start, finished = sync
    conn = pika.BlockingConnection(_params())
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)

    def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
        ch.basic_ack(delivery_tag=method.delivery_tag)
        with counter.get_lock():
            counter.value += 1

    start.wait()
    ch.basic_consume(queue, on_message, auto_ack=False)
    while counter.value < stop_at:
        conn.process_data_events(time_limit=0.05)
    finished.put(time.perf_counter())
    conn.close()


def rabbit_drain(messages: int, consumers: int, *, single_active: bool) -> float | None:
    """Seconds for ``consumers`` processes to drain ``messages``; None without a broker."""
    try:
        import pika
    except ImportError:
        return None
    queue = "sluice_bench_iso_sac" if single_active else "sluice_bench_iso"
    try:
        conn = pika.BlockingConnection(_params())
    except pika.exceptions.AMQPConnectionError:
        return None
    ch = conn.channel()
    ch.queue_delete(queue)
    arguments = {"x-single-active-consumer": True} if single_active else {}
    ch.queue_declare(queue, durable=True, arguments=arguments)
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
    body = b'{"n": 0, "pad": "' + b"x" * 64 + b'"}'
    for _ in range(messages):
        ch.basic_publish("", queue, body, props)
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    start = ctx.Event()
    finished: Any = ctx.Queue()
    procs = [
        ctx.Process(target=_consume, args=(queue, messages, (counter, start, finished)))
        for _ in range(consumers)
    ]
    for p in procs:
        p.start()
    time.sleep(2.0)  # the consumers connect before the clock starts
    t0 = time.perf_counter()
    start.set()
    ends = [finished.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    ch.queue_delete(queue)
    conn.close()
    return float(max(ends)) - t0
