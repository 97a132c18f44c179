"""Catch-up past retention on real processes over TCP: a follower stopped while the leader's
retention deleted what it would need, and a brand-new empty member added with add_member,
are installed from the leader's retained segment files (InstallSegment) and replicate on; the
replicas' segment files end byte-identical and every acknowledged message still retained is
readable on the installed member."""
from __future__ import annotations

import os

import pytest
from cluster_support import checkpoint, wait_until

from quorumlog.client import Client
from quorumlog.localcluster import free_port

SEGMENT = 1 << 16            # small segments and an (almost) zero retention time: fast
TOPIC = "install"
QUEUES = 2
# retention every 100 ms, at any hour, of segments whose records are older than 0.36 s (so a
# member's own retention keeps deleting too: reads check what is retained); the disk-use gates
# off (this machine's disk may be fuller than the defaults allow)
RETENTION_ENV = {
    "QUORUMLOG_DELETE_WHEN": ";".join(f"{h:02d}" for h in range(24)),
    "QUORUMLOG_FILE_RESERVED_HOURS": "0.0001",
    "QUORUMLOG_RETENTION_INTERVAL_MS": "100",
    "QUORUMLOG_DISK_CLEAN_RATIO": "1.0",
    "QUORUMLOG_DISK_FORCE_CLEAN_RATIO": "1.0",
    "QUORUMLOG_DISK_REJECT_RATIO": "1.0",
    "QUORUMLOG_MAX_MESSAGE_BYTES": "16384",
}


def _segments(c, nid) -> list[int]:
    d = os.path.join(c.data_dir(nid), "commitlog")
    return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def _produce(cl, acked: dict, rounds: int, tag: str) -> None:
    for k in range(rounds):
        bodies = [f"{tag}-{k}-{i}-".encode() + bytes(600) for i in range(8)]
        r = cl.produce(TOPIC, bodies, queue_id=k % QUEUES)
        for i, b in enumerate(bodies):
            acked[(r.queue_id, r.first_queue_offset + i)] = b


def _write_until_retained_past(c, cl, acked, nid_end: int, leader: str) -> None:
    """Produce until the leader's oldest segment starts past `nid_end` (a position)."""
    k = 0
    while not (_segments(c, leader) and _segments(c, leader)[0] > nid_end):
        _produce(cl, acked, 5, f"past{k}")
        k += 1
        assert k < 2000, f"{leader}'s retention never passed position {nid_end}"


def _log_end(c, nid) -> int:
    """End of a stopped replica's log: its last segment's start + the segment size."""
    return _segments(c, nid)[-1] + SEGMENT


def _installed(c, nid) -> bool:
    return os.path.exists(os.path.join(c.data_dir(nid), "log_head.json"))


def _caught_up(c, admin, nid) -> bool:
    st = c.statuses(admin)
    leaders = [s for s in st.values() if not isinstance(s, Exception) and s.role == 2]
    f = st.get(nid)
    if len(leaders) != 1 or f is None or isinstance(f, Exception):
        return False
    return f.last_index >= leaders[0].commit_index and f.commit_index >= leaders[0].commit_index


def _assert_segments_identical(c, nodes) -> tuple[int, int]:
    """Every replica's bytes equal from the newest first segment among them to the smallest
    committed position (checkpoints of stopped replicas) -> that range."""
    lo = max(_segments(c, n)[0] for n in nodes)
    hi = min(checkpoint(c, n).committed_position for n in nodes)
    assert hi > lo, (lo, hi)

    def read(nid):
        out = bytearray()
        for s in range(lo, hi, SEGMENT):
            with open(os.path.join(c.data_dir(nid), "commitlog", f"{s:020d}"), "rb") as fh:
                out += fh.read(min(SEGMENT, hi - s))
        return bytes(out)
    ref = read(nodes[0])
    assert len(ref) == hi - lo
    for n in nodes[1:]:
        other = read(n)
        if other != ref:
            i = next(k for k in range(len(ref)) if other[k] != ref[k])
            raise AssertionError(f"{n}'s log differs from {nodes[0]}'s at position {lo + i}")
    return lo, hi


def _assert_acked_readable(c, nid, acked: dict) -> int:
    """Every acked message at or past nid's first retained offset of its queue reads back
    the same from nid -> how many were checked."""
    checked = 0
    with Client([c.clients[nid]], secret=c.secret(), retry_timeout=20) as m:
        for q in range(QUEUES):
            lo, hi = m.offsets(TOPIC, q)[:2]
            mine = {off: b for (qq, off), b in acked.items() if qq == q and off >= lo}
            assert mine and max(mine) < hi, (q, lo, hi)   # (so never an empty check)
            off = min(mine)
            got = {}
            while off < hi:
                r = m.fetch(TOPIC, q, off, max_messages=4096, max_bytes=8 << 20)
                assert r.messages, f"{nid}: {TOPIC}/{q} ends at {off}, expected {hi}"
                for i, x in enumerate(r.messages):
                    got[off + i] = bytes(x.body)
                off = r.next_offset
            for o, b in mine.items():
                assert got[o] == b, f"{nid}: {TOPIC}/{q}@{o} differs from what was acked"
            checked += len(mine)
    return checked


def _replicate_on_and_check(c, cl, nid, acked) -> None:
    """After nid's install: normal replication resumes, what is retained reads back, and
    after a clean stop every replica's segment files are byte-identical."""
    _produce(cl, acked, 20, "after")
    wait_until(lambda: _caught_up(c, cl, nid), 60, f"{nid} caught up again")
    checked = _assert_acked_readable(c, nid, acked)
    print(f"{checked} acknowledged messages still retained, read back from {nid}")
    with open(c.log_file(nid), encoding="utf-8", errors="replace") as fh:
        assert "log replaced by the leader's" in fh.read()
    assert c.stop() == {n: 0 for n in c.ids}
    _assert_segments_identical(c, c.ids)


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_follower_stopped_past_the_leaders_retention_catches_up_by_install(make_cluster, flush):
    # (sync: the follower's flush thread follows the log the install opened)
    c = make_cluster(3, flush=flush, segment_size_bytes=SEGMENT, env=RETENTION_ENV)
    acked: dict = {}
    with c.client(request_timeout=3, retry_timeout=20) as cl:
        leader = c.wait_leader(client=cl)
        _produce(cl, acked, 20, "before")
        lagger = next(n for n in c.ids if n != leader)
        wait_until(lambda: _caught_up(c, cl, lagger), 30, f"{lagger} caught up before the stop")
        assert c.stop_node(lagger) == 0
        end = _log_end(c, lagger)
        _write_until_retained_past(c, cl, acked, end, leader)
        c.restart(lagger)
        wait_until(lambda: _installed(c, lagger), 60, f"{lagger} installed")
        wait_until(lambda: _caught_up(c, cl, lagger), 60, f"{lagger} caught up after install")
        assert _segments(c, lagger)[0] > end - SEGMENT
        _replicate_on_and_check(c, cl, lagger, acked)


def test_new_empty_member_added_with_add_member_joins_by_install(make_cluster):
    c = make_cluster(3, flush="async", segment_size_bytes=SEGMENT, env=RETENTION_ENV)
    acked: dict = {}
    with c.client(request_timeout=3, retry_timeout=20) as cl:
        leader = c.wait_leader(client=cl)
        _produce(cl, acked, 10, "before")
        _write_until_retained_past(c, cl, acked, SEGMENT, leader)
        # a brand-new member: started empty with the full peer table, then added
        new = "n4"
        c.ids.append(new)                      # (kill_all in the fixture's finally kills it)
        c.peers[new] = f"127.0.0.1:{free_port()}"
        c.clients[new] = f"127.0.0.1:{free_port()}"
        c.start_node(new)
        c.wait_started(nodes=[new], timeout=60)
        from test_cluster_admin import _try
        wait_until(lambda: _try(cl.add_member, new, c.peers[new]), 30, "add_member accepted")
        wait_until(lambda: new in cl.members(), 60, f"{new} a voter")
        wait_until(lambda: _installed(c, new), 60, f"{new} installed")
        assert _segments(c, new)[0] > 0
        _replicate_on_and_check(c, cl, new, acked)
