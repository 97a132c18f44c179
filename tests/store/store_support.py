"""Helpers shared by the message-store tests (imported by name; pytest puts this directory on
sys.path)."""
import os
import subprocess
import sys


def cq_files(store_dir, topic, q):
    d = os.path.join(store_dir, "consumequeue", topic, str(q))
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def run_killed_at(script: str, point: str) -> None:
    """Run `script` in a subprocess with the crash point `point` armed
    (QUORUMLOG_INSTALL_CRASH_AT) and check it was SIGKILLed there."""
    env = dict(os.environ, QUORUMLOG_INSTALL_CRASH_AT=point)
    p = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -9, (p.returncode, out, err[-2000:])   # SIGKILLed at `point`
