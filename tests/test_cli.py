"""The `quorumlog` command: info and verify on a real log, and a damaged record found by verify."""
import os

from quorumlog import cli
from quorumlog.commitlog import CommitLog


def _small_log(path, n=50):
    with CommitLog(path, segment_size_bytes=1 << 16) as log:
        for i in range(n):
            log.append("t", b"m%d" % i, queue_offset=i, term=1)
        return log.position_of(n // 2)


def test_info_reads_the_segment_size_from_the_checkpoint(tmp_path, capsys):
    _small_log(tmp_path)
    assert cli.main(["info", str(tmp_path)]) == 0     # no --segment-size-bytes needed
    out = capsys.readouterr().out
    assert "last_index: 50" in out
    assert "first_index: 1" in out


def test_verify_ok_then_damaged_record_is_named(tmp_path, capsys):
    mid = _small_log(tmp_path)
    assert cli.main(["verify", str(tmp_path)]) == 0
    assert "records 1..50 verified" in capsys.readouterr().out
    seg = tmp_path / "commitlog" / ("%020d" % 0)
    with open(seg, "r+b") as f:          # flip one body byte of a record in the middle
        f.seek(mid + 96 + 1)
        b = f.read(1)
        f.seek(mid + 96 + 1)
        f.write(bytes([b[0] ^ 0xFF]))
    assert cli.main(["verify", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "corrupt" in err and os.fspath(seg).split(os.sep)[-1] in err


def test_version_and_python_dash_m(tmp_path):
    import subprocess
    import sys

    import quorumlog
    assert cli.main(["--version"]) == 0
    # `python -m quorumlog` is the same command (run where no source checkout is around)
    proc = subprocess.run([sys.executable, "-m", "quorumlog", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"quorumlog {quorumlog.__version__}"
    proc = subprocess.run([sys.executable, "-m", "quorumlog", "verify", str(tmp_path / "nope"),
                           "--segment-size-bytes", "bad"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "'bad' is not a valid integer" in proc.stderr


def test_info_through_click_runner_matches_main(tmp_path, capsys):
    from click.testing import CliRunner
    _small_log(tmp_path)
    assert cli.main(["info", str(tmp_path)]) == 0
    via_main = capsys.readouterr().out
    res = CliRunner().invoke(cli.cli, ["info", str(tmp_path)])
    assert res.exit_code == 0 and res.output == via_main


def test_group_lists_its_commands_and_usage_errors_exit_2(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("bench", "info", "verify"):
        assert name in out
    assert cli.main(["nosuch"]) == 2
    assert "No such command 'nosuch'" in capsys.readouterr().err


def test_serve_cluster_and_repair_are_subcommands_of_quorumlog():
    from click.testing import CliRunner

    from quorumlog.cli import cli
    for name, words in (("serve", "replica"), ("cluster", "replica group"),
                        ("repair", "commit log")):
        r = CliRunner().invoke(cli, [name, "--help"])
        assert r.exit_code == 0, (name, r.output)
        assert words in r.output, (name, r.output)
