"""The machine's own limits, measured in the same run as the workloads so results can be read as
ratios (absolute numbers on a shared VM mean little):

  memcpy_GBps                numpy copy of a large buffer (memory bandwidth, one core)
  page_cache_write_GBps      os.write of 4 MiB blocks into a new file (page cache only)
  fdatasync_p50_ms           small write + fdatasync, median (one durable commit on this disk)
  loopback_tcp_MBps          one Python socket stream over 127.0.0.1 (what replication rides)

Before measuring, `touch_memory` faults in a few GiB: on a fresh VM the first touch of guest
memory runs at ~0.4 GB/s and would swamp every figure; freed guest memory returns to the host
within seconds, so write phases call `touch_memory` again (sized to what they will write)
right before they start.
"""
from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np

MiB = 1 << 20
GiB = 1 << 30
_CHUNK = 256 * MiB
_PAGE = 4096


def touch_memory(nbytes: int) -> float:
    """Fault in `nbytes` of fresh memory, then free it; returns the seconds it took."""
    t = time.perf_counter()
    held = []
    left = nbytes
    try:
        while left > 0:
            a = np.empty(min(_CHUNK, left), dtype=np.uint8)
            a[::_PAGE] = 1          # one write per page faults it in
            held.append(a)
            left -= len(a)
    except MemoryError:
        pass
    del held
    return time.perf_counter() - t


def memcpy_GBps(nbytes: int, repeats: int = 5) -> float:
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)           # fault dst in before timing
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return nbytes / best / 1e9


def page_cache_write_GBps(directory: str, nbytes: int) -> float:
    """os.write of 4 MiB blocks into a new file; the file is removed afterwards."""
    buf = os.urandom(4 * MiB)
    blocks = max(1, nbytes // len(buf))
    path = os.path.join(directory, "ref-page-cache-write")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t = time.perf_counter()
        for _ in range(blocks):
            os.write(fd, buf)
        elapsed = time.perf_counter() - t
    finally:
        os.close(fd)
        os.unlink(path)
    return blocks * len(buf) / elapsed / 1e9


def fdatasync_ms(directory: str, samples: int) -> dict:
    """4 KiB write + fdatasync, `samples` times on one file: {p50_ms, p90_ms, samples}."""
    path = os.path.join(directory, "ref-fdatasync")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(4096)
    took = []
    try:
        for i in range(samples):
            t = time.perf_counter()
            os.pwrite(fd, block, i * len(block))
            os.fdatasync(fd)
            took.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    return {"p50_ms": float(np.percentile(took, 50)) * 1e3,
            "p90_ms": float(np.percentile(took, 90)) * 1e3, "samples": samples}


def loopback_tcp_MBps(nbytes: int) -> float:
    """One TCP stream over 127.0.0.1 between two threads of this process (1 MiB sends)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))             # a port from the OS
    srv.listen(1)
    srv.settimeout(10)
    received = [0]

    def sink():
        conn, _ = srv.accept()
        conn.settimeout(30)
        with conn:
            buf = bytearray(MiB)
            while received[0] < nbytes:
                n = conn.recv_into(buf)
                if not n:
                    break
                received[0] += n

    th = threading.Thread(target=sink, name="bench-tcp-sink", daemon=True)
    th.start()
    payload = memoryview(os.urandom(MiB))
    try:
        with socket.create_connection(srv.getsockname(), timeout=10) as c:
            c.settimeout(30)
            t = time.perf_counter()
            sent = 0
            while sent < nbytes:
                c.sendall(payload)
                sent += len(payload)
            th.join(60)
            elapsed = time.perf_counter() - t
    finally:
        srv.close()
    if th.is_alive() or received[0] < nbytes:
        raise RuntimeError(f"loopback TCP reference: {received[0]} of {nbytes} bytes arrived")
    return received[0] / elapsed / 1e6


def measure(directory: str, *, warm_bytes: int, quick: bool) -> dict:
    """All references (the `references` object of the JSON document)."""
    warm_s = touch_memory(warm_bytes) if warm_bytes else 0.0
    scale = 8 if quick else 1
    fsync = fdatasync_ms(directory, 20 if quick else 100)
    return {
        "warm_bytes": warm_bytes,
        "warm_seconds": warm_s,
        "memcpy_GBps": memcpy_GBps(256 * MiB // scale),
        "page_cache_write_GBps": page_cache_write_GBps(directory, GiB // scale),
        "fdatasync_p50_ms": fsync["p50_ms"],
        "fdatasync_p90_ms": fsync["p90_ms"],
        "loopback_tcp_MBps": loopback_tcp_MBps(GiB // scale),
    }
