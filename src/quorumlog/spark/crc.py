"""CRC32C of many records at once: the engine's C function when the native extension is
built, else a lane-parallel slicing-by-4 table CRC in numpy (same results, tested both ways)."""
from __future__ import annotations

import os

import numpy as np

_POLY = 0x82F63B78  # CRC32C (Castagnoli), reflected


def _crc_tables():
    t0 = np.zeros(256, np.uint32)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (_POLY if c & 1 else 0)
        t0[b] = c
    tabs = [t0]
    for _ in range(3):  # slicing-by-4 tables
        prev = tabs[-1]
        tabs.append((prev >> np.uint32(8)) ^ t0[prev & np.uint32(0xFF)])
    return tabs


_T0, _T1, _T2, _T3 = _crc_tables()
_LANE = 256  # bytes per lane; a record is split into ceil(n / _LANE) lanes


def _shift_tables(nbytes: int):
    """4 × 256 tables applying 'feed nbytes zero bytes' to a raw (init 0) CRC register."""
    cols = np.array([1 << i for i in range(32)], np.uint32)
    v = cols.copy()
    words, rest = divmod(nbytes, 4)
    for _ in range(words):
        v = _T3[v & 0xFF] ^ _T2[(v >> 8) & 0xFF] ^ _T1[(v >> 16) & 0xFF] ^ _T0[v >> 24]
    for _ in range(rest):
        v = _T0[v & 0xFF] ^ (v >> np.uint32(8))
    # v[i] = image of bit i; table k maps byte b of the register to xor of its bits' images.
    bits = ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(bool)
    out = []
    for k in range(4):
        img = v[8 * k:8 * k + 8]
        out.append(np.bitwise_xor.reduce(np.where(bits, img[None, :], np.uint32(0)), axis=1))
    return out


_SHIFT_LANE = _shift_tables(_LANE)


def _lane_crcs(region, starts, nlanes, pad, lane_first):
    """Raw CRC registers of every 256-byte lane of every message (one table loop for all)."""
    n = len(starts)
    total_lanes = int(lane_first[-1])
    rec_of_lane = np.repeat(np.arange(n), nlanes)
    k_in_rec = np.arange(total_lanes) - lane_first[:-1][rec_of_lane]
    lane_start = starts[rec_of_lane] - pad[rec_of_lane] + k_in_rec * _LANE
    # Padded source so that a first lane reaching before region[0] reads zeros.
    src = np.concatenate([np.zeros(_LANE, np.uint8), region])
    # The 4 first bytes of each message take the 0xFFFFFFFF initial value (messages never
    # overlap, so this can be done on the copy in place).
    src[(starts + _LANE)[:, None] + np.arange(4)[None, :]] ^= 0xFF
    win = np.lib.stride_tricks.sliding_window_view(src, _LANE)
    lanes = win[lane_start + _LANE].copy()                # (total_lanes, 256)
    first = lane_first[:-1]
    col = np.arange(_LANE)
    lanes[first] = np.where(col[None, :] < pad[:, None], 0, lanes[first])
    words = lanes.view("<u4").T.copy()                     # (64, total_lanes), contiguous rows
    c = np.zeros(total_lanes, np.uint32)
    for w in words:
        c ^= w
        c = _T3[c & 0xFF] ^ _T2[(c >> 8) & 0xFF] ^ _T1[(c >> 16) & 0xFF] ^ _T0[c >> 24]
    return c


def crc32c_many(region: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC32C of region[starts[i] : starts[i] + lengths[i]] for every i (lengths >= 4).

    Each message is cut into 256-byte lanes (the first one short and zero-padded in front,
    which leaves a raw CRC unchanged); all lanes of all messages run through a slicing-by-4
    table loop together, then each message's lanes are folded with a 'shift by 256 zero
    bytes' operator. The 0xFFFFFFFF initial value is applied by inverting the first 4 data
    bytes (equivalent for the reflected CRC), the final XOR at the end."""
    n = len(starts)
    if n == 0:
        return np.zeros(0, np.uint32)
    starts = starts.astype(np.int64)
    lengths = lengths.astype(np.int64)
    nlanes = (lengths + _LANE - 1) // _LANE
    pad = nlanes * _LANE - lengths                        # zero bytes in front of lane 0
    lane_first = np.zeros(n + 1, np.int64)
    np.cumsum(nlanes, out=lane_first[1:])
    c = _lane_crcs(region, starts, nlanes, pad, lane_first)
    first = lane_first[:-1]
    # Fold lanes per record: reg = shift(reg) ^ lane, records ordered by lane count (desc) so
    # the active ones form a growing prefix.
    order = np.argsort(-nlanes, kind="stable")
    nl_sorted = nlanes[order]
    maxn = int(nl_sorted[0])
    reg = np.zeros(n, np.uint32)
    S0, S1, S2, S3 = _SHIFT_LANE
    for t in range(maxn):
        # record order[j] is active from step maxn - nl_sorted[j]
        active = int(np.searchsorted(-nl_sorted, -(maxn - t), side="right"))
        idx = order[:active]
        r = reg[:active]
        r = S0[r & 0xFF] ^ S1[(r >> 8) & 0xFF] ^ S2[(r >> 16) & 0xFF] ^ S3[r >> 24]
        lane = first[idx] + (t - (maxn - nl_sorted[:active]))
        reg[:active] = r ^ c[lane]
    out = np.empty(n, np.uint32)
    out[order] = reg ^ np.uint32(0xFFFFFFFF)
    return out


def native_crc32c():
    """The engine's CRC32C (SSE4.2) when the native extension is built, else None
    ($QUORUMLOG_SPARK_NUMPY_CRC forces the numpy lanes, for tests)."""
    if os.environ.get("QUORUMLOG_SPARK_NUMPY_CRC"):
        return None
    try:
        from ..commitlog import crc32c
    except ImportError:
        return None
    return crc32c


def crc_records(region: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC32C per record: the native function in a loop when it is built (one C call per
    record beats 64 numpy passes), else crc32c_many -- same results, tested both ways."""
    native = native_crc32c()
    if native is None:
        return crc32c_many(region, starts, lengths)
    mv = memoryview(region)
    return np.fromiter((native(mv[s:s + n]) for s, n in zip(starts.tolist(), lengths.tolist())),
                       np.uint32, len(starts))
