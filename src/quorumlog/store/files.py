"""Small file helpers of the store: atomic replacement of a metadata file."""
from __future__ import annotations

import os


def atomic_write(path: str, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new file, never a mix:
    write a temporary file, fsync it, rename it over `path`, fsync the directory."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
