"""The http transport's client (sluice.gateways.client) against real sockets on
loopback: kept connections, a server that closes them while they idle, answers cut
short or not HTTP, and nobody listening."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from sluice.errors import DeliveryFailed
from sluice.gateways.client import HttpClient

OK = b"HTTP/1.1 201 Created\r\ncontent-type: application/json; charset=utf-8\r\n"
OK += b'content-length: 8\r\n\r\n{"id":1}'

Serve = Callable[[socket.socket, int], None]
"""What the server does with a connection (its number, from 0) after reading a request."""


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))  # fmt: skip
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


class Server:
    """A listener answering each connection's requests as ``serve`` says."""

    def __init__(self, serve: Serve, requests_per_connection: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/in"
        self.requests: list[tuple[int, bytes]] = []  # (connection, request)
        self._serve = serve
        self._per = requests_per_connection
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        number = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                for _ in range(self._per):
                    request = _read_request(conn)
                    if not request:
                        break
                    self.requests.append((number, request))
                    self._serve(conn, number)
            number += 1

    def close(self) -> None:
        self.listener.close()


Makes = Callable[..., HttpClient]
Serves = Callable[..., "Server"]


@pytest.fixture
def make() -> Iterator[Callable[..., HttpClient]]:
    made: list[HttpClient] = []

    def new(timeout: float = 5, headers: dict[str, str] | None = None) -> HttpClient:
        made.append(HttpClient(timeout=timeout, headers=headers or {}))
        return made[-1]

    yield new
    for one in made:
        one.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Serve, int], Server]]:
    servers: list[Server] = []

    def start(how: Serve, per: int = 100) -> Server:
        servers.append(Server(how, per))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_kept_connection_carries_the_next_posts(serve: Serves, make: Makes) -> None:
    server = serve(lambda conn, n: conn.sendall(OK))
    client = make(headers={"authorization": "Bearer k"})
    for n in range(3):
        answer = client.post(server.url, f'{{"n":{n}}}'.encode(), {"x-n": str(n)})
        assert (answer.status, answer.json(), answer.charset) == (201, {"id": 1}, "utf-8")
    assert [c for c, _ in server.requests] == [0, 0, 0]
    first = server.requests[0][1].decode()
    assert "authorization: Bearer k" in first
    assert "x-n: 0" in first
    assert first.endswith('{"n":0}')


def test_a_connection_the_server_closed_while_idle_is_replaced(serve: Serves, make: Makes) -> None:
    # One request per connection, then the server closes it without saying so (as an
    # idle keep-alive timeout does): each next post finds it closed and connects anew.
    server = serve(lambda conn, n: conn.sendall(OK), 1)
    client = make()
    for _ in range(3):
        assert client.post(server.url, b"{}", {}).status == 201
    assert [c for c, _ in server.requests] == [0, 1, 2]


def test_a_kept_connection_lost_mid_request_is_tried_once_anew(serve: Serves, make: Makes) -> None:
    # The first connection answers once, then is closed when the second request comes
    # (a race with the server's idle timeout): the request is sent again, once.
    def first_once(conn: socket.socket, number: int) -> None:
        if number == 0 and len(server.requests) == 2:
            conn.shutdown(socket.SHUT_RDWR)
            return
        conn.sendall(OK)

    server = serve(first_once)
    client = make()
    assert client.post(server.url, b"1", {}).status == 201
    assert client.post(server.url, b"2", {}).status == 201
    assert [(c, r.endswith(b"2")) for c, r in server.requests] == [(0, False), (0, True), (1, True)]


def test_a_new_connection_closed_without_an_answer_is_a_bad_response(
    serve: Serves, make: Makes
) -> None:
    server = serve(lambda conn, n: conn.shutdown(socket.SHUT_RDWR), 1)
    with pytest.raises(DeliveryFailed) as failed:
        make().post(server.url, b"{}", {})
    assert (failed.value.kind, failed.value.retry) == ("bad response", True)
    assert len(server.requests) == 1  # not sent again: the connection was new


def test_an_answer_cut_short_is_a_bad_response(serve: Serves, make: Makes) -> None:
    cut = b'HTTP/1.1 201 Created\r\ncontent-length: 100\r\n\r\n{"id"'
    server = serve(lambda conn, n: (conn.sendall(cut), conn.shutdown(socket.SHUT_RDWR)), 1)
    with pytest.raises(DeliveryFailed) as failed:
        make().post(server.url, b"{}", {})
    assert failed.value.kind == "bad response"


def test_no_answer_in_time_is_timed_out(serve: Serves, make: Makes) -> None:
    answered = threading.Event()
    server = serve(lambda conn, n: answered.wait(10), 1)
    with pytest.raises(DeliveryFailed) as failed:
        make(timeout=0.2).post(server.url, b"{}", {})
    answered.set()
    assert failed.value.kind == "timed out"


def test_nobody_listening_is_disconnected(make: Makes) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DeliveryFailed) as failed:
        make().post(f"http://127.0.0.1:{port}/", b"{}", {})
    assert failed.value.kind == "disconnected"
