"""One process of the mixed soak (bench/soak/mixed.py): python -m bench.soak.actor ROLE ...

Every actor reports, at the end of each window of the run (windows counted from the
driver's ``start``, so all actors' windows line up), one JSON line:
``{"window": i, "stream": s, "role": "put"|"take", "n": messages, "lat": {p50, p99, max}}``
(latency: seconds from the producer's clock reading before its commit to the consumer's
after its dequeue returned; producer and consumers share this host's clock).

Roles:
- ``put URL STREAM QUEUE RATE BATCH``: batches of BATCH into QUEUE (a queue or a topic),
  paced to RATE messages/s (0: as fast as it can);
- ``take URL STREAM QUEUE BATCH``: takes up to BATCH per transaction, the commit settles;
- ``http-put PORT SECRET STREAM QUEUE RATE BATCH`` and ``http-take PORT SECRET STREAM QUEUE
  BATCH``: the same through ``sluice serve`` (enqueue requests of BATCH; leases of BATCH,
  each message acknowledged by its token).
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from collections.abc import Callable

from bench.harness import summarize

_pause = threading.Event().wait
_PAD = "x" * 64


class Windows:
    """Counts and latencies of the current window; reported when the window ends."""

    def __init__(self, start: float, width: float, stream: str, role: str) -> None:
        self.start, self.width, self.stream, self.role = start, width, stream, role
        self.index = self._now_index()
        self.n = 0
        self.lat: list[float] = []

    def _now_index(self) -> int:
        return int((time.time() - self.start) // self.width)

    def add(self, n: int, latencies: list[float] | None = None) -> None:
        index = self._now_index()
        if index != self.index:
            self.flush()
            self.index = index
        self.n += n
        if latencies:
            self.lat.extend(latencies)

    def flush(self) -> None:
        lat = summarize(self.lat)
        event = {"window": self.index, "stream": self.stream, "role": self.role, "n": self.n}
        event["lat"] = {k: lat[k] for k in ("p50", "p99", "max")} if lat else {}
        print(json.dumps(event), flush=True)
        self.n, self.lat = 0, []


def pace(rate: float, batch: int, send: Callable[[list[dict[str, object]]], object],
         windows: Windows) -> None:  # fmt: skip
    """Send batches forever, at ``rate`` messages/s on average (0: unpaced)."""
    began, sent = time.monotonic(), 0
    while True:
        bodies: list[dict[str, object]] = [{"at": time.time(), "pad": _PAD} for _ in range(batch)]
        send(bodies)
        sent += batch
        windows.add(batch)
        if rate > 0:
            ahead = began + sent / rate - time.monotonic()
            if ahead > 0:
                _pause(ahead)


def latencies(bodies: list[dict[str, object]]) -> list[float]:
    now = time.time()
    return [now - float(b["at"]) for b in bodies if isinstance(b, dict) and "at" in b]  # type: ignore[arg-type]


def put(url: str, queue: str, rate: float, batch: int, windows: Windows) -> None:
    import sluice

    q = sluice.connect(url).queue(queue)
    pace(rate, batch, q.put_many, windows)


def take(url: str, queue: str, batch: int, windows: Windows) -> None:
    import sluice

    db = sluice.connect(url)
    while True:
        with db.transaction() as tx:
            taken = tx.dequeue(queue, limit=batch, wait=0.5)
        windows.add(len(taken), latencies([m.body for m in taken]))


class Http:
    """One keep-alive connection to ``sluice serve`` with a key."""

    def __init__(self, port: int, secret: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {secret}"}

    def post(self, path: str, body: object, expect: int) -> object:
        data = b"" if body is None else json.dumps(body).encode()
        self.conn.request("POST", path, body=data, headers=self.headers)
        response = self.conn.getresponse()
        answer = response.read()
        if response.status != expect:
            raise RuntimeError(f"POST {path}: {response.status} {answer[:300]!r}")
        return json.loads(answer) if answer else None


def http_put(port: int, secret: str, queue: str, *, rate: float, batch: int, w: Windows) -> None:
    client = Http(port, secret)
    path = f"/api/queues/{queue}/messages"
    pace(
        rate,
        batch,
        lambda bodies: client.post(path, {"messages": [{"body": b} for b in bodies]}, 201),
        w,
    )


def http_take(port: int, secret: str, queue: str, batch: int, windows: Windows) -> None:
    client = Http(port, secret)
    while True:
        answer = client.post(f"/api/queues/{queue}/leases", {"limit": batch, "wait": 0.5}, 200)
        assert isinstance(answer, dict)
        taken = answer["messages"]
        for m in taken:
            client.post(f"/api/leases/{m['token']}/ack", None, 204)
        windows.add(len(taken), latencies([m["body"] for m in taken]))


def main() -> None:
    role, args = sys.argv[1], sys.argv[2:]
    start, width = float(args.pop()), float(args.pop())  # the last two: window width, start
    if role == "put":
        url, stream, queue, rate, batch = args
        put(url, queue, float(rate), int(batch), Windows(start, width, stream, "put"))
    elif role == "take":
        url, stream, queue, batch = args
        take(url, queue, int(batch), Windows(start, width, stream, "take"))
    elif role == "http-put":
        port, secret, stream, queue, rate, batch = args
        w = Windows(start, width, stream, "put")
        http_put(int(port), secret, queue, rate=float(rate), batch=int(batch), w=w)
    elif role == "http-take":
        port, secret, stream, queue, batch = args
        http_take(int(port), secret, queue, int(batch), Windows(start, width, stream, "take"))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
