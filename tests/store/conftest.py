"""Fixtures for the message-store tests: small segments and consume-queue files so rollover,
retention and rebuild paths run on a few hundred KiB; no background thread."""
import os

import pytest

import quorumlog

SMALL = dict(segment_size_bytes=1 << 16, consume_queue_file_entries=64, background=False)


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def open_store(store_dir):
    opened = []

    def _open(path=None, **kw):
        settings = dict(SMALL)
        settings.update(kw)
        s = quorumlog.open(path or store_dir, environ={}, **settings)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        if not s.closed:
            s.close()

