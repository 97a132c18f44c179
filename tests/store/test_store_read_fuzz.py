"""Damaged records on the read path: bit flips in a stored record, read through get() and every
Message accessor. The fuzzer (read_fuzz.py) runs in a subprocess so that a crash in native
code (reading outside the mapping) fails the test instead of killing pytest."""
import os
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
SCALE = float(os.environ.get("QUORUMLOG_HYPOTHESIS_SCALE", "1"))


def run_fuzzer(mode, examples, seed):
    r = subprocess.run([sys.executable, os.path.join(HERE, "read_fuzz.py"), mode,
                        str(max(1, int(examples * SCALE))), str(seed)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode < 0:
        pytest.fail(f"the read fuzzer ({mode}) died of {signal.Signals(-r.returncode).name}"
                    f"\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    assert r.returncode == 0, f"read fuzzer ({mode}) failed:\n{r.stdout[-3000:]}\n" \
                              f"{r.stderr[-5000:]}"
    assert r.stdout.startswith(f"OK {mode}"), r.stdout
    return r.stdout


@pytest.mark.timeout(900)
def test_damage_under_a_live_message_never_crashes():
    """Bytes of a record change after get() returned its Message: every accessor returns a
    value or raises CorruptLogError; no length read from the record is used unchecked."""
    out = run_fuzzer("after", 400, 5)
    assert "'corrupt': 0" not in out          # the damage was noticed, not just survived


@pytest.mark.timeout(900)
def test_damage_on_disk_is_never_returned():
    """Bits flipped in a stored record before get(): get() raises CorruptLogError or returns
    the message exactly as it was put (every accessor)."""
    out = run_fuzzer("before", 400, 7)
    assert "'corrupt': 0" not in out
