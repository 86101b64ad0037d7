"""Raw SQS requests to the app in-process, signed as botocore signs them (its own
SigV4Auth): for the refusals no SDK would send, and for the query protocol, which
botocore's SQS model no longer speaks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

import sluice
from sluice.server.grants import Keys
from sluice.server.signing import SigningKey

pytest.importorskip("botocore")
pytest.importorskip("fastapi")

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from fastapi.testclient import TestClient

from sluice.server.app import create_app

HOST = "http://testserver"


class Wire:
    """An app over a fresh SQLite database with one admin key, and a client that sends
    it raw bodies, signed or not."""

    def __init__(self, db: sluice.Database, client: TestClient, secret: str) -> None:
        self.db, self.client, self.secret = db, client, secret

    def signed(
        self, body: bytes, headers: dict[str, str], *, path: str = "/", secret: str | None = None
    ) -> dict[str, str]:
        """``headers`` with botocore's Signature Version 4 of the request added."""
        request = AWSRequest(method="POST", url=f"{HOST}{path}", data=body, headers=headers)
        SigV4Auth(Credentials("admin", secret or self.secret), "sqs", "us-east-1").add_auth(request)
        return dict(request.headers.items())

    def post(
        self, body: bytes, headers: dict[str, str], *, path: str = "/", sign: bool = True
    ) -> Any:
        sent = self.signed(body, headers, path=path) if sign else headers
        return self.client.post(path, content=body, headers=sent)

    def json(self, operation: str, params: dict[str, Any] | bytes) -> Any:
        body = params if isinstance(params, bytes) else json.dumps(params).encode()
        headers = {
            "X-Amz-Target": f"AmazonSQS.{operation}",
            "Content-Type": "application/x-amz-json-1.0",
        }
        return self.post(body, headers)

    def form(self, params: dict[str, str], *, path: str = "/") -> Any:
        body = urlencode(params).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
        return self.post(body, headers, path=path)


@pytest.fixture
def wire(tmp_path: Path) -> Iterator[Wire]:
    signing = SigningKey.generate(tmp_path / "signing.key")
    with sluice.connect(f"sqlite:///{tmp_path / 'sqs.db'}") as db:
        secret = Keys(db, signing=signing).add("admin", [], admin=True)
        app = create_app(db, signing=signing, max_request=4 * 1024 * 1024)
        with TestClient(app, base_url=HOST) as client:
            yield Wire(db, client, secret)
