"""kombu's queue and exchange names as sluice queue names, and back, without loss.

Celery names its queues ``celery``, ``celery@host.celery.pidbox`` or
``<uuid>.reply.celery.pidbox``; sluice names take letters, digits and ``_.:-``.
Every other character (and ``:`` itself, the escape) is written as ``:`` and two
hex digits per UTF-8 byte, so ``celery@host`` is stored as ``celery:40host`` and
read back as it was. A leading ``_`` is escaped too: sluice names starting with
``_`` are the transport's own (its bindings).
"""

from __future__ import annotations

import re
import string

from sluice import ConfigurationError

__all__ = ["from_sluice", "to_sluice"]

_KEPT = frozenset(string.ascii_letters + string.digits + "_.-")
_LEADING_KEPT = frozenset(string.ascii_letters + string.digits)
_ESCAPE = re.compile(r"(?:\:[0-9a-f]{2})+")
_LONGEST = 200  # sluice's limit on a queue name


def to_sluice(name: str) -> str:
    """The sluice queue name of kombu's ``name``."""
    out = []
    for i, char in enumerate(name):
        if char in (_KEPT if i else _LEADING_KEPT):
            out.append(char)
        else:
            out.extend(f":{byte:02x}" for byte in char.encode("utf-8", "surrogatepass"))
    stored = "".join(out)
    if not name or len(stored) > _LONGEST:
        raise ConfigurationError(
            f"kombu name {name!r} cannot be a sluice queue: a name must be 1 to "
            f"{_LONGEST} characters once escaped (this one is {len(stored)})"
        )
    return stored


def from_sluice(stored: str) -> str:
    """kombu's name for the sluice queue ``stored``."""
    return _ESCAPE.sub(
        lambda m: bytes.fromhex(m.group(0).replace(":", "")).decode("utf-8", "surrogatepass"),
        stored,
    )
