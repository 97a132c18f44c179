"""The README's replicated quick start, run verbatim: the blocks after a
`<!-- quickstart-replicated -->` line (three replicas in-process with open_replica; the same
group with `quorumlog cluster start` and a Client in another process) run in a fresh
directory, in order. Replica processes the sh block starts are killed by pid in a finally."""
import os
import pathlib
import re
import subprocess
import sys

from quorumlog.localcluster import LocalCluster

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^<!-- quickstart-replicated -->\n```(\w+)\n(.*?)^```$", re.M | re.S)


def test_readme_replicated_quickstart_runs_verbatim(tmp_path):
    blocks = BLOCK.findall(README.read_text())
    assert [lang for lang, _ in blocks] == ["python", "sh"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUORUMLOG_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    outputs = []
    try:
        for lang, code in blocks:
            argv = [sys.executable, "-c", code] if lang == "python" else \
                ["bash", "-e", "-c", code]
            proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=300)
            assert proc.returncode == 0, f"{lang} block failed:\n{code}\n{proc.stderr}"
            outputs.append(proc.stdout)
    finally:
        if (tmp_path / "mycluster" / "cluster.json").exists():
            LocalCluster(tmp_path / "mycluster").kill_all()
    py, sh = outputs
    assert re.search(r"^leader n[123] \[b'paid'\]$", py, re.M), py
    assert "by key [b'paid']" in py and "billing at 1" in py
    assert "fetched [b'a', b'b']" in sh and "billing at 2" in sh
    assert "n2: stopped cleanly; restarted" in sh
    assert sh.count("stopped") >= 4
    # 4 MiB segments (the small profile), not 1 GiB
    segs = list((tmp_path / "mycluster" / "n1" / "commitlog").iterdir())
    assert segs and all(p.stat().st_size == 4 << 20 for p in segs)
