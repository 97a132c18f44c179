"""Errors that say what to do (issue 23 item 8), one test per message: a server address
without a port, a bench run connecting to replicas without their secret, and `bench --json -`
writing the document to stdout. (open_replica on a regular file: tests/node/
test_replica_settings.py.)"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from quorumlog import cli
from quorumlog.client import AsyncClient, Client
from quorumlog.errors import InvalidArgumentError


@pytest.mark.parametrize("addr, says", [
    ("localhost", "server address 'localhost' has no port: give 'host:port'"),
    ("localhost:http", "port 'http' is not a number"),
    (":8001", "need a host and a port"),
])
def test_client_address_without_a_port_says_what_to_give(addr, says):
    with pytest.raises(InvalidArgumentError, match=says):
        AsyncClient([addr], secret="s" * 16)
    with pytest.raises(InvalidArgumentError, match=says):
        Client(addr, secret="s" * 16).close()


def test_bench_connect_without_secret_file_fails_at_once():
    res = CliRunner().invoke(cli.cli, ["bench", "cluster", "--connect", "127.0.0.1:1",
                                       "--no-references"], catch_exceptions=False)
    assert res.exit_code == 2
    assert "--connect needs --secret-file" in res.output


def test_bench_json_dash_writes_the_document_to_stdout(tmp_path):
    res = CliRunner().invoke(
        cli.cli, ["bench", "log", "--count", "200", "--json", "-", "--dir", str(tmp_path),
                  "--no-references", "--warm-gib", "0", "--no-progress"],
        catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)            # stdout is the document alone
    assert doc["ok"] and doc["results"]
    assert not (tmp_path / "-").exists()
    assert "msg/s" in res.stderr            # the table went to stderr


def test_peer_address_without_a_port_is_a_clear_config_error(tmp_path):
    import quorumlog
    from quorumlog.errors import ConfigError
    with pytest.raises(ConfigError, match=r"peers\['n1'\] .*must be 'host:port', got 'localhost'"):
        quorumlog.open_replica(tmp_path / "r", "n1", {"n1": "localhost"}, secret="s" * 16)
    assert not (tmp_path / "r").exists()

