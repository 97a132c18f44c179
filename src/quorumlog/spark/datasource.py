"""The Python fallback reader: a Spark 4 Python Data Source, spark.read.format("quorumlog"),
whose partitions are plan_splits' splits and whose reader yields scan_split's batches as
Arrow (needs pyspark and pyarrow, the [spark] extra)."""
from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..errors import InvalidArgumentError
from .arrow import to_arrow
from .scan import scan_split
from .schema import spark_schema
from .session import PY_SOURCE_NAME
from .splits import DEFAULT_SPLIT_BYTES, Split, plan_splits
from .store_meta import StoreSnapshot, open_store


class _Partition(InputPartition):
    def __init__(self, split: Split):
        super().__init__(split)
        self.split = split


class _Reader(DataSourceReader):
    def __init__(self, options, stores: list[StoreSnapshot]):
        opts = {k.lower(): v for k, v in options.items()}
        self.stores = stores
        self.committed_only = opts.get("committedonly", "true").lower() != "false"
        self.split_bytes = int(opts.get("splitbytes", DEFAULT_SPLIT_BYTES))
        t = opts.get("topics")
        self.topics = None if t is None else ([] if t == "" else t.split("/"))
        self.on_corrupt = opts.get("oncorrupt", "fail")

    def partitions(self):
        return [_Partition(s) for store in self.stores for s in plan_splits(
            store, committed_only=self.committed_only, split_bytes=self.split_bytes)]

    def read(self, partition):
        split = getattr(partition, "split", None)
        if split is None:  # Spark asks for one partition even when we planned none
            return
        for cols in scan_split(split, topics=self.topics, on_corrupt=self.on_corrupt):
            yield to_arrow(cols)


class QuorumlogDataSource(DataSource):
    """spark.read.format("quorumlog").load(store_dir): the numpy/Arrow fallback reader.

    The store is checked and its checkpoint read when the DataFrame is created (load): a
    missing path or a directory that is not a store fails there, as Spark's file sources do."""

    def __init__(self, options):
        super().__init__(options)
        path = {k.lower(): v for k, v in options.items()}.get("path")
        if not path:
            raise InvalidArgumentError("quorumlog: no store path given (load(path))")
        self.stores = [open_store(path)]

    @classmethod
    def name(cls):
        return PY_SOURCE_NAME

    def schema(self):
        return spark_schema()

    def reader(self, schema):
        return _Reader(self.options, self.stores)
