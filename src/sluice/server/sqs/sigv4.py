"""Signature Version 4: the check of an AWS SDK's request, against the secret of the
sluice key its access key id names (docs/sqs.md, "keys").

Only the header form (``Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=...,
Signature=...``) is accepted; the date must be within 15 minutes of the server's (real)
time, as AWS requires.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote

from sluice.server.sqs.errors import SqsError

__all__ = ["SKEW", "Credential", "credential", "verify"]

SKEW = 15 * 60.0
"""Seconds a request's date may be away from the server's time."""

_ALGORITHM = "AWS4-HMAC-SHA256"
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^,\s]+),\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9a-f]{64})$"
)
_STAMP = re.compile(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z")


@dataclass(frozen=True, slots=True)
class Credential:
    """What a request's Authorization header says: who, for which day, region and service,
    which headers it signed and its signature."""

    access_key: str
    day: str
    region: str
    service: str
    signed: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.day}/{self.region}/{self.service}/aws4_request"


def credential(headers: Mapping[str, str]) -> Credential:
    """The request's credential; MissingAuthenticationToken without an Authorization
    header, IncompleteSignature for one that is not SigV4's."""
    header = headers.get("authorization")
    if not header:
        raise SqsError(
            "MissingAuthenticationToken",
            "Request is missing Authentication Token: sign requests with an API key's name "
            "as the access key id and its secret as the secret access key",
            403,
        )
    found = _AUTH.match(header.strip())
    parts = found.group(1).split("/") if found else []
    if found is None or len(parts) != 5 or parts[4] != "aws4_request":
        raise SqsError(
            "IncompleteSignature",
            "the Authorization header is not a Signature Version 4 one "
            f"({_ALGORITHM} Credential=KEY/DAY/REGION/SERVICE/aws4_request, "
            "SignedHeaders=..., Signature=...)",
        )
    signed = tuple(found.group(2).split(";"))
    return Credential(parts[0], parts[1], parts[2], parts[3], signed, found.group(3))


def verify(
    cred: Credential,
    secret: str,
    *,
    method: str,
    raw_path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    now: Callable[[], float] = time.time,
) -> None:
    """Nothing if the request is signed by ``secret``; SqsError with SQS's code if not."""
    stamp = headers.get("x-amz-date", "")
    when = _seconds(stamp)
    if when is None:
        raise SqsError(
            "IncompleteSignature", "the request has no valid X-Amz-Date (YYYYMMDDTHHMMSSZ)"
        )
    if abs(now() - when) > SKEW:
        raise SqsError(
            "RequestExpired",
            f"the request's date {stamp} is more than 15 minutes away from the server's "
            "time: check the client's clock",
        )
    if not stamp.startswith(cred.day):
        raise SqsError("SignatureDoesNotMatch", "the credential's day is not X-Amz-Date's", 403)
    if "host" not in cred.signed:
        raise SqsError("SignatureDoesNotMatch", "the Host header must be signed", 403)
    canonical = _canonical(
        method, raw_path=raw_path, query=query, headers=headers, signed=cred.signed, body=body
    )
    to_sign = "\n".join([_ALGORITHM, stamp, cred.scope, _sha256(canonical.encode())])
    key = ("AWS4" + secret).encode("utf-8")
    for part in (cred.day, cred.region, cred.service, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, cred.signature):
        raise SqsError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method.",
            403,
        )


def _seconds(stamp: str) -> float | None:
    """``X-Amz-Date`` (YYYYMMDDTHHMMSSZ, UTC) as seconds since the epoch; None if it is
    not one (a regular expression and calendar.timegm: strptime took a fifth of a
    signature check's time)."""
    found = _STAMP.fullmatch(stamp)
    if found is None:
        return None
    year, month, day, hour, minute, second = map(int, found.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))


def _canonical(
    method: str,
    *,
    raw_path: str,
    query: str,
    headers: Mapping[str, str],
    signed: tuple[str, ...],
    body: bytes,
) -> str:
    path = quote(unquote(raw_path or "/"), safe="/~") or "/"
    pairs = sorted(
        (quote(k, safe="-_.~"), quote(v, safe="-_.~"))
        for k, v in parse_qsl(query, keep_blank_values=True)
    )
    canonical_query = "&".join(f"{k}={v}" for k, v in pairs)
    lines = "".join(f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in signed)
    payload = headers.get("x-amz-content-sha256") or _sha256(body)
    return "\n".join([method, path, canonical_query, lines, ";".join(signed), payload])


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
