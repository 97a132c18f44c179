"""Flood a 3-replica group of real processes under load: `python -m quorumlog.testing.flood`.

Three denial-of-service floods, one after the other, each for `--duration` seconds, while
producers keep writing (`make flood`; docs/reliability.md has the figures); the log lines
each one costs are counted too:

  none        no flood: the control, the same measurements with the load alone
  clients     1,100 authenticated client connections held open on the leader
  frames      40 authenticated clients announce a 16 MiB produce frame, send 1 MiB, stall
              (and reconnect when dropped)
  handshake   100 connections per flooded port sending 1 byte/s (reconnecting when closed)
              on every replica's peer port and the leader's client port

During each flood the harness restarts a follower (kill -9, start) and times its rejoin
(ready -> it follows the leader and has the leader's commit index), times 5 new clients
(connect + a status request, one after the other), samples the leader's RSS and counts the
lines its log grew by (item 4: refusals are rate-limited into summaries). It reports, per
flood: acknowledgements per second (min over 1-s windows, total) and the longest gap
between two acknowledgements, rejoin time, the 5 connect times, RSS growth, log growth, and
from the three replicas' logs the event-loop stalls (> 250 ms: count, longest) and the
elections won while it lasted.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing as mp
import os
import re
import resource
import shutil
import sys
import tempfile
import time

from ..client import AsyncClient
from ..localcluster import LocalCluster
from ..net import codec
from ..net import messages as m
from ..net.auth import AuthConfig, Handshake
from ..net.framing import encode_header
from ..net.transport import connect_client

FLOODS = ("none", "clients", "frames", "handshake")   # none: the control (load alone)


def rss_bytes(pid: int, field: str = "RssAnon") -> int:
    """Resident bytes of the process: RssAnon (default) is its heap and stacks -- what a
    flood can grow; VmRSS also counts the commit log's mapped file pages, which the load's
    writes grow whatever the flood does."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def log_lines(path: str) -> int:
    with open(path, "rb") as fh:
        return sum(1 for _ in fh)


_STALL = re.compile(rb"event loop stalled for (\d+) ms")


def log_sizes(c: LocalCluster) -> dict:
    return {n: os.path.getsize(c.log_file(n)) if os.path.exists(c.log_file(n)) else 0
            for n in c.ids}


def log_events(c: LocalCluster, since: dict) -> dict:
    """What the replicas' logs say since `since` (log_sizes): event-loop stalls (count, the
    longest in ms) and elections won."""
    stalls, elections = [], 0
    for n in c.ids:
        try:
            with open(c.log_file(n), "rb") as fh:
                fh.seek(since.get(n, 0))
                text = fh.read()
        except OSError:
            continue
        stalls += [int(x) for x in _STALL.findall(text)]
        elections += text.count(b": LEADER in term")
    return {"loop_stalls": len(stalls), "longest_stall_ms": max(stalls, default=0),
            "elections": elections}


def _hostport(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


class Load:
    """Idempotent producers writing all the time; the time of every acknowledgement."""

    def __init__(self, addresses, secret, workers: int = 4):
        self.client = AsyncClient(addresses, secret=secret, retry_timeout=60)
        self.acks: list[float] = []
        self.errors = 0
        self.workers = workers
        self._stop = False

    async def run(self) -> None:
        await asyncio.gather(*(self._worker(i) for i in range(self.workers)))

    async def _worker(self, i: int) -> None:
        body = [b"m" * 100] * 8
        while not self._stop:
            try:
                await self.client.produce("flood", body)
                self.acks.append(time.monotonic())
            except Exception:   # noqa: BLE001 -- counted and reported: the load goes on
                self.errors += 1
                await asyncio.sleep(0.05)

    def stop(self) -> None:
        self._stop = True

    def window(self, t0: float, t1: float) -> dict:
        acks = [t for t in self.acks if t0 <= t < t1]
        per_s = [0] * max(1, int(t1 - t0))
        for t in acks:
            per_s[min(len(per_s) - 1, int(t - t0))] += 1
        gaps = [(b - a, a - t0) for a, b in zip([t0] + acks, acks + [t1])]
        gap, at = max(gaps)
        return {"acks": len(acks), "min_acks_per_s": min(per_s), "max_gap_s": round(gap, 3),
                "max_gap_at_s": round(at, 1)}


# -- the floods ----------------------------------------------------------------------------------

async def _hold_clients(addr, secret, n, stop: asyncio.Event, stats: dict) -> None:
    chans = []
    try:
        for i in range(n):
            if stop.is_set():
                break
            try:
                chans.append(await connect_client(*addr, AuthConfig("quorumlog", f"fl{i}",
                                                                    secret), timeout=5))
            except Exception as e:   # noqa: BLE001 -- the refusals are what we count
                stats[type(e).__name__] = stats.get(type(e).__name__, 0) + 1
        stats["held"] = len(chans)
        await stop.wait()
    finally:
        for ch in chans:
            await ch.close()


async def _stalled_frames(addr, secret, n, stop: asyncio.Event, stats: dict) -> None:
    async def one(i):
        while not stop.is_set():
            try:
                r, w = await asyncio.open_connection(*addr)
                hs = Handshake.initiator(AuthConfig("quorumlog", f"st{i}", secret), None,
                                         role=m.Role.CLIENT)
                dec_buf = b""
                w.write(_encode(hs.start()[0]))
                while not hs.done:
                    data = await asyncio.wait_for(r.read(4096), 5)
                    if not data:
                        raise ConnectionError("closed")
                    dec_buf += data
                    msg, dec_buf = _take_msg(dec_buf)
                    if msg is not None:
                        for out in hs.receive(msg):
                            w.write(_encode(out))
                w.write(encode_header(0x40, 16 << 20, 1) + b"\0" * (1 << 20))
                stats["sent"] = stats.get("sent", 0) + 1
                while not stop.is_set() and await _alive(r):
                    pass
                stats["dropped"] = stats.get("dropped", 0) + (0 if stop.is_set() else 1)
                w.close()
            except Exception:   # noqa: BLE001 -- refused: try again
                stats["refused"] = stats.get("refused", 0) + 1
                await asyncio.sleep(0.2)
    await asyncio.gather(*(one(i) for i in range(n)))


def _encode(msg) -> bytes:
    return b"".join(bytes(p) for p in codec.encode(msg))


def _take_msg(buf: bytes):
    if len(buf) < 24:
        return None, buf
    n = int.from_bytes(buf[16:20], "little")
    if len(buf) < 24 + n:
        return None, buf
    return codec.decode(buf[3], buf[24:24 + n]), buf[24 + n:]


async def _alive(r) -> bool:
    try:
        return bool(await asyncio.wait_for(r.read(4096), 0.5)) or not r.at_eof()
    except TimeoutError:
        return True
    except OSError:
        return False


async def _slow_bytes(addrs, per_port, stop: asyncio.Event, stats: dict) -> None:
    async def one(addr):
        while not stop.is_set():
            try:
                r, w = await asyncio.open_connection(*addr)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            stats["opened"] = stats.get("opened", 0) + 1
            try:
                while not stop.is_set():
                    w.write(b"\x51")
                    if not await _alive(r):
                        break
                    await asyncio.sleep(0.5)
            except OSError:
                pass
            finally:
                w.close()
    await asyncio.gather(*(one(a) for a in addrs for _ in range(per_port)))


def _flood_process(kind: str, client_addr, peer_addrs, secret, stop_evt, out) -> None:
    """The attacker, in a process of its own (its CPU is not the load generator's)."""
    logging.getLogger("quorumlog.net").setLevel(logging.ERROR)
    _raise_fd_limit()

    async def main():
        stop, stats = asyncio.Event(), {}
        if kind == "clients":
            coro = _hold_clients(client_addr, secret, 1100, stop, stats)
        elif kind == "frames":
            coro = _stalled_frames(client_addr, secret, 40, stop, stats)
        elif kind == "none":
            coro = stop.wait()
        else:
            coro = _slow_bytes(list(peer_addrs) + [client_addr], 100, stop, stats)
        task = asyncio.get_running_loop().create_task(coro)
        while not stop_evt.is_set():
            await asyncio.sleep(0.2)
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        out.put(stats)
    asyncio.run(main())


def _start_flood(kind: str, c: LocalCluster, leader: str):
    ctx = mp.get_context("spawn")
    stop_evt, out = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=_flood_process, args=(
        kind, _hostport(c.clients[leader]), [_hostport(c.peers[n]) for n in c.ids],
        c.secret(), stop_evt, out), daemon=True)
    p.start()
    return p, stop_evt, out


async def _rejoin_seconds(c: LocalCluster, follower: str, leader: str, timeout=30.0):
    """kill -9 the follower, start it; seconds from its listeners being up until it follows
    a leader with the leader's commit index at the kill (None: not within `timeout`). (A
    leader, not necessarily `leader`: an election may happen meanwhile.)"""
    await asyncio.to_thread(c.kill, follower)
    probe = AsyncClient(c.client_addresses(), secret=c.secret(), request_timeout=1,
                        retry_timeout=1)
    try:
        try:
            target = (await probe.status(c.clients[leader])).commit_index
        except Exception as e:   # noqa: BLE001 -- the flood keeps us from the leader: say so
            c.start_node(follower)
            return f"leader unreachable ({type(e).__name__})"
        c.start_node(follower)
        await asyncio.to_thread(c.wait_started, 60, [follower])
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                st = await probe.status(c.clients[follower])
                if st.leader_id not in (None, follower) and st.commit_index >= target:
                    return round(time.monotonic() - t0, 3)
            except Exception:   # noqa: BLE001 -- not up yet
                pass
            await asyncio.sleep(0.02)
        return None
    finally:
        await probe.close()


async def _new_clients(c: LocalCluster, leader: str, n: int = 5) -> list:
    """Seconds for each of n new clients to connect to the leader and get a status answer
    (the error's class name if it failed)."""
    out = []
    for _ in range(n):
        cl = AsyncClient([c.clients[leader]], secret=c.secret(), request_timeout=5,
                         retry_timeout=5, connect_timeout=5)
        t0 = time.monotonic()
        try:
            await cl.status()
            out.append(round(time.monotonic() - t0, 3))
        except Exception as e:   # noqa: BLE001 -- reported
            out.append(type(e).__name__)
        finally:
            await cl.close()
    return out


async def run_flood(c: LocalCluster, kind: str, duration: float, load: Load) -> dict:
    leader = await asyncio.to_thread(c.wait_leader, 30)
    follower = next(n for n in c.ids if n != leader)
    pid = c.pid(leader)
    rss0, lines0 = rss_bytes(pid), log_lines(c.log_file(leader))
    vm0 = vm_max = rss_bytes(pid, "VmRSS")
    sizes0 = log_sizes(c)
    proc, stop_evt, out = _start_flood(kind, c, leader)
    t0 = time.monotonic()
    rss_max, rejoin, clients = rss0, None, None
    # (the new clients are timed after 10 s: the flood's connections are idle by then)
    try:
        while time.monotonic() - t0 < duration:
            await asyncio.sleep(0.5)
            rss_max = max(rss_max, rss_bytes(pid))
            vm_max = max(vm_max, rss_bytes(pid, "VmRSS"))
            elapsed = time.monotonic() - t0
            if clients is None and elapsed >= min(10.0, duration / 3):
                clients = await _new_clients(c, leader)
            if rejoin is None and elapsed >= min(20.0, duration / 2):
                rejoin = await _rejoin_seconds(c, follower, leader) or "no rejoin"
    finally:
        stop_evt.set()
        try:
            stats = await asyncio.to_thread(out.get, True, 30)
        except Exception:   # noqa: BLE001 -- the attacker died: its stats are lost
            stats = {}
        await asyncio.to_thread(proc.join, 10)
        if proc.is_alive():
            proc.kill()
    t1 = time.monotonic()
    return {"flood": kind, "duration_s": round(t1 - t0, 1), "leader": leader,
            **load.window(t0, t1), "rejoin_s": rejoin, "new_clients_s": clients,
            "rss_growth_mib": round((rss_max - rss0) / (1 << 20), 1),
            "vmrss_growth_mib": round((vm_max - vm0) / (1 << 20), 1),
            "log_lines": log_lines(c.log_file(leader)) - lines0, **log_events(c, sizes0),
            "flood_stats": stats}


async def _main_async(args) -> list:
    # a directory of our own (no --dir) is removed at the end: 3 replicas preallocate GiBs
    own = None if args.dir else tempfile.mkdtemp(prefix="qflood-")
    c = LocalCluster(args.dir or own, 3, flush="async")
    results = []
    try:
        c.start()
        await asyncio.to_thread(c.wait_started, 60)
        await asyncio.to_thread(c.wait_leader, 30)
        load = Load(c.client_addresses(), c.secret())
        lt = asyncio.get_running_loop().create_task(load.run())
        try:
            for kind in args.floods:
                r = await run_flood(c, kind, args.duration, load)
                print(json.dumps(r), flush=True)
                results.append(r)
                await asyncio.sleep(args.pause)
        finally:
            load.stop()
            await asyncio.wait_for(asyncio.gather(lt, return_exceptions=True), 60)
            await load.client.close()
    finally:
        c.kill_all()
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
    return results


def _raise_fd_limit() -> None:
    """1,100 client sockets here, as many on the leader (which inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(hard, 8192):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m quorumlog.testing.flood",
                                description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=180.0, help="seconds per flood")
    p.add_argument("--floods", nargs="+", choices=FLOODS, default=list(FLOODS))
    p.add_argument("--pause", type=float, default=5.0, help="seconds between floods")
    p.add_argument("--dir", help="the cluster's directory (default: a new temporary one)")
    args = p.parse_args(argv)
    _raise_fd_limit()
    # the flood's own refused connections are expected: the harness reports their counts
    logging.getLogger("quorumlog.net").setLevel(logging.ERROR)
    results = asyncio.run(_main_async(args))
    ok = True
    print(f"{'flood':10} {'s':>6} {'acks':>7} {'min/s':>6} {'gap s':>6} {'rejoin s':>8} "
          f"{'RSS+ MiB':>8} {'log+':>5} {'stalls':>6} {'max ms':>6} {'elect':>5}  "
          f"new clients (s)")
    for r in results:
        print(f"{r['flood']:10} {r['duration_s']:6} {r['acks']:7} {r['min_acks_per_s']:6} "
              f"{r['max_gap_s']:6} {str(r['rejoin_s']):>8} {r['rss_growth_mib']:8} "
              f"{r['log_lines']:5} {r['loop_stalls']:6} {r['longest_stall_ms']:6} "
              f"{r['elections']:5}  {r['new_clients_s']}")
        ok &= (isinstance(r["rejoin_s"], float) and r["rejoin_s"] < 2
               and r["rss_growth_mib"] < 64 and r["log_lines"] < 200 and r["min_acks_per_s"] > 0
               and all(isinstance(x, float) and x < 1 for x in r["new_clients_s"] or ["x"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
