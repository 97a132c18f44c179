"""Store files that cannot be used are quorumlog errors naming the file, and change nothing:
creating a topic on a full disk (a size-limited tmpfs in a private mount namespace, as in
tests/commitlog/test_disk_full.py) raises DiskFullError and leaves no topic behind; a directory
where topics.json belongs is a StorageError naming it; a consume queue's directory or file
replaced by something else is derived data and is rebuilt from the log."""
import os
import shutil
import textwrap

import pytest

from quorumlog import errors

from tmpfs_support import namespace_support, run_on_tmpfs

SCENARIO = textwrap.dedent("""
    import json, os, sys
    import quorumlog
    from quorumlog import errors
    mnt = sys.argv[1]
    path = os.path.join(mnt, "s")
    kw = dict(segment_size_bytes=65536, consume_queue_file_entries=64, background=False,
              index_file_entries=1024,
              environ={}, disk_reject_ratio=1.0, disk_force_clean_ratio=1.0,
              disk_clean_ratio=1.0)
    s = quorumlog.open(path, **kw)
    s.create_topic("before", queues=2)
    s.put("before", b"x", queue_id=0)
    filler = os.path.join(mnt, "filler")
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\\xaa" * 4096)
        except OSError:
            pass
    err = None
    try:
        s.create_topic("full", queues=4)
    except errors.QuorumlogError as e:
        err = e
    out = dict(kind=type(err).__name__, msg=str(err), topics=s.topics(),
               is_disk_full=isinstance(err, errors.DiskFullError))
    os.unlink(filler)
    s.create_topic("full", queues=4)                   # works once space is back
    s.put("full", b"y", queue_id=3)
    out["after"] = s.topics()
    s.close()
    with quorumlog.open(path, **kw) as s:
        out["reopened"] = s.topics()
        out["bodies"] = [m.body.decode() for m in s.get("full", 3, 0, 5)]
    print("RESULT " + json.dumps(out))
""")


def test_create_topic_on_a_full_disk(tmp_path):
    why = namespace_support()
    if why:
        pytest.skip(why)
    res = run_on_tmpfs(tmp_path, SCENARIO, "2m")
    assert res["is_disk_full"], res
    assert "topics.json" in res["msg"] or "full" in res["msg"], res
    assert res["topics"] == {"before": 2}                 # nothing registered
    assert res["after"] == res["reopened"] == {"before": 2, "full": 4}
    assert res["bodies"] == ["y"]


def test_directory_where_topics_json_belongs(open_store, store_dir):
    s = open_store()
    s.put("t", b"x", queue_id=0)
    s.close()
    os.unlink(os.path.join(store_dir, "topics.json"))
    os.mkdir(os.path.join(store_dir, "topics.json"))
    with pytest.raises(errors.StorageError) as ei:
        open_store()
    assert ei.value.path == os.path.join(store_dir, "topics.json")
    # the message reads as written, not as OSError's "[Errno None] None: <path>"
    assert str(ei.value) == ei.value.args[0]
    assert "topics.json" in str(ei.value) and "Errno None" not in str(ei.value)


@pytest.mark.parametrize("what", ["queue_dir_is_a_file", "queue_file_is_a_dir"])
def test_queue_files_replaced(open_store, store_dir, what):
    s = open_store()
    bodies = [b"m%d" % i for i in range(30)]
    s.put_batch("t", bodies, queue_id=1)
    s.close()
    qdir = os.path.join(store_dir, "consumequeue", "t", "1")
    shutil.rmtree(qdir)
    if what == "queue_dir_is_a_file":
        with open(qdir, "wb") as fh:
            fh.write(b"junk")
    else:
        os.makedirs(os.path.join(qdir, "%020d" % 0))
    s = open_store()
    assert [m.body for m in s.iter_messages("t", 1)] == bodies
    assert s.put("t", b"next", queue_id=1).queue_offset == 30
