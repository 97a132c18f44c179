"""A new segment file's name is durable before any put into it is acknowledged: an fsync of
the commitlog directory lies between the file's creation and the first acknowledgement of a
record in it (POSIX makes a new name durable only through the directory; a power cut can
otherwise lose the whole file on file systems that do not sync the parent on the file's
first fsync). Checked on the system calls of a child process (strace -f -y: file
descriptors decoded to paths); skipped without strace."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap

import pytest

SEG = 1 << 16

CHILD = textwrap.dedent("""
    import os, sys, quorumlog
    s = quorumlog.open(sys.argv[1], segment_size_bytes=%d, flush="sync", environ={})
    for k in range(80):
        r = s.put("t", b"x" * 3000, queue_id=0)
        os.write(1, b"acked %%d %%d\\n" %% (k, r.position))
    s.close()
""" % SEG)

_CREATE = re.compile(r'openat\(AT_FDCWD[^,]*, "([^"]*/commitlog/(\d{20}))", [^)]*O_CREAT')
_DIR_FSYNC = re.compile(r'^(\d+) +fsync\(\d+<([^>]*/commitlog)>(\)\s+= 0| <unfinished)')
# strace splits a call another thread interrupts: "fsync(... <unfinished ...>" then, later,
# "<... fsync resumed>) = 0" from the same pid; the sync counts where it returned
_RESUMED = re.compile(r'^(\d+) +<\.\.\. fsync resumed>\)\s+= 0')
_ACK = re.compile(r'write\(1<[^>]*>, "acked (\d+) (\d+)\\n"')


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("strace") is None, reason="no strace")
def test_a_new_segment_is_named_durably_before_a_put_into_it_is_acknowledged(tmp_path):
    trace = tmp_path / "trace"
    r = subprocess.run(["strace", "-f", "-qq", "-y", "-s", "64", "-e",
                        "trace=openat,fsync,write", "-o", str(trace),
                        sys.executable, "-c", CHILD, str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, r.stderr[-2000:]
    created, first_ack, synced_after, unfinished = {}, {}, {}, set()
    for n, line in enumerate(trace.read_text().splitlines()):
        synced = False
        if (mm := _CREATE.search(line)) and int(mm.group(2)) > 0:
            created.setdefault(int(mm.group(2)), n)
        elif mm := _DIR_FSYNC.search(line):
            if mm.group(3).startswith(" <unfinished"):
                unfinished.add(mm.group(1))
            else:
                synced = True
        elif (mm := _RESUMED.search(line)) and mm.group(1) in unfinished:
            unfinished.discard(mm.group(1))
            synced = True
        if synced:
            for seg, at in created.items():
                synced_after.setdefault(seg, n)
        elif mm := _ACK.search(line):
            seg = int(mm.group(2)) // SEG * SEG
            first_ack.setdefault(seg, n)
    checked = [s for s in first_ack if s in created]
    assert len(checked) >= 2, (created, first_ack)      # the puts crossed segments
    for seg in checked:
        assert seg in synced_after and created[seg] < synced_after[seg] < first_ack[seg], (
            f"segment {seg}: created at trace line {created[seg]}, first put acknowledged "
            f"at line {first_ack[seg]}, commitlog/ fsync'd after its creation at "
            f"{synced_after.get(seg)}")
