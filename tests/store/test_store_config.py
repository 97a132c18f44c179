"""Settings: defaults, TOML file, QUORUMLOG_* environment, explicit arguments (which win),
and validation errors (ConfigError naming the setting)."""
import pytest

import quorumlog
from quorumlog.config import (DEFAULT_DELAY_LEVELS, StoreConfig, load_config,
                              parse_delay_levels, parse_delete_when)
from quorumlog.errors import ConfigError


def test_defaults_are_rocketmq_defaults():
    c = load_config(environ={})
    assert c == StoreConfig()
    assert c.default_topic_queues == 4 and c.file_reserved_hours == 72
    assert c.delete_when == "04"
    assert (c.disk_clean_ratio, c.disk_force_clean_ratio, c.disk_reject_ratio) == (0.75, 0.85, 0.90)
    assert c.consume_queue_file_entries == 300_000
    assert parse_delay_levels(DEFAULT_DELAY_LEVELS)[:4] == (1000, 5000, 10000, 30000)
    assert parse_delay_levels(DEFAULT_DELAY_LEVELS)[-1] == 7_200_000
    assert len(parse_delay_levels(DEFAULT_DELAY_LEVELS)) == 18


def test_precedence_file_env_argument(tmp_path):
    f = tmp_path / "q.toml"
    f.write_text('flush = "sync"\nflush_interval_ms = 50\nmax_batch_messages = 10\n')
    c = load_config(f, environ={})
    assert (c.flush, c.flush_interval_ms, c.max_batch_messages) == ("sync", 50, 10)
    env = {"QUORUMLOG_FLUSH_INTERVAL_MS": "70", "QUORUMLOG_MAX_BATCH_MESSAGES": "20",
           "QUORUMLOG_DEBUG": "1"}      # not ours: ignored
    c = load_config(f, environ=env)
    assert (c.flush, c.flush_interval_ms, c.max_batch_messages) == ("sync", 70, 20)
    c = load_config(f, environ=env, max_batch_messages=30, flush="async")
    assert (c.flush, c.flush_interval_ms, c.max_batch_messages) == ("async", 70, 30)


def test_store_table_and_types(tmp_path):
    f = tmp_path / "q.toml"
    f.write_text('[store]\nauto_create_topics = false\ndisk_clean_ratio = 0.5\n'
                 'delete_when = "04;16"\n')
    c = load_config(f, environ={"QUORUMLOG_BACKGROUND": "off"})
    assert c.auto_create_topics is False and c.disk_clean_ratio == 0.5 and not c.background
    assert parse_delete_when(c.delete_when) == (4, 16)


@pytest.mark.parametrize("kw", [
    dict(flush="sometimes"), dict(segment_size_bytes=65537), dict(segment_size_bytes=1024),
    dict(max_batch_messages=0), dict(disk_clean_ratio=0.9, disk_force_clean_ratio=0.8),
    dict(delay_levels="1s 5x"), dict(delay_levels=""), dict(delete_when="25"),
    dict(no_such_setting=1), dict(max_batch_messages="many"), dict(background="maybe"),
    dict(file_reserved_hours=0), dict(segment_size_bytes=1 << 16, max_message_bytes=1 << 16),
])
def test_bad_settings_raise_config_error(kw):
    with pytest.raises(ConfigError):
        load_config(environ={}, **kw)


def test_bad_file_and_env(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("flush = \n")
    with pytest.raises(ConfigError):
        load_config(f, environ={})
    f.write_text("typo_setting = 1\n")
    with pytest.raises(ConfigError, match="typo_setting"):
        load_config(f, environ={})
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.toml", environ={})
    with pytest.raises(ConfigError, match="QUORUMLOG_FLUSH_INTERVAL_MS"):
        load_config(environ={"QUORUMLOG_FLUSH_INTERVAL_MS": "soon"})


def test_open_reads_config_file_and_env(tmp_path):
    f = tmp_path / "q.toml"
    f.write_text("default_topic_queues = 2\nbackground = false\n")
    with quorumlog.open(tmp_path / "s", config_file=f, segment_size_bytes=1 << 16,
                        environ={"QUORUMLOG_MAX_BATCH_MESSAGES": "5"}) as s:
        s.put("t", b"x")
        assert s.topics() == {"t": 2}
        assert s.config.max_batch_messages == 5
        with pytest.raises(quorumlog.errors.BatchTooLargeError):
            s.put_batch("t", [b"x"] * 6)
