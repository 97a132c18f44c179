"""One API across store and replica: open_replica takes flat settings as quorumlog.open does
(store, node and Raft settings told apart by name), `profile="small"` in every place a store
setting goes (keyword, a node TOML's [store] table), the old `store={}` with a deprecation
warning, and clear errors for a regular file and an unknown setting."""
from __future__ import annotations

import os

import pytest

import quorumlog
from quorumlog.errors import ConfigError, NotAStoreError
from quorumlog.localcluster import free_port
from quorumlog.node.config import load_node_config, split_settings

SECRET = "s" * 16


def _one(tmp_path, **kw):
    return quorumlog.open_replica(tmp_path / "r", "n1", {"n1": f"127.0.0.1:{free_port()}"},
                                  secret=SECRET, **kw)


def _wait_ready(rep, timeout=60):
    assert rep.wait_ready_to_serve(timeout), "a single replica did not become leader"


def test_flat_settings_profile_and_keys_like_the_store(tmp_path):
    with _one(tmp_path, profile="small", flush="sync", tick_ms=5,
              heartbeat_interval_ms=50) as rep:
        _wait_ready(rep)
        assert rep.node.store_cfg.segment_size_bytes == 4 << 20      # the small profile
        assert rep.node.store_cfg.flush == "sync"
        assert rep.cfg.tick_ms == 5
        assert rep.node.raft_cfg.heartbeat_interval_ms == 50
        r = rep.put("orders", b"paid", keys=("order-42",), tags="t",
                    properties={"a": "b"}, born_timestamp_ms=1234)
        (m,) = rep.get("orders", r.queue_id, r.queue_offset)
        assert m.keys == ("order-42",) and m.properties == {"a": "b"}
        assert m.born_timestamp_ms == 1234
        assert [bytes(x.body) for x in rep.find_by_key("orders", "order-42")] == [b"paid"]
        for none in ((), None):
            r2 = rep.put("orders", b"no keys", keys=none)
            assert rep.get("orders", r2.queue_id, r2.queue_offset)[0].keys == ()
    # the commit log files are 4 MiB: what the profile preallocates
    seg = os.listdir(tmp_path / "r" / "commitlog")
    assert seg and all(os.path.getsize(tmp_path / "r" / "commitlog" / s) == 4 << 20
                       for s in seg)


def test_old_store_dict_still_works_with_a_deprecation_warning(tmp_path):
    with pytest.warns(DeprecationWarning, match="store settings as keyword arguments"):
        rep = _one(tmp_path, store={"profile": "small"})
    with rep:
        assert rep.node.store_cfg.segment_size_bytes == 4 << 20


def test_profile_in_a_node_toml_store_table(tmp_path):
    f = tmp_path / "node.toml"
    f.write_text('[node]\nnode_id = "n1"\npeers = { n1 = "127.0.0.1:7001" }\n'
                 'insecure = true\n[store]\nprofile = "small"\nflush = "sync"\n')
    cfg, rcfg, scfg = load_node_config(str(f), {})
    assert scfg.segment_size_bytes == 4 << 20 and scfg.flush == "sync"
    # the environment ranks above the file, an argument above both
    _, _, scfg = load_node_config(str(f), {"QUORUMLOG_PROFILE": "default"})
    assert scfg.segment_size_bytes == 1 << 30
    _, _, scfg = load_node_config(str(f), {"QUORUMLOG_PROFILE": "default"},
                                  store={"profile": "small"})
    assert scfg.segment_size_bytes == 4 << 20


def test_unknown_setting_is_named(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting 'segment_size'"):
        split_settings({"segment_size": 1})
    with pytest.raises(ConfigError, match="unknown setting 'nope'"):
        _one(tmp_path, nope=1)
    assert not (tmp_path / "r").exists()


def test_open_replica_on_a_regular_file_is_not_a_store(tmp_path):
    f = tmp_path / "r"
    f.write_bytes(b"not a store")
    with pytest.raises(NotAStoreError, match="is not a directory"):
        _one(tmp_path)
    assert f.read_bytes() == b"not a store"
