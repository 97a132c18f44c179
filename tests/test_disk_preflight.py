"""make test refuses to start on a file system without room for the run (conftest.py's
pytest_sessionstart), naming what it needs, instead of failing hundreds of tests on
DiskFullError part-way (CI's run of 26f08d8)."""
import pathlib

import pytest

from tmpfs_support import namespace_support, run_on_tmpfs

TESTS = pathlib.Path(__file__).resolve().parent

SCENARIO = """
import json, subprocess, sys
mnt, tests = sys.argv[1], sys.argv[2]
r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                    "-p", "no:cacheprovider", "--basetemp", mnt + "/bt",
                    tests + "/test_disk_preflight.py"],
                   capture_output=True, text=True, timeout=120, cwd=tests)
print("RESULT " + json.dumps({"rc": r.returncode, "out": r.stdout + r.stderr}))
"""


def test_a_run_without_room_is_refused_before_any_test(tmp_path):
    why = namespace_support()
    if why:
        pytest.skip(why)
    got = run_on_tmpfs(tmp_path, SCENARIO, "64m", str(TESTS))
    assert got["rc"] == pytest.ExitCode.USAGE_ERROR, got["out"]
    assert "the tests need 6 GiB under" in got["out"], got["out"]
    assert "GiB free: free" in got["out"] and "--basetemp" in got["out"], got["out"]
