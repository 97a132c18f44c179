"""The floor under a replicated single message on this machine: what one hop costs with no
work of ours. Two processes ping-pong a SIZE-byte message over loopback TCP, each on a
uvloop event loop with a bare asyncio.Protocol (no framing, no codec, no Raft): every round
trip is two sends, two reads and two wake-ups of a sleeping process. Prints the round trip's
median latency and the CPU per round trip summed over both processes (user + system, from
/proc via os.times of each process).

    python bench/wake_floor.py [ROUNDS=20000] [SIZE=1100]

A single produce at window 1 makes three such round trips (client <-> leader, leader <->
each follower; the followers' overlap), i.e. about six wake-ups and six sends: quorumlog's
CPU per message and p50 sit on top of that floor (docs/benchmarks.md).
"""
import asyncio
import os
import socket
import statistics
import sys
import time

import uvloop


class _Echo(asyncio.Protocol):
    def __init__(self, size):
        self.size, self.got, self.t = size, 0, None

    def connection_made(self, transport):
        self.t = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data):
        self.got += len(data)
        while self.got >= self.size:
            self.got -= self.size
            self.t.write(b"x" * self.size)


def _serve(sock, size, ready_w):
    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Echo(size), sock=sock)
        os.write(ready_w, b"1")
        await asyncio.sleep(3600)
        server.close()
    uvloop.run(main())


class _Pinger(asyncio.Protocol):
    def __init__(self, size, rounds, done):
        self.size, self.left, self.done = size, rounds, done
        self.got, self.t, self.t0, self.lat = 0, None, 0, []

    def connection_made(self, transport):
        self.t = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def ping(self):
        self.t0 = time.perf_counter_ns()
        self.t.write(b"y" * self.size)

    def data_received(self, data):
        self.got += len(data)
        if self.got < self.size:
            return
        self.got = 0
        self.lat.append(time.perf_counter_ns() - self.t0)
        self.left -= 1
        if self.left:
            self.ping()
        else:
            self.done.set_result(None)


def main(rounds: int, size: int) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            _serve(sock, size, w)
        finally:
            os._exit(0)
    try:
        os.read(r, 1)

        async def run():
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            _, p = await loop.create_connection(lambda: _Pinger(size, rounds, done),
                                                "127.0.0.1", port)
            for _ in range(200):            # warm-up, not counted
                p.left, p.done = 2, loop.create_future()
                p.ping()
                await p.done
            p.left, p.done, p.lat = rounds, done, []
            c0, s0 = os.times(), _cpu_of(pid)
            p.ping()
            await done
            c1, s1 = os.times(), _cpu_of(pid)
            cpu = (c1.user - c0.user + c1.system - c0.system) + (s1 - s0)
            print(f"{rounds} round trips of {size} B: p50 {statistics.median(p.lat) / 1e3:.1f} "
                  f"µs, CPU per round trip {cpu / rounds * 1e6:.1f} µs (both processes; "
                  f"load {os.getloadavg()[0]:.1f})")
        uvloop.run(run())
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def _cpu_of(pid: int) -> float:
    """User + system seconds of process pid (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[0]) if a else 20000, int(a[1]) if len(a) > 1 else 1100)
