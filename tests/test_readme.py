"""The README's quick start, run verbatim: every fenced block right after a
`<!-- quickstart -->` line is extracted from README.md and run in a fresh directory (python
blocks with this interpreter, sh blocks with bash and the installed `quorumlog` command on
PATH), in order, so the quick start cannot rot."""
import os
import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^<!-- quickstart -->\n```(\w+)\n(.*?)^```$", re.M | re.S)


def quickstart_blocks():
    return [(lang, code) for lang, code in BLOCK.findall(README.read_text())]


def test_readme_quickstart_runs_verbatim(tmp_path):
    blocks = quickstart_blocks()
    assert [lang for lang, _ in blocks] == ["python", "sh"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUORUMLOG_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    outputs = []
    for lang, code in blocks:
        argv = [sys.executable, "-c", code] if lang == "python" else ["bash", "-e", "-c", code]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, f"{lang} block failed:\n{code}\n{proc.stderr}"
        outputs.append(proc.stdout)
    py, sh = outputs
    assert py.splitlines()[0].startswith("0 b'payload' ")
    assert "10 more at offsets" in py
    assert "orders: 4 queues, 11 messages" in sh and "ok: records 1..11 verified" in sh
    assert (tmp_path / "broker1" / "checkpoint").exists()
