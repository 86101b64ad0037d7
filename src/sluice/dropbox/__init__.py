"""Dropbox directories in the manner of DropboxMQ: any program that can write a file and
rename it produces into sluice, and any that can rename a file consumes from it
(docs/dropbox.md).

    from sluice.dropbox import Dropbox
    box = Dropbox(db, "/srv/dropbox", consumer_id="host-a")
    box.ingest("orders")      # files of orders/incoming/target -> queue "orders"
    box.emit("invoices")      # queue "invoices" -> invoices/incoming/target
"""

from sluice.dropbox.dropbox import DEFAULT_POLL, Dropbox
from sluice.dropbox.layout import STATES, TOPIC_ROOT, Box, Layout
from sluice.dropbox.names import MessageName, encode_value, parse_name
from sluice.dropbox.outbound import file_of
from sluice.dropbox.stats import DropboxStats

__all__ = [
    "DEFAULT_POLL",
    "STATES",
    "TOPIC_ROOT",
    "Box",
    "Dropbox",
    "DropboxStats",
    "Layout",
    "MessageName",
    "encode_value",
    "file_of",
    "parse_name",
]
