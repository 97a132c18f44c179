"""consumer_offsets.json carries a CRC32C (store/files.py) like topics.json and
queue_offsets.json: a damaged file -- a flipped byte anywhere, a truncated file -- is never
trusted and never stops the store from opening: the offsets are rebuilt from the log's META
records, and the file is written whole again. An older file without a checksum is read."""
import json
import os

import pytest

from quorumlog.store.files import CHECKSUM_KEY

OFFSETS = {"t": {0: 1, 1: 7}}


def _store_with_offsets(open_store, store_dir):
    s = open_store()
    s.commit_offset("g", "t", 0, 5)                 # (replaced by the next commit)
    s.commit_offsets("g", {("t", 0): 1, ("t", 1): 7})
    s.close()
    path = os.path.join(store_dir, "consumer_offsets.json")
    with open(path, "rb") as fh:
        data = fh.read()
    assert CHECKSUM_KEY in json.loads(data)
    return path, data


def _reopen_and_check(open_store, path, caplog):
    s = open_store()
    assert s.consumer_offsets("g") == OFFSETS
    s.commit_offset("g", "t", 2, 3)          # the table works on, and is saved whole again
    s.close()
    s = open_store()
    assert s.consumer_offsets("g") == {"t": {0: 1, 1: 7, 2: 3}}
    s.close()
    with open(path, "rb") as fh:
        assert CHECKSUM_KEY in json.loads(fh.read())


def test_a_flipped_byte_anywhere_is_found_and_the_offsets_come_from_the_log(
        open_store, store_dir, caplog):
    path, data = _store_with_offsets(open_store, store_dir)
    # every position of the file, including the digit of an offset ("7" -> "6": still JSON)
    digit = data.index(b'"1": 7') + 5
    for at in sorted({digit, 0, len(data) - 1, *range(0, len(data), 9)}):
        bad = bytearray(data)
        bad[at] ^= 0x01
        with open(path, "wb") as fh:
            fh.write(bad)
        caplog.clear()
        s = open_store()
        assert s.consumer_offsets("g") == OFFSETS, f"byte {at} flipped"
        s.close()
        assert any("consumer_offsets.json is damaged" in r.getMessage()
                   for r in caplog.records), f"byte {at} flipped: not reported"
        with open(path, "wb") as fh:
            fh.write(data)
    _reopen_and_check(open_store, path, caplog)


@pytest.mark.parametrize("keep", [0, 1, 0.5, -1])
def test_a_truncated_file_is_found_and_the_offsets_come_from_the_log(
        open_store, store_dir, caplog, keep):
    path, data = _store_with_offsets(open_store, store_dir)
    n = keep if isinstance(keep, int) and keep >= 0 else \
        (len(data) + keep if keep < 0 else int(len(data) * keep))
    with open(path, "wb") as fh:
        fh.write(data[:n])
    _reopen_and_check(open_store, path, caplog)
    assert any("consumer_offsets.json is damaged" in r.getMessage() for r in caplog.records)


def test_a_file_without_a_checksum_is_read_once(open_store, store_dir, caplog):
    path, data = _store_with_offsets(open_store, store_dir)
    obj = json.loads(data)
    del obj[CHECKSUM_KEY]
    obj["offsets"]["g"]["t"]["5"] = 9          # only in the file: proves the file was read
    with open(path, "w") as fh:
        json.dump(obj, fh)
    s = open_store()
    assert s.consumer_offsets("g") == {"t": {0: 1, 1: 7, 5: 9}}
    s.close()
    with open(path, "rb") as fh:
        assert CHECKSUM_KEY in json.loads(fh.read())     # rewritten with one
