"""Disk full: the log lives on a size-limited tmpfs in a private mount namespace
(`unshare -m` + `mount -t tmpfs -o size=...`, needs root or user namespaces). A filler file
eats the space; appends run until DiskFullError; the log is then readable and consistent
(nothing half-written, end unchanged by the failed append), and appends succeed again once
the filler is deleted. Skipped, with the reason, where the machine cannot make the mount.
"""
import textwrap

import pytest

from cl_support import SEG
from tmpfs_support import namespace_support, run_on_tmpfs


SCENARIO = textwrap.dedent(f"""
    import json, os, sys
    from quorumlog import errors, format as qf
    from quorumlog.commitlog import CommitLog
    mnt = sys.argv[1]
    prealloc = sys.argv[2] == "1"
    path = os.path.join(mnt, "s")
    kw = dict(segment_size_bytes={SEG}, index_file_entries=64, preallocate_next=prealloc)
    log = CommitLog(path, **kw)
    # eat the space: a filler up to ENOSPC, then give back room for about two segments
    filler = os.path.join(mnt, "filler")
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\\xaa" * 65536)
        except OSError:
            pass
    size = os.path.getsize(filler)
    os.truncate(filler, max(0, size - 2 * {SEG} - 8192))
    appended, err = 0, None
    bodies = {{}}
    for k in range(2000):
        b = bytes([k % 251]) * (500 + k % 700)
        state = (log.last_index, log.end_position)
        try:
            if k % 3 == 0:
                first, pos, ts = log.append_batch("t", [b, b[:10]], queue_ids=0,
                                                  queue_offsets=k, term=1)
                bodies[first], bodies[first + 1] = b, b[:10]
            else:
                idx, pos, ts = log.append("t", b, term=1)
                bodies[idx] = b
        except errors.DiskFullError as e:
            err = str(e)
            break
        appended += 1
    result = dict(appended=appended, err=err)
    assert err is not None, "never ran out of space"
    # nothing of the failed call was written, and everything before reads back
    assert (log.last_index, log.end_position) == state, (state, log.last_index, log.end_position)
    for i, b in bodies.items():
        assert bytes(log.record(i).body) == b, i
    log.verify()
    # still full: a retry fails the same way and changes nothing
    try:
        log.append("t", b"x" * 60000, term=1)
        raise AssertionError("appends succeeded on a full disk")
    except errors.DiskFullError:
        pass
    n_before = log.last_index
    # free the space: appends work again, across more segments
    os.unlink(filler)
    for k in range(300):
        idx, pos, ts = log.append("t", bytes([k % 251]) * 900, term=2)
        bodies[idx] = bytes([k % 251]) * 900
    result["after"] = log.last_index - n_before
    log.close()
    log = CommitLog(path, **kw)
    assert not log.unclean_open
    for i, b in bodies.items():
        assert bytes(log.record(i).body) == b, i
    log.verify()
    result["last_index"] = log.last_index
    log.close()
    print("RESULT " + json.dumps(result))
""")


@pytest.mark.parametrize("prealloc", [True, False], ids=["preallocate_next", "no_prealloc"])
def test_disk_full_then_space_freed(tmp_path, prealloc):
    why = namespace_support()
    if why:
        pytest.skip(why)
    res = run_on_tmpfs(tmp_path, SCENARIO, "1m", 1 if prealloc else 0)
    assert res["appended"] > 0 and res["after"] == 300
    assert "space" in res["err"].lower() or "full" in res["err"].lower()
