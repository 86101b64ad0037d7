"""The campaign's HTTP client actor: python -m tests.reliability.campaign_http BASE NAME SEED.

It talks to ``sluice serve`` at BASE (an actor the campaign kills too) with the key in
``SLUICE_CAMPAIGN_KEY``, in turns: it puts a transaction of 1-8 messages into ``web_in``
(one request, with an Idempotency-Key), then takes messages of ``served`` through a lease
request and acknowledges each. As the other actors (campaign_child.py) it reports on
stdout only what the server confirmed:

- ``committing`` before a put is sent, its ``w, t, s, k`` once the server answered 201;
  the put is written to ``SLUICE_CAMPAIGN_STATE/NAME.pending`` first, and the next
  incarnation sends an unconfirmed one again with the same key (docs/server.md: the
  same key gets the first answer, nothing more is enqueued);
- ``took`` for each leased message (``asked``: the monotonic time its request was sent,
  ``got``: when the answer came), ``acking`` when its ack is sent, ``acked`` (``at``)
  when the server answered 204.

Every answer but success is reported as an ``http`` event (the checker takes a 500 for a
violation) and the request is made again, or the ack given up, where a fault explains
it; any other answer is a mistake of this client or the server, and ends it (reported as
``died``).
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.reliability.campaign_actor import run, say

_pause = threading.Event().wait  # pacing, as campaign_child's (libfaketime and time.sleep)

RETRY = 0.05  # seconds between tries while the server is busy ...
DOWN = 0.2  # ... or down (it starts again at once, in seconds of imports)
LEASE = 5.0  # short, so that a message a killed client held comes back within the run
# Answers a fault explains: the server's database failed (503), the key's first request
# still runs (409); a lease a restarted server does not know or that ran out (404, 410),
# or whose transaction was rolled back when the server was taken for dead (409
# LeaseLost: it stalled past its session's lease). And 500, which none explains, is
# tried again too, the checker naming it.
PUT_AGAIN = {409, 500, 503}
TAKE_AGAIN = {500, 503}
NOT_ACKED = {404, 409, 410, 500, 503}


class Client:
    def __init__(self, base: str, name: str, me: str, rng: random.Random) -> None:
        key = os.environ["SLUICE_CAMPAIGN_KEY"]
        self.http = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=10.0
        )
        self.pending = Path(os.environ["SLUICE_CAMPAIGN_STATE"]) / f"{name}.pending"
        self.me, self.rng = me, rng

    def post(self, path: str, **kwargs: Any) -> httpx.Response | None:
        """The answer, or None when there was none (the server down or killed meanwhile)."""
        try:
            answer = self.http.post(path, **kwargs)
        except httpx.TransportError as exc:
            say(http=type(exc).__name__)
            return None
        if answer.status_code >= 300:
            say(http=answer.status_code, path=path.rsplit("/", 1)[-1], error=_error(answer))
        return answer

    # --- puts --------------------------------------------------------------------------
    def put(self, put: dict[str, Any]) -> None:
        """Send ``put`` (written to the pending file) until the server confirms it."""
        say(w=put["w"], t=put["t"], committing=True)
        headers = {"Idempotency-Key": put["key"]}
        while True:
            answer = self.post("/api/queues/web_in/messages", json=put["request"],
                               headers=headers)  # fmt: skip
            if answer is not None and answer.status_code == 201:
                break
            if answer is not None and answer.status_code not in PUT_AGAIN:
                raise RuntimeError(f"put {put['key']}: {answer.status_code} {answer.text}")
            _pause(RETRY if answer is not None else DOWN)
        say(w=put["w"], t=put["t"], s=put["s"], k=put["k"], into="web_in")
        self.pending.unlink()

    def resume(self) -> None:
        """Send again the put a killed incarnation left unconfirmed, with its key."""
        if self.pending.exists():
            put = json.loads(self.pending.read_text())
            say(resent=put["key"])
            self.put(put)

    def next_put(self, txn: int, seq: int) -> int:
        k = self.rng.randint(1, 8)
        bodies = [{"w": self.me, "s": seq + i, "t": txn, "k": k, "x": False} for i in range(k)]
        put = {"key": f"{self.me}-{txn}", "w": self.me, "t": txn, "s": seq, "k": k,
               "request": {"messages": [{"body": b} for b in bodies]}}  # fmt: skip
        written = self.pending.with_suffix(".new")
        written.write_text(json.dumps(put))
        written.replace(self.pending)  # whole or not at all, whenever this is killed
        self.put(put)
        return k

    # --- takes -------------------------------------------------------------------------
    def take(self) -> None:
        asked = time.monotonic()
        request = {"limit": self.rng.randint(1, 5), "wait": 0.2, "lease": LEASE}
        answer = self.post("/api/queues/served/leases", json=request)
        if answer is None or answer.status_code in TAKE_AGAIN:
            _pause(RETRY if answer is not None else DOWN)
            return
        if answer.status_code != 200:
            raise RuntimeError(f"lease: {answer.status_code} {answer.text}")
        got = time.monotonic()
        leased = answer.json()["messages"]
        for m in leased:
            say(took=[m["body"]["w"], m["body"]["s"]], token=m["token"], asked=asked, got=got)
        for m in leased:
            key = [m["body"]["w"], m["body"]["s"]]
            say(acking=key, token=m["token"], sent=time.monotonic())
            acked = self.post(f"/api/leases/{m['token']}/ack")
            if acked is not None and acked.status_code == 204:
                say(acked=key, token=m["token"], at=time.monotonic())
            elif acked is not None and acked.status_code not in NOT_ACKED:
                raise RuntimeError(f"ack: {acked.status_code} {acked.text}")


def _error(answer: httpx.Response) -> str:
    try:
        return str(answer.json().get("error", ""))
    except ValueError:
        return answer.text[:80]


def main() -> None:
    base, name, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    me = f"{name}.{os.getpid()}"
    client = Client(base, name, me, random.Random(seed))
    say(ready=me)
    client.resume()
    seq = 0
    for txn in range(1, 1 << 62):
        seq += client.next_put(txn, seq)
        client.take()
        _pause(client.rng.uniform(0.0, 0.02))


if __name__ == "__main__":
    run(main)
