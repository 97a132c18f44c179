"""quorumlog: a storage engine for message brokers.

Public API: `quorumlog.open(path, ...)` -> MessageStore (see store.py); errors in
quorumlog.errors; the native commit log in quorumlog.commitlog.
"""
__version__ = "0.1.0"

from . import errors  # noqa: F401
