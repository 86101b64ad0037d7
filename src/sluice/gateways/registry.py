"""The transports a gateway queue may use, by name; each module is loaded when a
gateway first uses it (their libraries are extras)."""

from __future__ import annotations

from collections.abc import Callable

from sluice.errors import ConfigurationError
from sluice.gateways.model import Gateway
from sluice.gateways.transports import Transport

__all__ = ["TRANSPORTS", "transport"]


def _http() -> Transport:
    from sluice.gateways import http  # noqa: PLC0415  (loaded when used)

    return http.TRANSPORT


def _dropbox() -> Transport:
    from sluice.gateways import dropbox  # noqa: PLC0415  (loaded when used)

    return dropbox.TRANSPORT


def _smtp() -> Transport:
    from sluice.gateways import smtp  # noqa: PLC0415  (loaded when used)

    return smtp.TRANSPORT


TRANSPORTS: dict[str, Callable[[], Transport]] = {
    "dropbox": _dropbox,
    "http": _http,
    "smtp": _smtp,
}
"""The transports by name; each is loaded when a gateway first uses it."""


def transport(gateway: Gateway) -> Transport:
    """The transport of ``gateway``, its settings checked; ConfigurationError if there is
    no such transport, it does not serve that direction, or a setting is wrong."""
    load = TRANSPORTS.get(gateway.transport)
    if load is None:
        raise ConfigurationError(
            f"gateway {gateway.queue!r}: no transport {gateway.transport!r}; sluice has "
            f"{', '.join(sorted(TRANSPORTS))}"
        )
    found = load()
    if gateway.direction not in found.directions:
        raise ConfigurationError(
            f"gateway {gateway.queue!r}: the {found.name} transport does not serve "
            f"direction {gateway.direction!r} here (only {', '.join(found.directions)})"
        )
    found.check(gateway)
    return found
