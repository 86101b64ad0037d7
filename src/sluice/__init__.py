"""sluice: a persistent, transactional, content-aware message and job queue.

import sluice
db = sluice.connect("sqlite:///sluice.db")
q = db.create_queue("orders", exist_ok=True)
q.put({"customer": "Smith"})
m = q.get(wait=1.0)
m.ack()
"""

from sluice.catalog import QueueSpec
from sluice.clock import Clock, FastClock, ManualClock, SystemClock
from sluice.connect import connect
from sluice.database import Database
from sluice.engine.enqueue import EnqueueOptions
from sluice.engine.observe import Destination, Observer, set_default_observer
from sluice.engine.queue import Queue
from sluice.engine.transaction import Transaction
from sluice.errors import (
    ConfigurationError,
    Conflict,
    ConnectionLost,
    DeliveryFailed,
    DropboxError,
    ExpressionError,
    GatewayError,
    IncompleteBlock,
    InvalidBody,
    JobError,
    JobNotFound,
    KeyNotFound,
    LeaseLost,
    MessageError,
    MessageStateError,
    MissingDependency,
    NotASluiceDatabase,
    PayloadTooLarge,
    QueueError,
    QueueExists,
    QueueInUse,
    QueueNotFound,
    RuleDefinitionError,
    SchemaTooNew,
    SchemaTooOld,
    SluiceError,
    StorageError,
    TaskTimeout,
    TransactionClosed,
    TransactionError,
    TypeDefinitionError,
    TypeViolation,
    UnknownTaskType,
)
from sluice.jobs.submit import TaskSpec
from sluice.message import Message, MessageState, Position

__version__ = "0.1.0"

__all__ = [
    "Clock",
    "ConfigurationError",
    "Conflict",
    "ConnectionLost",
    "Database",
    "DeliveryFailed",
    "Destination",
    "DropboxError",
    "EnqueueOptions",
    "ExpressionError",
    "FastClock",
    "GatewayError",
    "IncompleteBlock",
    "InvalidBody",
    "JobError",
    "JobNotFound",
    "KeyNotFound",
    "LeaseLost",
    "ManualClock",
    "Message",
    "MessageError",
    "MessageState",
    "MessageStateError",
    "MissingDependency",
    "NotASluiceDatabase",
    "Observer",
    "PayloadTooLarge",
    "Position",
    "Queue",
    "QueueError",
    "QueueExists",
    "QueueInUse",
    "QueueNotFound",
    "QueueSpec",
    "RuleDefinitionError",
    "SchemaTooNew",
    "SchemaTooOld",
    "SluiceError",
    "StorageError",
    "SystemClock",
    "TaskSpec",
    "TaskTimeout",
    "Transaction",
    "TransactionClosed",
    "TransactionError",
    "TypeDefinitionError",
    "TypeViolation",
    "UnknownTaskType",
    "__version__",
    "connect",
    "set_default_observer",
]
