"""The raft-state file (atomic, CRC-checked) and the node settings loader."""
from __future__ import annotations

import os

import pytest

from quorumlog.errors import ConfigError, CorruptLogError
from quorumlog.node.config import load_node_config
from quorumlog.node.hardstate import HardStateFile, end_recovery
from quorumlog.raft.core import HardState


def test_hard_state_round_trips_and_replaces_atomically(tmp_path):
    f = HardStateFile(tmp_path)
    assert f.load() == HardState()
    f.save(HardState(7, "n2"))
    f.save(HardState(8, None))
    assert f.load() == HardState(8, None)
    assert sorted(os.listdir(tmp_path)) == ["raft-state"]     # no temporary file left


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic"])
def test_damaged_hard_state_is_an_error_not_a_smaller_term(tmp_path, damage):
    f = HardStateFile(tmp_path)
    f.save(HardState(12, "n3"))
    data = bytearray(open(f.path, "rb").read())
    if damage == "flip":
        data[9] ^= 1
    elif damage == "truncate":
        data = data[:-3]
    else:
        data[0:4] = b"XXXX"
    open(f.path, "wb").write(bytes(data))
    with pytest.raises(CorruptLogError, match="raft-state"):
        f.load()


def test_settings_file_env_and_arguments(tmp_path):
    toml = tmp_path / "n.toml"
    toml.write_text('[node]\nnode_id = "n2"\npeers = {n1 = "h:1", n2 = "h:2"}\n'
                    'tick_ms = 20\n[raft]\nheartbeat_interval_ms = 50\n[store]\nflush = "sync"\n')
    cfg, rcfg, scfg = load_node_config(toml, {"QUORUMLOG_TICK_MS": "30",
                                              "QUORUMLOG_RAFT_MAX_HEARTBEAT_LEAK": "4"},
                                       client_addr="h:9")
    assert (cfg.node_id, cfg.tick_ms, cfg.client_addr) == ("n2", 30, "h:9")
    assert cfg.peers == {"n1": "h:1", "n2": "h:2"}
    assert (rcfg.heartbeat_interval_ms, rcfg.max_heartbeat_leak) == (50, 4)
    assert scfg.flush == "sync"


@pytest.mark.parametrize("kw, what", [
    (dict(node_id="n9", peers="n1=h:1"), "does not name this node"),
    (dict(node_id="n1", peers="n1=h"), "host:port"),
    (dict(node_id="n1", peers="n1=h:1", tick_ms=0), "tick_ms"),
    (dict(node_id="n1", peers="n1=h:1", bogus=1), "unknown node setting"),
])
def test_bad_settings_name_the_setting(kw, what):
    with pytest.raises(ConfigError, match=what):
        load_node_config(None, {}, **kw)


def test_a_recovering_replicas_floor_is_kept_and_written_as_version_2_only_then(tmp_path):
    f = HardStateFile(tmp_path)
    f.save(HardState(4, "n1"))
    assert open(f.path, "rb").read()[4] == 1           # not recovering: the old format
    f.save(HardState(5, "n1", 5))
    assert open(f.path, "rb").read()[4] == 2
    assert f.load() == HardState(5, "n1", 5)


def test_end_recovery_offline_clears_the_floor_and_says_so(tmp_path, caplog):
    f = HardStateFile(tmp_path)
    f.save(HardState(5, "n1", 5))
    with pytest.raises(ValueError):
        end_recovery(tmp_path, "")
    assert f.load() == HardState(5, "n1", 5)
    with caplog.at_level("WARNING"):
        assert end_recovery(tmp_path, "all three lost power") == HardState(5, "n1", 0)
    assert f.load() == HardState(5, "n1", 0)
    assert "ended by the operator: all three lost power" in caplog.text
