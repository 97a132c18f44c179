"""`quorumlog info` / `verify` as operators use them: read-only (nothing created or changed,
no lock taken, a live store inspected), a path that is not a store refused with exit 2,
distinct exit codes (0 ok, 1 damage, 2 usage / not a store / cannot read) and no traceback,
what `info` shows (topics, offsets, segments, disk, a replica's term, --json), and `verify`
checking every file the store owns (consume queues, topics.json, offsets files, raft-state)."""
import builtins
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import quorumlog
from quorumlog import cli
from quorumlog.commitlog import crc32c

SMALL = dict(segment_size_bytes=1 << 16, consume_queue_file_entries=64, background=False,
             environ={})


def _store(path, n=200):
    s = quorumlog.open(path, **SMALL)
    s.create_topic("orders", queues=4)
    s.put_batch("orders", [b"order-%d" % i for i in range(n)], tags="paid")
    s.put("audit", b"a", queue_id=1)
    return s


def _run(args, capsys):
    rc = cli.main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_a_mistyped_path_is_not_a_store_and_nothing_is_created(tmp_path, capsys):
    for cmd in ("info", "verify"):
        missing = tmp_path / "typo"
        rc, out, err = _run([cmd, str(missing)], capsys)
        assert rc == 2 and "not a quorumlog store" in err and str(missing) in err
        assert not missing.exists()
        empty = tmp_path / "empty"
        empty.mkdir(exist_ok=True)
        rc, out, err = _run([cmd, str(empty)], capsys)
        assert rc == 2 and "not a quorumlog store" in err
        assert os.listdir(empty) == []
        f = tmp_path / "file"
        f.write_bytes(b"x")
        rc, out, err = _run([cmd, str(f)], capsys)
        assert rc == 2 and "not a directory" in err


def test_info_and_verify_change_nothing_and_inspect_a_live_store(tmp_path, capsys, dir_tree):
    path = str(tmp_path / "s")
    s = _store(path)
    s.flush()
    before = dir_tree(path, mtimes=False)     # the owner's threads may touch mtimes
    rc, out, err = _run(["info", path], capsys)          # LOCK held by the open store
    assert rc == 0, err
    assert "open_by_a_process: True" in out
    assert "orders: 4 queues, 200 messages; q0 0..50 q1 0..50 q2 0..50 q3 0..50" in out
    rc, out, err = _run(["verify", path], capsys)
    assert rc == 0, err
    assert out.startswith("ok: records 1..201 verified")
    assert dir_tree(path, mtimes=False) == before    # not a byte
    s.put("orders", b"more", queue_id=0)               # the owner still writes
    s.close()
    rc, out, err = _run(["info", path], capsys)
    assert "open_by_a_process: False" in out and "q0 0..51" in out


def test_inspection_writes_nothing_on_read_only_media(tmp_path, capsys, monkeypatch):
    """Every attempt to open a file for writing, create a directory or take a lock fails as
    on a read-only file system; info and verify still work."""
    path = str(tmp_path / "s")
    _store(path).close()
    real_open, real_os_open = builtins.open, os.open

    def ro_open(file, mode="r", *a, **kw):
        if any(c in mode for c in "wax+"):
            raise OSError(30, "Read-only file system", file)
        return real_open(file, mode, *a, **kw)

    def ro_os_open(file, flags, *a, **kw):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
            raise OSError(30, "Read-only file system", file)
        return real_os_open(file, flags, *a, **kw)

    def ro_mkdir(*a, **kw):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(builtins, "open", ro_open)
    monkeypatch.setattr(os, "open", ro_os_open)
    monkeypatch.setattr(os, "mkdir", ro_mkdir)
    rc, out, err = _run(["info", path], capsys)
    assert rc == 0, err
    assert "last_index: 201" in out
    rc, out, err = _run(["verify", path], capsys)
    assert rc == 0, err


def test_unreadable_file_is_exit_2_without_a_traceback(tmp_path):
    path = tmp_path / "s"
    _store(str(path)).close()
    cq = path / "consumequeue" / "orders" / "0"
    victim = sorted(cq.iterdir())[0]
    victim.unlink()
    victim.mkdir()           # a read of it fails with IsADirectoryError (root ignores chmod)
    for cmd in ("info", "verify"):
        proc = subprocess.run([sys.executable, "-m", "quorumlog", cmd, str(path)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert "cannot read" in proc.stderr and str(victim) in proc.stderr


def test_info_json_shows_what_an_operator_looks_for(tmp_path, capsys):
    path = str(tmp_path / "s")
    _store(path, n=40).close()
    # a replica's raft-state (the node's file: magic, version, term, vote, CRC32C)
    vote = b"n2"
    body = struct.pack("<4sHHQH", b"QLRS", 1, 0, 7, len(vote)) + vote
    with open(os.path.join(path, "raft-state"), "wb") as fh:
        fh.write(body + struct.pack("<I", crc32c(body)))
    rc, out, err = _run(["info", "--json", path], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["log"]["last_index"] == 41 and d["log"]["first_index"] == 1
    assert d["log"]["segments"] == 1 and d["log"]["segment_size_bytes"] == 1 << 16
    assert d["checkpoint"]["clean_close"] is True
    assert d["checkpoint"]["committed_index"] == 41
    assert d["topics"]["orders"]["messages"] == 40
    assert d["topics"]["orders"]["queue_offsets"]["2"] == {"min_offset": 0, "max_offset": 10,
                                                          "files": 1}
    assert d["topics"]["audit"]["queue_offsets"]["1"]["max_offset"] == 1
    assert d["replica"] == {"term": 7, "voted_for": "n2"}
    assert d["disk"]["by_entry"]["commitlog"] >= 1 << 16
    assert d["disk"]["total_bytes"] == sum(d["disk"]["by_entry"].values())
    assert "appends" not in out      # no counters of the inspecting process


def _flip(path, offset):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0xFF]))


def test_verify_checks_consume_queue_entries(tmp_path, capsys):
    path = tmp_path / "s"
    _store(str(path)).close()
    f = sorted((path / "consumequeue" / "orders" / "3").iterdir())[0]
    e = np.fromfile(f, dtype=[("position", "<i8"), ("size", "<i4"), ("tag_hash", "<i8")])
    e[5]["position"] = e[6]["position"]       # offset 5 now names offset 6's record
    e.tofile(f)
    rc, out, err = _run(["verify", str(path)], capsys)
    assert rc == 1
    assert f"{f}: entry of offset 5 does not point at its message" in err


def test_verify_checks_topics_json_offsets_files_and_raft_state(tmp_path, capsys):
    path = tmp_path / "s"
    _store(str(path)).close()
    assert _run(["verify", str(path)], capsys)[0] == 0
    for name, data in (("topics.json", b"{not json"),
                       ("consumer_offsets.json", b'{"version": 9}'),
                       ("delay_offsets.json", b"[]"),
                       ("raft-state", b"QLRS" + bytes(20))):
        p = path / name
        saved = p.read_bytes() if p.exists() else None
        p.write_bytes(data)
        rc, out, err = _run(["verify", str(path)], capsys)
        assert rc == 1, name
        assert name in err
        if saved is None:
            p.unlink()
        else:
            p.write_bytes(saved)
    assert _run(["verify", str(path)], capsys)[0] == 0


def test_verify_damaged_checkpoint_and_record_and_torn_tail(tmp_path, capsys):
    path = tmp_path / "s"
    s = _store(str(path))
    mid = s.commitlog.position_of(100)
    s.close()
    seg = path / "commitlog" / ("%020d" % 0)
    # a torn tail after the durable checkpoint: a note, not damage
    end = s.commitlog.end_position
    with open(seg, "r+b") as fh:
        fh.seek(end)
        fh.write(b"\x01" * 40)
    rc, out, err = _run(["verify", str(path)], capsys)
    assert rc == 0 and "note:" in out and "torn record" in out
    # a damaged record below the checkpoint
    _flip(seg, mid + 100)
    rc, out, err = _run(["verify", str(path)], capsys)
    assert rc == 1 and "CRC mismatch" in err and seg.name in err
    _flip(seg, mid + 100)
    # a damaged checkpoint: info cannot trust the geometry -> exit 1 (damage), one line
    _flip(path / "checkpoint", 10)
    for cmd in ("info", "verify"):
        rc, out, err = _run([cmd, str(path)], capsys)
        assert rc == 1 and "checkpoint" in err and "Traceback" not in err


def test_verify_reports_a_healthy_key_index_cleanly(tmp_path, capsys):
    """The quick-start store, its key index used (find_by_key) and cleanly closed: verify
    says ok without a note (each key-index header used to be read one byte long and called
    damaged); a really damaged header is still a note."""
    path = tmp_path / "broker1"
    with quorumlog.open(path, profile="small", environ={}) as s:
        s.put("orders", b"payload", tags="paid", keys=("order-42",))
        s.put_batch("orders", (b"order-%d" % i for i in range(10)))
        assert len(s.find_by_key("orders", "order-42")) == 1
    files = list((path / "keyindex").iterdir())
    assert len(files) == 1
    rc, out, err = _run(["verify", str(path)], capsys)
    assert rc == 0 and "key_index_files 1" in out
    assert "damaged key-index" not in out + err
    with open(files[0], "r+b") as fh:
        fh.seek(8)
        fh.write(b"\xff\xff\xff\xff")          # slots: the header's CRC no longer matches
    rc, out, err = _run(["verify", str(path)], capsys)
    assert rc == 0 and "damaged key-index file" in out + err


def test_info_verify_and_repair_cover_every_group_of_a_multi_group_directory(tmp_path, capsys):
    """A replica directory of many Raft groups (groups.json, groups/<g>/): each command
    covers every group under its heading, or the one --group names; damage in one group is
    named with its group and repaired there alone; a group the directory does not hold is
    exit 2."""
    root = tmp_path / "replica"
    root.mkdir()
    (root / "groups.json").write_text(json.dumps({"groups": 3}))
    for g in range(3):
        _store(str(root / "groups" / str(g)), n=50 + g).close()
    rc, out, err = _run(["info", str(root)], capsys)
    assert rc == 0, err
    assert [ln.split(":")[0] for ln in out.splitlines() if ln.startswith("== group")] == [
        "== group 0", "== group 1", "== group 2"]
    rc, out, _ = _run(["info", str(root), "--json"], capsys)
    doc = json.loads(out)
    assert sorted(doc["groups"]) == ["0", "1", "2"]
    assert [doc["groups"][g]["topics"]["orders"]["messages"] for g in "012"] == [50, 51, 52]
    rc, out, _ = _run(["info", str(root), "--group", "1", "--json"], capsys)
    assert rc == 0 and list(json.loads(out)["groups"]) == ["1"]
    rc, out, err = _run(["info", str(root), "--group", "3"], capsys)
    assert rc == 2 and "holds 3 groups" in err and "no group 3" in err
    rc, out, err = _run(["info", str(root / "groups" / "0"), "--group", "1"], capsys)
    assert rc == 2 and "single group" in err

    rc, out, err = _run(["verify", str(root)], capsys)
    assert rc == 0 and out.count("ok: records") == 3, out + err
    s = quorumlog.open(str(root / "groups" / "2"), **SMALL)
    mid = s.commitlog.position_of(20)
    s.close()
    seg = root / "groups" / "2" / "commitlog" / ("%020d" % 0)
    _flip(seg, mid + 100)
    rc, out, err = _run(["verify", str(root), "--json"], capsys)
    doc = json.loads(out)
    assert rc == 1 and not doc["ok"]
    assert [doc["groups"][g]["ok"] for g in "012"] == [True, True, False]
    rc, out, err = _run(["verify", str(root), "--group", "0"], capsys)
    assert rc == 0

    _flip(seg, mid + 100)                       # back; now a damage the open refuses
    _flip(root / "groups" / "2" / "checkpoint", 10)
    rc, out, err = _run(["repair", str(root), "--dry-run"], capsys)
    assert rc == 3, out + err
    heads = [ln for ln in out.splitlines() if ln.startswith(("== group", "would fix"))]
    assert heads[:3] == [f"== group 0: {root / 'groups' / '0'}",
                         f"== group 1: {root / 'groups' / '1'}",
                         f"== group 2: {root / 'groups' / '2'}"], out
    assert len(heads) > 3 and heads[3].startswith("would fix"), out
    rc, out, err = _run(["repair", str(root), "--group", "2"], capsys)
    assert rc == 0 and "ok: the log opens" in out, out + err
    rc, out, err = _run(["verify", str(root)], capsys)
    assert rc == 0 and out.count("ok: records") == 3, out + err
