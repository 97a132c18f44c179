"""The two injectors behind the newer nemeses, on a child process of their own: strace's
fault injection fails a running process's fsync with EIO (or ENOSPC) and lifting it makes
the calls succeed again (syscall_faults.SyscallFaults); the clock-rate shim makes a
process's monotonic clock run at the rate set in its control file, continuously across a
change of rate (clockskew.ClockControl + clockrate.c). Skipped without strace / a C
compiler."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from quorumlog.testing.clockskew import ClockControl, build_shim
from quorumlog.testing.syscall_faults import SyscallFaults

DEADLINE_S = 20.0

# one line per request on stdin: fsync a file -> "ok" / the errno's name
FSYNCER = textwrap.dedent("""
    import errno, os, sys
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
    print("ready", flush=True)
    for _ in sys.stdin:
        try:
            os.fsync(fd)
            print("ok", flush=True)
        except OSError as e:
            print(errno.errorcode[e.errno], flush=True)
""")

# one line per request on stdin: time.monotonic() now
CLOCK = textwrap.dedent("""
    import sys, time
    print("ready", flush=True)
    for _ in sys.stdin:
        print(repr(time.monotonic()), flush=True)
""")


def _ask(p) -> str:
    p.stdin.write("\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


def _child(code, *args, env=None):
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    return p


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("strace") is None, reason="no strace")
@pytest.mark.parametrize("mode,err", [("eio", "EIO"), ("enospc", "ENOSPC")])
def test_injected_storage_errors_fail_fsync_until_lifted(tmp_path, mode, err):
    p = _child(FSYNCER, str(tmp_path / "f"))
    inj = SyscallFaults(p.pid, mode)
    try:
        assert _ask(p) == "ok"
        inj.start()
        assert [_ask(p) for _ in range(3)] == [err] * 3
        inj.stop()
        deadline = time.monotonic() + DEADLINE_S
        while (got := _ask(p)) != "ok":          # strace detaches asynchronously
            assert got == err and time.monotonic() < deadline, got
    finally:
        inj.stop()
        p.kill()
        p.wait(10)


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_clock_rate_shim_scales_the_monotonic_clock_continuously(tmp_path):
    clocks = tmp_path / "clock"
    clocks.mkdir()
    env = dict(os.environ, LD_PRELOAD=build_shim(str(tmp_path)), QUORUMLOG_CLOCK_DIR=str(clocks))
    p = _child(CLOCK, env=env)
    c = None
    try:
        c = ClockControl(str(clocks), p.pid)
        c.set_rate(2.0)
        time.sleep(0.1)                    # the shim looks for its file every 50 ms
        a, ra = float(_ask(p)), time.monotonic()
        time.sleep(0.5)
        b, rb = float(_ask(p)), time.monotonic()
        assert 1.8 < (b - a) / (rb - ra) < 2.2, ((b - a), (rb - ra))
        c.set_rate(0.5)
        d, rd = float(_ask(p)), time.monotonic()
        time.sleep(0.5)
        e, re_ = float(_ask(p)), time.monotonic()
        assert d >= b and 0.4 < (e - d) / (re_ - rd) < 0.6, ((e - d), (re_ - rd))
        c.set_rate(1.0)
        f = float(_ask(p))
        assert f >= e                      # never back
    finally:
        if c is not None:
            c.close()
        p.kill()
        p.wait(10)
