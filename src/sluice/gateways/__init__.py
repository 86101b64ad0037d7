"""Gateway queues (Demaq): the queues that touch the outside world (docs/gateways.md).

Putting a message into an outgoing gateway queue sends it through the queue's
transport; an incoming gateway queue holds what arrived through its transport; a
message that cannot be delivered becomes an error message in the queue's error queue,
with Demaq's kind of failure (``sluice.errors.DeliveryFailed``).
"""

from sluice.gateways.manager import Gateways
from sluice.gateways.model import DIRECTIONS, Gateway
from sluice.gateways.registry import TRANSPORTS

__all__ = ["DIRECTIONS", "TRANSPORTS", "Gateway", "Gateways"]
