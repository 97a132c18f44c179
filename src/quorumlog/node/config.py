"""Settings of a replica (node): who it is, whom it talks to, how it authenticates, and the
Raft timings and limits -- merged like the store's settings (quorumlog.config): defaults <
a TOML file < QUORUMLOG_* environment variables < explicit arguments.

The TOML file may hold three tables: `[node]` (the fields of NodeConfig), `[raft]` (the fields
of quorumlog.raft.RaftConfig) and `[store]` (quorumlog.config.StoreConfig). Environment
variables are QUORUMLOG_<FIELD> for node fields (QUORUMLOG_NODE_ID, QUORUMLOG_PEERS
"n1=127.0.0.1:7001,n2=...", QUORUMLOG_SECRET, ...) and QUORUMLOG_RAFT_<FIELD> for Raft ones;
the store reads its own QUORUMLOG_* names. Every problem raises ConfigError naming the setting
and where it came from.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from ..config import ENV_PREFIX, FIELDS as STORE_FIELDS, StoreConfig, load_config, read_toml
from ..errors import ConfigError
from ..net.messages import MAX_GROUPS, MAX_PRODUCER_IN_FLIGHT
from ..raft.core import RaftConfig
from .flusher import MAX_FLUSHES_IN_FLIGHT

__all__ = ["NodeConfig", "load_node_config", "parse_address", "parse_peers", "split_settings"]


@dataclasses.dataclass(frozen=True)
class NodeConfig:
    node_id: str = "n1"
    # every voter of the initial configuration: node id -> "host:port" of its peer listener
    peers: dict = dataclasses.field(default_factory=dict)
    # where this replica serves clients ("host:port"; None: no client listener)
    client_addr: str | None = None
    # node id -> client address of every member (for NOT_LEADER redirects)
    client_addrs: dict = dataclasses.field(default_factory=dict)
    cluster_id: str = "quorumlog"
    secret: str | None = None          # the cluster secret (peers); >= 16 bytes
    secret_file: str | None = None     # or read it from this file (first line)
    client_secret: str | None = None   # what clients prove (None: the cluster secret)
    insecure: bool = False             # allow running without a secret
    tick_ms: int = 10                  # how often the Raft core is ticked
    # limits on what a leader accepts before commit (BackpressureError beyond them)
    max_pending_puts: int = 65536
    max_pending_bytes: int = 256 << 20
    put_timeout_ms: int = 30_000       # a thread-side call gives up after this
    max_frame_bytes: int = (16 << 20) + 24
    handshake_timeout_ms: int = 5000
    max_client_connections: int = 1024  # clients past their HELLO at once; more are refused
    client_idle_evict_ms: int = 5000    # ... unless one has been idle this long (it is closed)
    # a client connection's large frames not received whole: bytes buffered for all of
    # them at once (past it reading stops), and how long one may take (docs/net.md "Limits")
    max_client_buffered_bytes: int = 32 << 20
    client_frame_timeout_ms: int = 10_000
    max_fetch_wait_ms: int = 30_000    # longest long-poll a client may ask for
    coalesce_puts: bool = True         # puts of one loop iteration -> one proposal per queue
    # idempotent producers (node/producers.py): a new leader rebuilds its table from the last
    # producer_window_entries entries of its log; it remembers producer_batches_remembered
    # batches (at least a client's largest window) for each of at most max_producers producers
    producer_window_entries: int = 1 << 16
    producer_batches_remembered: int = MAX_PRODUCER_IN_FLIGHT
    max_producers: int = 1 << 16
    # votes and heartbeats on a connection of their own per peer pair (docs/net.md): a
    # backlogged data connection then cannot delay them into a spurious election
    control_lane: bool = True
    # "host:port" where this replica serves Prometheus /metrics (None: not served)
    metrics_addr: str | None = None
    # Raft groups this process hosts (node/groups.py: placement, layout; node/host.py):
    # 1 is a single-group replica at <dir>; G > 1 keeps <dir>/groups/<g>/ per group
    groups: int = 1
    # G > 1: idle groups stop ticking and heartbeating (raft/quiesce.py, node/host.py)
    quiesce: bool = True
    # flush = "sync", one group: flushes of the log in flight at once (node/flusher.py); 2
    # starts a flush while another runs. 1: it measured no better in a loaded 3-replica
    # group on one disk (docs/benchmarks.md)
    flushes_in_flight: int = 1


NODE_FIELDS = {f.name: f for f in dataclasses.fields(NodeConfig)}
RAFT_FIELDS = {f.name: f for f in dataclasses.fields(RaftConfig)}
_INT_LIMITS = {"tick_ms": (1, 1000), "max_pending_puts": (1, 1 << 24),
               "max_pending_bytes": (1 << 10, 1 << 40), "put_timeout_ms": (1, 3_600_000),
               "max_frame_bytes": (1 << 16, 1 << 30), "handshake_timeout_ms": (1, 600_000),
               "max_client_connections": (1, 1 << 20), "max_fetch_wait_ms": (0, 3_600_000),
               "producer_window_entries": (1, 1 << 24),
               # (fewer than a client's window: a retry within it could be refused as too old)
               "producer_batches_remembered": (MAX_PRODUCER_IN_FLIGHT, 1024),
               "max_producers": (1, 1 << 24),
               "max_client_buffered_bytes": (1 << 16, 1 << 40),
               "client_frame_timeout_ms": (1, 3_600_000),
               "client_idle_evict_ms": (1, 86_400_000),
               "groups": (1, MAX_GROUPS), "flushes_in_flight": (1, MAX_FLUSHES_IN_FLIGHT)}


def parse_address(text, what: str = "address") -> tuple[str, int]:
    """'host:port' -> (host, port); port 0 means 'any free port' (tests)."""
    if not isinstance(text, str) or ":" not in text:
        raise ConfigError(f"{what} must be 'host:port', got {text!r}")
    host, _, port = text.rpartition(":")
    try:
        p = int(port)
    except ValueError:
        raise ConfigError(f"{what} {text!r}: port {port!r} is not a number") from None
    if not 0 <= p <= 65535 or not host:
        raise ConfigError(f"{what} {text!r}: need a host and a port in 0..65535")
    return host.strip("[]"), p


def parse_peers(value, source: str = "argument") -> dict:
    """{"n1": "h:p", ...} or "n1=h:p,n2=h:p" -> dict (addresses validated)."""
    if isinstance(value, str):
        out = {}
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            nid, eq, addr = part.partition("=")
            if not eq:
                raise ConfigError(f"peers (from {source}): {part!r} is not id=host:port")
            out[nid.strip()] = addr.strip()
        value = out
    if not isinstance(value, Mapping):
        raise ConfigError(f"peers (from {source}) must be a table id -> 'host:port'")
    for nid, addr in value.items():
        if not isinstance(nid, str) or not nid:
            raise ConfigError(f"peers (from {source}): bad node id {nid!r}")
        parse_address(addr, f"peers[{nid!r}] (from {source})")
    return dict(value)


def _coerce(fields, name, value, source):
    ftype = fields[name].type
    if name in ("peers", "client_addrs"):
        return parse_peers(value, source)
    if ftype in ("bool",):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false",
                                                        "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ConfigError(f"{name} (from {source}) must be a boolean, got {value!r}")
    if ftype == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""), 0)
            except ValueError:
                pass
        raise ConfigError(f"{name} (from {source}) must be an integer, got {value!r}")
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{name} (from {source}) must be a string, got {value!r}")


def load_node_config(config_file=None, environ: Mapping[str, str] | None = None, *,
                     raft: Mapping[str, Any] | None = None,
                     store: Mapping[str, Any] | None = None,
                     **node) -> tuple[NodeConfig, RaftConfig, StoreConfig]:
    """(NodeConfig, RaftConfig, StoreConfig) from defaults < file < environment < arguments."""
    env = os.environ if environ is None else environ
    tables: dict[str, dict] = {"node": {}, "raft": {}, "store": {}}
    if config_file is not None:
        data = read_toml(config_file)
        for key, val in data.items():
            if key not in tables or not isinstance(val, dict):
                raise ConfigError(f"config file {config_file}: unknown table or setting {key!r} "
                                  "(expected [node], [raft], [store])")
            tables[key] = val
    where = f"file {config_file}"
    values: dict = {}
    for name, val in tables["node"].items():
        if name not in NODE_FIELDS:
            raise ConfigError(f"config file {config_file}: unknown [node] setting {name!r}")
        values[name] = _coerce(NODE_FIELDS, name, val, where)
    for name in NODE_FIELDS:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = _coerce(NODE_FIELDS, name, raw, f"${ENV_PREFIX}{name.upper()}")
    for name, val in node.items():
        if name not in NODE_FIELDS:
            raise ConfigError(f"unknown node setting {name!r}")
        if val is not None:
            values[name] = _coerce(NODE_FIELDS, name, val, "argument")
    rvalues: dict = {}
    for name, val in tables["raft"].items():
        if name not in RAFT_FIELDS:
            raise ConfigError(f"config file {config_file}: unknown [raft] setting {name!r}")
        rvalues[name] = val
    for name in RAFT_FIELDS:
        raw = env.get(ENV_PREFIX + "RAFT_" + name.upper())
        if raw is not None:
            rvalues[name] = raw if name == "preferred_leader_id" else \
                _coerce(RAFT_FIELDS, name, raw, f"${ENV_PREFIX}RAFT_{name.upper()}")
    for name, val in (raft or {}).items():
        if name not in RAFT_FIELDS:
            raise ConfigError(f"unknown raft setting {name!r}")
        rvalues[name] = val
    svalues = dict(tables["store"])
    # a profile from the file ranks below $QUORUMLOG_PROFILE, as any file setting
    file_profile = svalues.pop("profile", None)
    svalues.update(store or {})
    if "profile" not in svalues and file_profile is not None \
            and env.get(ENV_PREFIX + "PROFILE") is None:
        svalues["profile"] = file_profile
    for name in svalues:
        if name not in STORE_FIELDS and name != "profile":
            raise ConfigError(f"unknown store setting {name!r}")
    cfg = NodeConfig(**values)
    rcfg = RaftConfig(**rvalues).validate()
    scfg = load_config(None, env, **svalues)
    _validate(cfg)
    return cfg, rcfg, scfg


def split_settings(settings: Mapping[str, Any]) -> tuple[dict, dict, dict]:
    """Flat keyword settings (as quorumlog.open takes them) -> (node, raft, store) by name:
    NodeConfig, RaftConfig, StoreConfig fields (and the store's `profile`); ConfigError
    naming an unknown one."""
    node, raft, store = {}, {}, {}
    for name, val in settings.items():
        if name in NODE_FIELDS:
            node[name] = val
        elif name in STORE_FIELDS or name == "profile":
            store[name] = val
        elif name in RAFT_FIELDS:
            raft[name] = val
        else:
            raise ConfigError(f"unknown setting {name!r} (not a node, store or raft setting; "
                              "see docs/node.md)")
    return node, raft, store


def _validate(cfg: NodeConfig) -> None:
    from ..net.messages import check_node_id
    check_node_id(cfg.node_id, "node_id", ConfigError)
    if not cfg.peers:
        raise ConfigError("peers: at least this node's own entry (node_id -> 'host:port')")
    if cfg.node_id not in cfg.peers:
        raise ConfigError(f"peers does not name this node ({cfg.node_id!r}): {sorted(cfg.peers)}")
    for nid in cfg.peers:
        check_node_id(nid, "peer id", ConfigError)
    if cfg.client_addr is not None:
        parse_address(cfg.client_addr, "client_addr")
    if cfg.metrics_addr is not None:
        parse_address(cfg.metrics_addr, "metrics_addr")
    for name, (lo, hi) in _INT_LIMITS.items():
        v = getattr(cfg, name)
        if not lo <= v <= hi:
            raise ConfigError(f"{name}={v} outside [{lo}, {hi}]")
    if cfg.secret is not None and cfg.secret_file is not None:
        raise ConfigError("give secret or secret_file, not both")


def read_secret(cfg: NodeConfig) -> str | None:
    """The cluster secret from secret or secret_file (first line, stripped)."""
    if cfg.secret_file is not None:
        try:
            with open(cfg.secret_file, encoding="utf-8") as fh:
                s = fh.readline().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read secret_file {cfg.secret_file}: {exc}") from None
        if not s:
            raise ConfigError(f"secret_file {cfg.secret_file} is empty")
        return s
    return cfg.secret
