"""read_store, the public entry point: checks its arguments, then builds the DataFrame with
the JVM reader (QuorumlogSpark.readStore through py4j) or the Python data source."""
from __future__ import annotations

import json
import os
from typing import Sequence

from .. import format as fmt
from ..errors import InvalidArgumentError
from .session import (PY_SOURCE_ALIAS, PYTHON_PUSHDOWN_CONF, jvm_entry,
                      jvm_reader_available, python_pushdown_safe, register)
from .splits import DEFAULT_SPLIT_BYTES
from .store_meta import check_not_groups, local_path


def _check_topics(topics) -> list[str] | None:
    if topics is None:
        return None
    if isinstance(topics, (str, bytes)):
        raise InvalidArgumentError("topics must be a sequence of topic names, not one string")
    out = []
    for t in topics:
        fmt.check_topic_name(t)       # InvalidTopicError naming the rule it breaks
        out.append(t)
    return out


def _check_paths(path) -> list[str]:
    if isinstance(path, (str, bytes, os.PathLike)):
        return [os.fsdecode(path)]
    paths = [os.fsdecode(p) for p in path]
    if not paths:
        raise InvalidArgumentError("no store path given")
    return paths


def read_store(spark, path, *, topics: Sequence[str] | None = None, committed_only: bool = True,
               split_bytes: int | None = None, on_corrupt: str = "fail", engine: str = "auto"):
    """DataFrame of the MESSAGE records of the store at `path` (or of every store in a
    list of paths), in log order per split. A replica directory of many Raft groups
    (groups.json + groups/<g>/) reads as its group stores, each to its own committed
    position, with a `group` int column last (JVM reader only; spark/README.md).

    topics: only these topics (filtered inside the reader). committed_only: stop at the
    checkpoint's committed position (False: read to the end of the intact log).
    split_bytes: bytes of segment per Spark partition (default 32 MiB). on_corrupt: "fail"
    (default; CorruptLogError / a failed task naming file and offset) or "skip".
    engine: "jvm", "python" or "auto" (the jar's reader when the session has it)."""
    topics = _check_topics(topics)
    if on_corrupt not in ("fail", "skip"):
        raise InvalidArgumentError("on_corrupt must be 'fail' or 'skip'")
    if engine not in ("auto", "jvm", "python"):
        raise InvalidArgumentError("engine must be 'auto', 'jvm' or 'python'")
    if split_bytes is not None and (not isinstance(split_bytes, int) or split_bytes <= 0):
        raise InvalidArgumentError("split_bytes must be a positive int")
    paths = _check_paths(path)
    use_jvm = engine == "jvm" or (engine == "auto" and jvm_reader_available(spark))
    if use_jvm:
        return _read_jvm(spark, paths, topics, committed_only, split_bytes, on_corrupt)
    for p in paths:                 # (here: Spark would wrap the error in its own)
        try:
            local = local_path(p)
        except InvalidArgumentError:
            continue                # the data source refuses the scheme, naming it
        check_not_groups(local)
    register(spark)
    r = (spark.read.format(PY_SOURCE_ALIAS)
         .option("committedOnly", str(bool(committed_only)).lower())
         .option("splitBytes", str(int(split_bytes or DEFAULT_SPLIT_BYTES)))
         .option("onCorrupt", on_corrupt)
         .option("pushdown", str(_python_pushdown(spark)).lower()))
    if topics is not None:
        r = r.option("topics", "/".join(topics))
    return r.load(paths if len(paths) > 1 else paths[0])


def _python_pushdown(spark) -> bool:
    """Push filters into the Python reader where Spark lets that be correct; Spark calls a
    reader's pushFilters only with spark.sql.python.filterPushdown.enabled, so it is turned
    on then unless the session turned it off."""
    if not python_pushdown_safe(spark):
        return False
    conf = spark.conf.get(PYTHON_PUSHDOWN_CONF, None)
    if conf is None:
        spark.conf.set(PYTHON_PUSHDOWN_CONF, "true")
        return True
    return str(conf).lower() == "true"


def _read_jvm(spark, paths, topics, committed_only, split_bytes, on_corrupt):
    from pyspark.sql import DataFrame

    read_stores_json = jvm_entry(spark)
    if read_stores_json is None:
        raise InvalidArgumentError("engine='jvm': the session's JVM lacks quorumlog-spark.jar "
                                   "(start it with quorumlog.spark.session())")
    # one py4j call: paths as a JSON array, topics '/'-joined ('/' is no topic character)
    jdf = read_stores_json(spark._jsparkSession, json.dumps(paths),
                           None if topics is None else "/".join(topics), bool(committed_only),
                           int(split_bytes or DEFAULT_SPLIT_BYTES), on_corrupt)
    return DataFrame(jdf, spark)
