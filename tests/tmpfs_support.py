"""Running a scenario on a small tmpfs in a private mount namespace (`unshare -m` + `mount -t
tmpfs -o size=...`, needs root or user namespaces): how the disk-full tests get a full disk.
Shared by tests/commitlog and tests/store (tests/ is on sys.path through its conftest.py)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def namespace_support():
    """None when this machine can mount a tmpfs in a private mount namespace, else why not."""
    if not shutil.which("unshare"):
        return "no unshare(1) on this machine"
    d = tempfile.mkdtemp(prefix="ql-nscheck-")
    try:
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            f"mount -t tmpfs -o size=1m tmpfs {d}"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return f"cannot mount a tmpfs in a private mount namespace: {r.stderr.strip()}"
        return None
    finally:
        os.rmdir(d)


def run_on_tmpfs(tmp_path, scenario: str, size: str, *args) -> dict:
    """Run the Python `scenario` with the mount point of a new `size` tmpfs (e.g. "1m") as its
    first argument, then `args`; it must exit 0 and print a line "RESULT <json>" -> that
    object."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "scenario.py"
    script.write_text(scenario)
    argv = " ".join(f'"{a}"' for a in args)
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f'mount -t tmpfs -o size={size} tmpfs "{mnt}" && exec "{sys.executable}" "{script}" '
         f'"{mnt}" {argv}'],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])
