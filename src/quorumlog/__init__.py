"""quorumlog: a storage engine for message brokers.

Public API: `quorumlog.open(path, ...)` -> MessageStore (see store.py); errors in
quorumlog.errors; the native commit log in quorumlog.commitlog.
"""
__version__ = "0.1.0"

from . import errors  # noqa: F401
from .errors import *  # noqa: F401,F403  (every error class at the top level too)
from .errors import QuorumlogError  # noqa: F401
from .config import StoreConfig, load_config  # noqa: F401
from .store import BatchResult, Message, MessageStore, PutResult, open  # noqa: F401,A004
from .node.replica import Replica, RoleChange, open_replica  # noqa: F401,E402
