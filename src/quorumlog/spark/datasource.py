"""The Python fallback reader: a Spark 4 Python Data Source, spark.read.format("quorumlog"),
whose partitions are plan_splits' splits and whose reader yields scan_split's batches as
Arrow (needs pyspark and pyarrow, the [spark] extra)."""
from __future__ import annotations

import json

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..errors import InvalidArgumentError
from .arrow import to_arrow
from .scan import scan_split
from .schema import spark_schema
from .names import PY_SOURCE_ALIAS, PY_SOURCE_NAME
from .filters import pushable, row_filter
from .splits import DEFAULT_SPLIT_BYTES, Split, plan_splits, prune_by_store_ts
from .store_meta import StoreSnapshot, open_store


def store_paths(options) -> list[str]:
    """The store paths of a load: "path" (load(p)) and/or "paths" (load([p1, p2, ...]):
    Spark passes them as a JSON array), as QuorumlogSource.storeRoots reads them."""
    opts = {k.lower(): v for k, v in options.items()}
    out = [opts["path"]] if opts.get("path") else []
    if opts.get("paths"):
        paths = json.loads(opts["paths"])
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise InvalidArgumentError(f"quorumlog: option 'paths' is not a JSON array of "
                                       f"strings: {opts['paths']!r}")
        out += paths
    if not out:
        raise InvalidArgumentError("quorumlog: no store path given (load(path))")
    return out


class _Partition(InputPartition):
    def __init__(self, split: Split):
        super().__init__(split)
        self.split = split


class _Reader(DataSourceReader):
    """Plans the splits of every store of the load and scans one split per partition."""

    def __init__(self, options, stores: list[StoreSnapshot]):
        opts = {k.lower(): v for k, v in options.items()}
        self.stores = stores
        self.committed_only = opts.get("committedonly", "true").lower() != "false"
        self.split_bytes = int(opts.get("splitbytes", DEFAULT_SPLIT_BYTES))
        t = opts.get("topics")
        self.rows = row_filter(None if t is None else ([] if t == "" else t.split("/")))
        self.on_corrupt = opts.get("oncorrupt", "fail")

    def partitions(self):
        splits = [s for store in self.stores for s in plan_splits(
            store, committed_only=self.committed_only, split_bytes=self.split_bytes)]
        return [_Partition(s) for s in prune_by_store_ts(splits, self.rows)]

    def read(self, partition):
        split = getattr(partition, "split", None)
        if split is None:  # Spark asks for one partition even when we planned none
            return
        for cols in scan_split(split, row_filter=self.rows, on_corrupt=self.on_corrupt):
            yield to_arrow(cols)


class _PushdownReader(_Reader):
    """_Reader that also takes the filters Spark pushes down (topic, queue_id and
    store_timestamp compared with constants; the rest stays with Spark): they drop records
    before any column is built and, for store_timestamp, whole splits. Every filter is also
    returned to Spark, which evaluates it again on the rows that are left."""

    def pushFilters(self, filters):
        self.rows = self.rows.narrowed(f for f in filters if pushable(f))
        return filters


class QuorumlogDataSource(DataSource):
    """spark.read.format("quorumlog").load(store_dir): the numpy/Arrow fallback reader.

    The store is checked and its checkpoint read when the DataFrame is created (load): a
    missing path or a directory that is not a store fails there, as Spark's file sources do."""

    def __init__(self, options):
        super().__init__(options)
        self.stores = [open_store(p) for p in store_paths(options)]

    @classmethod
    def name(cls):
        return PY_SOURCE_NAME

    def schema(self):
        return spark_schema()

    def reader(self, schema):
        # Filters are pushed only with option pushdown=true (read_store sets it where that is
        # safe, see session.python_pushdown_safe): Spark fails a reader that defines
        # pushFilters when spark.sql.python.filterPushdown.enabled is off, and some Spark
        # versions reuse a filtered reader for other scans of the same DataFrame.
        pushdown = {k.lower(): v for k, v in self.options.items()}.get("pushdown", "false")
        cls = _PushdownReader if pushdown.lower() == "true" else _Reader
        return cls(self.options, self.stores)


class QuorumlogPythonSource(QuorumlogDataSource):
    """The Python reader under its own name: "quorumlog" is the JVM source's when the jar is
    on the classpath (Spark refuses a second source of the same name)."""

    @classmethod
    def name(cls):
        return PY_SOURCE_ALIAS
