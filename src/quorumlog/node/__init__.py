"""The replicated node: the asyncio Raft driver (driver.py), its proposal pipeline
(pipeline.py), its settings (config.py), the raft-state file, the group-commit flusher, META
records, idempotent produce, and the embedding API (replica.py: quorumlog.open_replica)."""
from .config import NodeConfig, load_node_config
from .driver import Node

__all__ = ["Node", "NodeConfig", "load_node_config"]
from .replica import Replica, RoleChange, open_replica  # noqa: E402

__all__ += ["Replica", "RoleChange", "open_replica"]
