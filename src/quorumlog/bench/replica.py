"""A replica as `quorumlog bench` starts it: `python -m quorumlog.bench.replica --stats-file F
<quorumlog serve arguments>` runs the unchanged replica server (`quorumlog serve`) and
adds one thing: on SIGUSR1 it writes its counters to F as JSON (atomically: a temporary file,
then rename). The benchmark asks before and after a measured phase and reports the difference
(flushes and appends per replica), so nothing is counted or written while it measures.

Counters written: the commit log's stats() (appends, records, bytes, flushes, ...), the
producer table's duplicate count (retried batches answered from the table), the Raft role and
commit index, and the pid.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys

from .. import server
from ..cli.node import serve_main

log = logging.getLogger(__name__)


def write_stats(node, path: str, siblings=()) -> None:
    """The node's counters -> `path` (JSON); with many groups per process (siblings: the
    other groups' Nodes) the commit-log counters and duplicates are the groups' sums."""
    cl = node.store.commitlog if node.store is not None else None
    doc = {"pid": os.getpid(), "node_id": node.id,
           "role": int(node.core.role) if node.core is not None else None,
           "commit_index": node.core.commit_index if node.core is not None else None,
           "commitlog": dict(cl.stats()) if cl is not None else None,
           "duplicates": node.stats["duplicates"]}
    for other in siblings:
        if other is node or other.store is None or doc["commitlog"] is None:
            continue
        for k, v in other.store.commitlog.stats().items():
            if isinstance(v, int) and isinstance(doc["commitlog"].get(k), int):
                doc["commitlog"][k] += v
        doc["duplicates"] += other.stats["duplicates"]
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def _stats_node_class(path: str):
    started = []        # every group's Node of this process (the last handler sums them)

    class StatsNode(server.Node):
        """The server's Node with a SIGUSR1 handler that writes its counters."""

        async def start(self):
            await super().start()
            started.append(self)

            def dump():
                try:
                    write_stats(self, path, started)
                except Exception:  # noqa: BLE001 -- a failed dump must not stop the replica
                    log.exception("bench replica: writing %s failed", path)
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump)
    return StatsNode


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] != "--stats-file":
        print("usage: python -m quorumlog.bench.replica --stats-file FILE <server arguments>",
              file=sys.stderr)
        return 2
    path, rest = argv[1], argv[2:]
    # run_server builds its Node from the module's name: this process serves with StatsNode
    server.Node = _stats_node_class(os.path.abspath(path))
    return serve_main(rest)


if __name__ == "__main__":
    sys.exit(main())
