"""Fixtures of the `quorumlog bench` tool tests: the click command run in-process (CliRunner)
with small, fast settings, and its JSON document read back."""
import json

import pytest
from click.testing import CliRunner

from quorumlog import cli

# No references, no memory warm-up, no progress line: a tiny run takes well under a second.
FAST = ["--no-references", "--warm-gib", "0", "--no-progress"]


class BenchRun:
    def __init__(self, result, doc):
        self.result = result
        self.exit_code = result.exit_code
        self.output = result.output
        self.stderr = result.stderr
        self.doc = doc

    def rows(self, workload=None, op=None):
        return [r for r in self.doc["results"]
                if (workload is None or r["workload"] == workload) and (op is None or r["op"] == op)]


@pytest.fixture
def bench(tmp_path):
    """bench(*args, fast=True) -> BenchRun: `quorumlog bench <args>` with --json and --dir in
    tmp_path; doc is None when no JSON was written."""
    runner = CliRunner()
    n = [0]

    def run(*args, fast=True):
        n[0] += 1
        out = tmp_path / f"run{n[0]}.json"
        argv = ["bench", *args, "--json", str(out), "--dir", str(tmp_path)]
        if fast:
            argv += FAST
        res = runner.invoke(cli.cli, argv, catch_exceptions=False)
        doc = json.loads(out.read_text()) if out.exists() else None
        return BenchRun(res, doc)
    return run


@pytest.fixture
def invoke():
    """invoke(*argv) -> click Result, for runs that must fail before measuring anything."""
    runner = CliRunner()
    return lambda *argv: runner.invoke(cli.cli, list(argv), catch_exceptions=False)
