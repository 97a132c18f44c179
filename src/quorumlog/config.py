"""Settings of a MessageStore: defaults, a TOML file, QUORUMLOG_* environment variables and
explicit arguments, merged in that order (explicit arguments win), validated into StoreConfig.

    cfg = load_config(config_file="broker.toml", flush="sync")

The TOML file holds the same names as `quorumlog.open()`'s keyword arguments, at the top level
or under a `[store]` table. Environment variables are the upper-cased names with the prefix
QUORUMLOG_ (e.g. QUORUMLOG_FLUSH=sync, QUORUMLOG_SEGMENT_SIZE_BYTES=67108864); other QUORUMLOG_*
variables (QUORUMLOG_DEBUG, ...) belong to other parts of the project and are ignored. Every
problem raises ConfigError naming the setting and where it came from.

Profiles: `profile = "small"` (argument, QUORUMLOG_PROFILE or the TOML file) replaces the
defaults with PROFILES["small"], sized for an embedded store that holds little: the default
profile preallocates a 1 GiB segment and a 24 MiB raft-index file before the first message
(plus 6 MiB per consume queue once used); "small" preallocates 4 MiB + 1.5 MiB (+ 80 KiB per
queue). Explicit settings still win over the profile.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from typing import Any, Mapping

from .errors import ConfigError

ENV_PREFIX = "QUORUMLOG_"

# RocketMQ's messageDelayLevel default (MessageStoreConfig).
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    # commit log (passed through to CommitLog)
    segment_size_bytes: int = 1 << 30
    index_file_entries: int = 1 << 20
    flush: str = "async"
    flush_interval_ms: int = 200
    checkpoint_interval_ms: int = 1000
    max_message_bytes: int = 4 << 20
    # segment files retention frees that are kept (each holds segment_size_bytes of disk)
    # and reused as new segments: their blocks are allocated and their pages likely cached
    recycle_segments: int = 2
    # topics and queues (RocketMQ: autoCreateTopicEnable, defaultTopicQueueNums = 4 for
    # auto-created topics, 8 for created ones)
    auto_create_topics: bool = True
    default_topic_queues: int = 4
    max_queues_per_topic: int = 1024
    consume_queue_file_entries: int = 300_000
    # limits at the API boundary
    max_batch_messages: int = 65536
    max_batch_bytes: int = 64 << 20
    max_get_messages: int = 65536
    max_get_wait_ms: int = 30_000       # longest long-poll get(wait_ms=...)
    max_get_waiters: int = 1024         # concurrent long-poll get() calls
    max_consumer_offsets: int = 1_000_000   # (group, topic, queue) entries stored
    max_install_bytes: int = 1 << 40    # largest leader's log a replica installs (catch-up)
    # message-key index (find_by_key): buckets and entries per file, hits per lookup
    key_index: bool = True
    key_index_slots: int = 1 << 16
    key_index_file_entries: int = 1 << 18
    max_key_hits: int = 64
    # retention (seed 004: fileReservedTime 72 h, deleteWhen "04", disk ratios 75/85/90 %)
    file_reserved_hours: float = 72.0
    delete_when: str = "04"
    disk_clean_ratio: float = 0.75
    disk_force_clean_ratio: float = 0.85
    disk_reject_ratio: float = 0.90
    max_segment_deletes_per_run: int = 10
    disk_check_interval_ms: int = 1000
    disk_check_bytes: int = 64 << 20        # also re-measure after this many bytes appended
    retention_interval_ms: int = 10_000
    # delay levels
    delay_levels: str = DEFAULT_DELAY_LEVELS
    schedule_interval_ms: int = 100
    # background timer thread (flush of consume queues, retention, delay delivery)
    background: bool = True
    dispatch_checkpoint_interval_ms: int = 1000


FIELDS = {f.name: f for f in dataclasses.fields(StoreConfig)}

# Named sets of defaults (see the module docstring); a profile is chosen like any setting.
PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "small": dict(segment_size_bytes=4 << 20, index_file_entries=1 << 16,
                  consume_queue_file_entries=4096, max_message_bytes=1 << 20,
                  default_topic_queues=4, key_index_slots=4096,
                  key_index_file_entries=16384),
}

_INT_LIMITS = {
    "segment_size_bytes": (65536, 1 << 40),
    "index_file_entries": (1024, 1 << 30),
    "flush_interval_ms": (1, 3_600_000),
    "checkpoint_interval_ms": (1, 3_600_000),
    "max_message_bytes": (1, 1 << 30),
    "recycle_segments": (0, 64),
    "default_topic_queues": (1, 65536),
    "max_queues_per_topic": (1, 65536),
    "consume_queue_file_entries": (16, 1 << 26),
    "max_batch_messages": (1, 1 << 24),
    "max_batch_bytes": (1, 1 << 34),
    "max_get_messages": (1, 1 << 24),
    "max_get_wait_ms": (0, 3_600_000),
    "max_get_waiters": (1, 1 << 20),
    "max_consumer_offsets": (1, 1 << 26),
    "max_install_bytes": (1, 1 << 50),
    "key_index_slots": (16, 1 << 26),
    "key_index_file_entries": (16, 1 << 28),
    "max_key_hits": (1, 4096),
    "max_segment_deletes_per_run": (1, 1 << 20),
    "disk_check_interval_ms": (0, 3_600_000),
    "disk_check_bytes": (0, 1 << 40),
    "retention_interval_ms": (1, 86_400_000),
    "schedule_interval_ms": (1, 3_600_000),
    "dispatch_checkpoint_interval_ms": (0, 3_600_000),
}

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """'1s 5s 1m 2h' -> (1000, 5000, 60000, 7200000); 1..64 levels, each > 0."""
    if not isinstance(text, str):
        raise ConfigError(f"delay_levels must be a string like '1s 5s 1m', got {text!r}")
    out = []
    for tok in text.split():
        for unit in ("ms", "s", "m", "h", "d"):
            if tok.endswith(unit):
                num = tok[: -len(unit)]
                break
        else:
            raise ConfigError(f"delay_levels: {tok!r} has no unit (ms, s, m, h, d)")
        try:
            value = int(num)
        except ValueError:
            raise ConfigError(f"delay_levels: {tok!r} is not a number with a unit") from None
        if value <= 0:
            raise ConfigError(f"delay_levels: {tok!r} must be positive")
        out.append(value * _UNITS_MS[unit])
    if not 1 <= len(out) <= 64:
        raise ConfigError(f"delay_levels: need 1..64 levels, got {len(out)}")
    return tuple(out)


def parse_delete_when(text) -> tuple[int, ...]:
    """RocketMQ's deleteWhen: '04' or '04;16' -> hours of the (local) day."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise ConfigError(f"delete_when must be hours like '04' or '04;16', got {text!r}")
    hours = []
    for part in text.split(";"):
        part = part.strip()
        if not part.isdigit() or not 0 <= int(part) <= 23:
            raise ConfigError(f"delete_when: {part!r} is not an hour 00..23")
        hours.append(int(part))
    return tuple(hours)


def _coerce(name: str, value: Any, source: str):
    """Converts a value from a file or the environment (strings) to the field's type."""
    ftype = FIELDS[name].type
    if ftype == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name} (from {source}) must be a boolean, got {value!r}")
    if ftype == "int":
        if isinstance(value, bool):
            raise ConfigError(f"{name} (from {source}) must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""), 0)
            except ValueError:
                pass
        raise ConfigError(f"{name} (from {source}) must be an integer, got {value!r}")
    if ftype == "float":
        if isinstance(value, bool):
            raise ConfigError(f"{name} (from {source}) must be a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{name} (from {source}) must be a number, got {value!r}")
    # str
    if isinstance(value, int) and not isinstance(value, bool) and name == "delete_when":
        return "%02d" % value
    if not isinstance(value, str):
        raise ConfigError(f"{name} (from {source}) must be a string, got {value!r}")
    return value


def _validate(cfg: StoreConfig, sources: Mapping[str, str]) -> None:
    def where(name):
        return sources.get(name, "default")

    for name, (lo, hi) in _INT_LIMITS.items():
        v = getattr(cfg, name)
        if not lo <= v <= hi:
            raise ConfigError(f"{name}={v} (from {where(name)}) outside [{lo}, {hi}]")
    if cfg.segment_size_bytes % 4096:
        raise ConfigError(f"segment_size_bytes={cfg.segment_size_bytes} "
                          f"(from {where('segment_size_bytes')}) is not a multiple of 4096")
    if cfg.flush not in ("async", "sync"):
        raise ConfigError(f"flush={cfg.flush!r} (from {where('flush')}) must be 'async' or 'sync'")
    if cfg.max_message_bytes > cfg.segment_size_bytes - 8192:
        raise ConfigError(f"max_message_bytes={cfg.max_message_bytes} does not fit in a segment "
                          f"of {cfg.segment_size_bytes} bytes")
    if cfg.default_topic_queues > cfg.max_queues_per_topic:
        raise ConfigError("default_topic_queues exceeds max_queues_per_topic")
    if not cfg.file_reserved_hours > 0:
        raise ConfigError(f"file_reserved_hours={cfg.file_reserved_hours} must be > 0")
    ratios = (cfg.disk_clean_ratio, cfg.disk_force_clean_ratio, cfg.disk_reject_ratio)
    if not all(0.0 < r <= 1.0 for r in ratios) or not ratios[0] <= ratios[1] <= ratios[2]:
        raise ConfigError("disk ratios must satisfy 0 < disk_clean_ratio <= "
                          f"disk_force_clean_ratio <= disk_reject_ratio <= 1, got {ratios}")
    parse_delay_levels(cfg.delay_levels)
    parse_delete_when(cfg.delete_when)


def read_toml(config_file) -> dict:
    """The TOML file's contents (the one loader of store and node settings files);
    ConfigError when it cannot be read or parsed."""
    try:
        with open(config_file, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {config_file}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from None


def load_config(config_file: str | os.PathLike | None = None,
                environ: Mapping[str, str] | None = None, *,
                defaults: Mapping[str, Any] | None = None, **overrides) -> StoreConfig:
    """Defaults < `defaults` (e.g. what an existing store recorded) < the profile's settings
    < TOML file < QUORUMLOG_* environment < explicit keyword arguments."""
    values: dict[str, Any] = dict(defaults or {})
    sources: dict[str, str] = {k: "the store's checkpoint" for k in values}
    env = os.environ if environ is None else environ
    profile = overrides.pop("profile", None)
    file_table: dict = {}
    if config_file is not None:
        data = read_toml(config_file)
        if isinstance(data.get("store"), dict):
            table = data["store"]
            extra = set(data) - {"store"}
        else:
            table, extra = data, set()
        for key in sorted(set(table) | extra):
            if key == "profile" and key not in extra:
                profile = profile or env.get(ENV_PREFIX + "PROFILE") or table[key]
                continue
            if key not in FIELDS or key in extra:
                raise ConfigError(f"config file {config_file}: unknown setting {key!r}")
            file_table[key] = _coerce(key, table[key], f"file {config_file}")
    profile = profile or env.get(ENV_PREFIX + "PROFILE") or "default"
    if profile not in PROFILES:
        raise ConfigError(f"profile {profile!r} is not one of {sorted(PROFILES)}")
    for key, v in PROFILES[profile].items():
        if key not in values:          # a stored geometry beats the profile's default
            values[key] = v
            sources[key] = f"profile {profile}"
    for key, v in file_table.items():
        values[key] = v
        sources[key] = f"file {config_file}"
    for name in FIELDS:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = _coerce(name, raw, f"${ENV_PREFIX}{name.upper()}")
            sources[name] = f"${ENV_PREFIX}{name.upper()}"
    for name, value in overrides.items():
        if name not in FIELDS:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, value, "argument")
        sources[name] = "argument"
    if (sources.get("max_message_bytes", "default").startswith(("default", "profile"))
            and "segment_size_bytes" in values):
        # The default (or the profile's) shrinks to fit small segments (tests); an explicit
        # value is checked.
        seg = values["segment_size_bytes"]
        if isinstance(seg, int) and seg > 8192:
            values["max_message_bytes"] = min(
                values.get("max_message_bytes", StoreConfig.max_message_bytes), seg - 8192)
    cfg = StoreConfig(**values)
    _validate(cfg, sources)
    return cfg
