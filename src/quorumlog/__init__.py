"""quorumlog: a storage engine for message brokers.

Public API: `quorumlog.open(path, ...)` -> MessageStore (one replica, see quorumlog/store/);
`quorumlog.open_replica(path, node_id=..., peers=...)` -> Replica (one member of a Raft group,
see node/replica.py); `quorumlog.Client` / `AsyncClient` (client.py) for a running group;
errors in quorumlog.errors; the native commit log in quorumlog.commitlog.
"""
__version__ = "0.1.0"

from . import errors  # noqa: F401
from .errors import *  # noqa: F401,F403  (every error class at the top level too)
from .errors import QuorumlogError  # noqa: F401
from .config import StoreConfig, load_config  # noqa: F401
from .store import BatchResult, Message, MessageStore, PutResult, open  # noqa: F401,A004
from .node.replica import Replica, RoleChange, open_replica  # noqa: F401,E402
from .client import AsyncClient, Client  # noqa: F401,E402
