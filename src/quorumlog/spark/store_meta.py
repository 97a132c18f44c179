"""What a reader needs to know about a store directory before reading records: that it is
one, its checkpoint and its numbered segment / raft-index files (StoreMeta.java on the JVM).
Read-only: a broker may have the store open."""
from __future__ import annotations

import dataclasses
import os
import re
import urllib.parse

from .. import format as fmt
from ..errors import InvalidArgumentError

# What makes a directory a store: `quorumlog.open` / CommitLog create both at once. An empty
# directory is a store with nothing written yet (it reads as no rows).
STORE_MARKERS = ("checkpoint", "commitlog")
# A replica directory of many Raft groups (node/groups.py LAYOUT_FILE): groups/<g>/ stores.
GROUPS_LAYOUT = "groups.json"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def local_path(path: str) -> str:
    """A local filesystem path from `path` or a file: URI. The Python reader opens files with
    os calls, so any other scheme (hdfs://, s3a://, ...) is refused here, not read as a
    relative directory that does not exist."""
    m = _SCHEME.match(path)
    if m is None:
        return path
    if m.group(1).lower() != "file":
        raise InvalidArgumentError(
            f"quorumlog: the Python data source reads local paths only, not {path!r}; "
            "the JVM reader (quorumlog-spark.jar) reads any Hadoop FileSystem")
    u = urllib.parse.urlparse(path)
    if u.netloc not in ("", "localhost"):
        raise InvalidArgumentError(f"quorumlog: {path!r} names another host")
    return urllib.parse.unquote(u.path)


def check_store(path: str) -> None:
    """Raises unless path is a store directory: FileNotFoundError "[PATH_NOT_FOUND]" (the
    error Spark's file sources give) when nothing is there, InvalidArgumentError "not a
    quorumlog store" for a file or a directory holding neither checkpoint nor commitlog/."""
    uri = "file:" + os.path.abspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"[PATH_NOT_FOUND] Path does not exist: {uri}.")
    if not os.path.isdir(path):
        raise InvalidArgumentError(f"quorumlog: not a quorumlog store: {uri} (a file, not a "
                                   "store directory)")
    names = os.listdir(path)
    check_not_groups(path)
    if names and not any(m in names for m in STORE_MARKERS):
        raise InvalidArgumentError(
            f"quorumlog: not a quorumlog store: {uri} (no {' or '.join(STORE_MARKERS)})")


def check_not_groups(path: str) -> None:
    """InvalidArgumentError for a replica directory of many Raft groups (groups.json and no
    store of its own): the JVM reader reads those (a `group` column), this one does not."""
    if (os.path.isfile(os.path.join(path, GROUPS_LAYOUT))
            and not any(os.path.exists(os.path.join(path, m)) for m in STORE_MARKERS)):
        uri = "file:" + os.path.abspath(path)
        raise InvalidArgumentError(
            f"quorumlog: {uri} is a directory of many Raft groups ({GROUPS_LAYOUT}): the "
            "Python data source reads single-group stores only; read it with the JVM reader "
            f"(quorumlog-spark.jar: one DataFrame with a `group` column) or read one group's "
            f"store, {uri}/groups/<g>")


@dataclasses.dataclass(frozen=True)
class StoreSnapshot:
    """A store's checkpoint read once: every scan planned from it reads the same committed
    prefix however much a writer appends in the meantime."""
    root: str
    checkpoint: fmt.Checkpoint | None

    @property
    def committed_position(self) -> int:
        return self.checkpoint.committed_position if self.checkpoint is not None else 0

    @property
    def index_file_entries(self) -> int:
        return self.checkpoint.index_file_entries if self.checkpoint is not None else 0


def open_store(path) -> StoreSnapshot:
    """check_store + read_checkpoint of a local path or file: URI."""
    root = local_path(os.fspath(path))
    check_store(root)
    return StoreSnapshot(root, read_checkpoint(root))


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
