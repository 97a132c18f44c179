"""Many Raft groups per process (Multi-Raft): the rules every member and client computes the
same way, and the directory layout.

* Placement: (topic, queue) -> group = (FNV-1a 64 of the topic's UTF-8 + queue) mod G.
  Consecutive queues of one topic land on consecutive groups, so a topic with at least G
  queues uses every group, and a client that spreads its batches over the queues spreads
  them over every group's leader. G = 1: everything is group 0.
* Preferred leaders (DLedger's preferredLeaderIds): group g prefers the member at g mod N
  of the voters sorted by id, so the groups' leaders spread evenly over the members.
* Layout: G = 1 is today's single-group directory (the store at <dir> itself: a directory
  written before groups existed opens as group 0). G > 1: <dir>/groups/<g>/ per group and
  <dir>/groups.json = {"groups": G}; opening with another G is refused (placement would
  move queues to other groups and their data out of sight).
"""
from __future__ import annotations

import json
import os

from ..commitlog import fnv1a64
from ..errors import ConfigError
from ..net.messages import MAX_GROUPS

__all__ = ["MAX_GROUPS", "group_of", "preferred_leader", "group_dir", "check_layout",
           "LAYOUT_FILE", "check_groups", "groups_in", "check_open_groups"]

LAYOUT_FILE = "groups.json"
_TOPIC_HASHES_REMEMBERED = 4096
_topic_hashes: dict = {}


def check_groups(groups, what: str = "groups") -> int:
    if type(groups) is not int or not 1 <= groups <= MAX_GROUPS:
        raise ConfigError(f"{what}={groups!r}: a process hosts 1..{MAX_GROUPS} Raft groups "
                          "(MAX_GROUPS)")
    return groups


def check_open_groups(open_groups, groups: int) -> tuple:
    """The groups a process opens, ascending: all of 0..groups-1 for None, else a non-empty
    collection of distinct ints in that range (ConfigError naming what is wrong)."""
    if open_groups is None:
        return tuple(range(groups))
    if isinstance(open_groups, (str, bytes)) or not hasattr(open_groups, "__iter__"):
        raise ConfigError(f"open_groups={open_groups!r}: a list of group ids in "
                          f"0..{groups - 1}")
    got = list(open_groups)
    bad = [g for g in got if type(g) is not int or not 0 <= g < groups]
    if bad:
        raise ConfigError(f"open_groups: {bad!r} not in 0..{groups - 1} (groups={groups})")
    if not got or len(set(got)) != len(got):
        raise ConfigError(f"open_groups={got!r}: at least one group, each once")
    return tuple(sorted(got))


def group_of(topic: str, queue_id: int, groups: int) -> int:
    """The group that holds (topic, queue_id): (fnv1a64(topic) + queue_id) mod groups."""
    if groups == 1:
        return 0
    h = _topic_hashes.get(topic)
    if h is None:
        if len(_topic_hashes) >= _TOPIC_HASHES_REMEMBERED:
            _topic_hashes.clear()
        h = _topic_hashes[topic] = fnv1a64(topic.encode("utf-8"))
    return (h + queue_id) % groups


def preferred_leader(group: int, voters) -> str:
    """The member group `group` prefers as its leader: sorted(voters)[group mod N]."""
    v = sorted(voters)
    return v[group % len(v)]


def group_dir(path, group: int, groups: int) -> str:
    """The store directory of `group` in a process hosting `groups` groups."""
    path = os.fspath(path)
    if groups == 1:
        return path
    return os.path.join(path, "groups", str(group))


def groups_in(path) -> int | None:
    """How many groups the directory's groups.json records; None for a single-group
    directory (no groups.json). ConfigError when the file is unreadable."""
    layout = os.path.join(os.fspath(path), LAYOUT_FILE)
    if not os.path.exists(layout):
        return None
    try:
        with open(layout) as fh:
            return check_groups(json.load(fh)["groups"], layout)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{layout}: unreadable group layout: {e}") from None


def check_layout(path, groups: int) -> None:
    """Refuse a directory laid out for another number of groups (ConfigError naming both);
    record the count in a new multi-group directory."""
    path = os.fspath(path)
    layout = os.path.join(path, LAYOUT_FILE)
    single = os.path.exists(os.path.join(path, "commitlog"))
    have = groups_in(path)
    if have is not None:
        if have != groups:
            raise ConfigError(f"{path} holds {have} Raft groups, opened with groups={groups}: "
                              "the placement of queues depends on the count (open it with "
                              f"groups={have})")
        return
    if groups == 1:
        return
    if single:
        raise ConfigError(f"{path} holds a single-group store (its log is {path}/commitlog), "
                          f"opened with groups={groups}: open it with groups=1")
    os.makedirs(path, exist_ok=True)
    tmp = layout + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"groups": groups}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, layout)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
