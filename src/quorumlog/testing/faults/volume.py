"""DiskVolume: a small file system of its own for the full-disk victim's data directory
(tmpfs, else a loop-mounted ext4 image)."""
from __future__ import annotations

import os
import subprocess


class DiskVolume:
    """A small file system of its own for one node's data directory: tmpfs, else a
    loop-mounted ext4 image. `reason` says why neither could be mounted."""

    def __init__(self, path: str, size_mb: int):
        self.path = path
        self.size_mb = size_mb
        self.kind = None
        self.image = None
        self.reason = None

    def mount(self) -> bool:
        os.makedirs(self.path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs",
                            self.path], capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            self.kind = "tmpfs"
            return True
        why = f"tmpfs: {r.stderr.strip() or r.returncode}"
        self.image = self.path.rstrip("/") + ".img"
        try:
            with open(self.image, "wb") as fh:
                fh.truncate(self.size_mb << 20)
            r = subprocess.run(["mkfs.ext4", "-q", "-F", self.image], capture_output=True,
                               text=True, timeout=60)
            if r.returncode == 0:
                r = subprocess.run(["mount", "-o", "loop", self.image, self.path],
                                   capture_output=True, text=True, timeout=30)
                if r.returncode == 0:
                    self.kind = "ext4-loop"
                    return True
            why += f"; loop ext4: {r.stderr.strip() or r.returncode}"
        except (OSError, subprocess.SubprocessError) as e:
            why += f"; loop ext4: {e}"
        self.reason = why
        return False

    def unmount(self) -> None:
        if self.kind is None:
            return
        r = subprocess.run(["umount", self.path], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=60)
        if self.image and os.path.exists(self.image):
            os.unlink(self.image)
        self.kind = None
