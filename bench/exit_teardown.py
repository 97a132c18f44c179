"""SIGKILL -> EOF on a socket the killed process held, against how much file mapping it had
touched (issue 20's failover `lost` phase): the kernel tears an exiting process's memory down
(exit_mm) before it closes its files (exit_files), so a peer sees the connection close only
after the unmapping. A child maps a fresh fallocated file of GIB GiB and writes every page
(dirty, as a writer's mapping) or only reads it (--read), then is killed.

    python bench/exit_teardown.py [--read] GIB [GIB ...]
"""
import mmap
import os
import signal
import socket
import sys
import tempfile
import time


def one(gib: float, write: bool) -> float:
    size = int(gib * (1 << 30))
    fd_file, path = tempfile.mkstemp(dir=os.environ.get("TMPDIR", "/tmp"))
    a, b = socket.socketpair()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                          # the child: map, touch, report, wait to be killed
        a.close()
        os.close(r)
        if size:
            os.posix_fallocate(fd_file, 0, size)
            m = mmap.mmap(fd_file, size)
            for off in range(0, size, 4096):
                if write:
                    m[off] = 1
                else:
                    m[off]
        os.write(w, b"x")
        time.sleep(3600)
        os._exit(0)
    try:
        os.close(w)
        b.close()
        os.read(r, 1)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        a.recv(1)
        return time.monotonic() - t0
    finally:
        os.waitpid(pid, 0)
        os.close(fd_file)
        os.unlink(path)


if __name__ == "__main__":
    write = "--read" not in sys.argv
    for g in (float(x) for x in sys.argv[1:] if x != "--read"):
        print(f"{g:g} GiB {'written' if write else 'read'}: SIGKILL -> EOF "
              f"{1e3 * one(g, write):.1f} ms", flush=True)
