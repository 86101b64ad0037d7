"""The names sluice's telemetry uses: OpenTelemetry's messaging semantic conventions, at
the version pinned here (their messaging part is still "Development" status, so a later
version may rename them; tests/contrib/test_otel_names.py checks each against the
conventions package of this version).

``OTEL_SEMCONV_STABILITY_OPT_IN`` is not read: it lets an instrumentation that emitted
messaging conventions v1.24.0 or older move to newer ones, and sluice never emitted
older ones (docs/observability.md).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BATCH_MESSAGE_COUNT",
    "CONSUMED_MESSAGES",
    "DESTINATION_NAME",
    "ERROR_TYPE",
    "MESSAGE_ID",
    "OPERATION_DURATION",
    "OPERATION_NAME",
    "OPERATION_TYPE",
    "PROCESS_DURATION",
    "SCHEMA_URL",
    "SEMCONV_PACKAGE",
    "SEMCONV_VERSION",
    "SENT_MESSAGES",
    "SETTLE_OUTCOME",
    "SUBSCRIPTION_NAME",
    "SYSTEM",
    "SYSTEM_NAME",
]

SEMCONV_VERSION: Final = "1.44.0"
"""The semantic conventions' version these names follow."""
SEMCONV_PACKAGE: Final = "0.66b2"
"""The ``opentelemetry-semantic-conventions`` release that holds that version's names."""
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

SYSTEM_NAME: Final = "sluice"  # the conventions register no value for sluice
SYSTEM: Final = "messaging.system"
DESTINATION_NAME: Final = "messaging.destination.name"
SUBSCRIPTION_NAME: Final = "messaging.destination.subscription.name"
OPERATION_TYPE: Final = "messaging.operation.type"
OPERATION_NAME: Final = "messaging.operation.name"
MESSAGE_ID: Final = "messaging.message.id"
BATCH_MESSAGE_COUNT: Final = "messaging.batch.message_count"
ERROR_TYPE: Final = "error.type"
SETTLE_OUTCOME: Final = "sluice.settle.outcome"
"""sluice's own: what a settle did (ack, reject, release, or commit for both ack and
reject in one transaction); the conventions leave settle outcomes to each system."""

SENT_MESSAGES: Final = "messaging.client.sent.messages"
CONSUMED_MESSAGES: Final = "messaging.client.consumed.messages"
OPERATION_DURATION: Final = "messaging.client.operation.duration"
PROCESS_DURATION: Final = "messaging.process.duration"
