"""What a reader needs to know about a store directory before reading records: its
checkpoint and its numbered segment / raft-index files (StoreMeta.java on the JVM).
Read-only: a broker may have the store open."""
from __future__ import annotations

import os

from .. import format as fmt


def read_checkpoint(root: str) -> fmt.Checkpoint | None:
    """The store's checkpoint (CRC-checked by the reference codec); None when it has none."""
    p = os.path.join(root, "checkpoint")
    try:
        with open(p, "rb") as f:
            data = f.read(fmt.CHECKPOINT_SIZE + 1)
    except FileNotFoundError:
        return None
    return fmt.decode_checkpoint(data, path=p)


def numbered(dirpath: str) -> list[int]:
    """Sorted numbers of the segment / raft-index files in dirpath (other names ignored)."""
    try:
        names = os.listdir(dirpath)
    except FileNotFoundError:
        return []
    return sorted(n for n in map(fmt.parse_file_name, names) if n is not None)
