"""read_store over a replica directory of many Raft groups (issue 19): <dir>/groups.json +
<dir>/groups/<g>/, written here by a real NodeHost (3 groups, one member) fed by the client
(which places (topic, queue) on groups by node/groups.py group_of). One DataFrame with a
`group` column, each group's committed messages only (group 1 gets an uncommitted tail),
filters on `group` prune whole stores (EXPLAIN says which; the same rows as with
pushdown=false), and a single-group directory keeps today's schema."""
from __future__ import annotations

import asyncio
import os

import pytest

import _spark_stores as st
from quorumlog import format as fmt

GROUPS = 3
TOPICS = ("orders", "payments")
QUEUES = 4
PER_QUEUE = 30
TAIL = 5          # messages appended to group 1 and never committed


def _jar_or_skip(spark):
    from quorumlog.spark.session import jvm_reader_available

    if not jvm_reader_available(spark):
        pytest.skip("the JVM reader (javac at install time) is needed")


async def _write_groups(root):
    from quorumlog.client import AsyncClient
    from quorumlog.localcluster import free_port
    from quorumlog.node import load_node_config
    from quorumlog.node.host import NodeHost
    from quorumlog.node.service import ClientService
    from quorumlog.raft.messages import Role

    peers = {"n1": f"127.0.0.1:{free_port()}"}
    clients = {"n1": f"127.0.0.1:{free_port()}"}
    cfg, rcfg, scfg = load_node_config(None, {}, node_id="n1", peers=peers, secret="s" * 16,
                                       client_addrs=clients, client_addr=clients["n1"],
                                       groups=GROUPS, store=dict(profile="small"),
                                       metrics_addr="127.0.0.1:0")
    host = NodeHost(root, cfg, rcfg, store_cfg=scfg)
    svc = None
    await host.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not all(n.role == Role.LEADER and n.ready_to_serve for n in host.nodes):
            assert loop.time() < deadline, "not every group elected its leader"
            await asyncio.sleep(0.01)
        svc = ClientService(host, host.cfg)
        await svc.start()
        async with AsyncClient([clients["n1"]], secret="s" * 16, groups=None,
                               retry_timeout=20) as c:
            for t in TOPICS:
                for q in range(QUEUES):
                    for b in range(3):
                        await c.produce(t, [b"%s-%d-%d-%d" % (t.encode(), q, b, i)
                                            for i in range(PER_QUEUE // 3)], queue_id=q,
                                        tags=f"tag{q % 2}")
    finally:
        if svc is not None:
            await svc.stop()
        await host.stop()


def _append_uncommitted(store):
    """TAIL more messages at the end of a group's log, its commit index left where it was."""
    from quorumlog.commitlog import CommitLog

    with open(os.path.join(store, "checkpoint"), "rb") as f:
        cp = fmt.decode_checkpoint(f.read())
    log = CommitLog(store, segment_size_bytes=cp.segment_size_bytes,
                    index_file_entries=cp.index_file_entries)
    try:
        term = 1
        for i in range(TAIL):
            log.append("orders", b"uncommitted-%d" % i, term=term, queue_id=0, queue_offset=10**6 + i)
    finally:
        log.close()


@pytest.fixture(scope="module")
def groups_dir(tmp_path_factory):
    if not st.have_message_store():
        pytest.skip("the native engine is needed to run a node")
    root = tmp_path_factory.mktemp("spark-groups") / "n1"
    asyncio.run(_write_groups(root))
    assert os.path.isfile(root / "groups.json")
    _append_uncommitted(str(root / "groups" / "1"))
    return str(root)


def _group_store(root, g):
    return os.path.join(root, "groups", str(g))


def _expected(root, g=None):
    """Each group's committed messages (reference decoder), with the group appended."""
    out = []
    for k in range(GROUPS) if g is None else [g]:
        out += [r + (k,) for r in st.expected_messages(_group_store(root, k))]
    return sorted(out, key=lambda r: (r[-1], r[3]))


def _rows(df):
    """st.canon_rows with the group last, sorted by (group, raft index); one collect."""
    from pyspark.sql import functions as F

    cols = [F.col(c) for c in ("topic", "queue_id", "queue_offset", "raft_index", "term",
                               "position")]
    cols += [F.unix_micros("born_timestamp"), F.unix_micros("store_timestamp"),
             F.col("tags"), F.col("keys"), F.col("properties"), F.col("body"), F.col("group")]
    out = [(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], tuple(r[9]),
            tuple(sorted(r[10].items())), bytes(r[11]), r[12]) for r in df.select(*cols).collect()]
    return sorted(out, key=lambda r: (r[-1], r[3]))


def _explain(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_multi_group_directory_reads_as_one_dataframe_of_committed_rows(spark, groups_dir):
    _jar_or_skip(spark)
    from quorumlog.node.groups import group_of
    from quorumlog.spark import COLUMNS, read_store

    df = read_store(spark, groups_dir)
    assert df.columns == list(COLUMNS) + ["group"]
    want = _expected(groups_dir)
    assert len(want) == len(TOPICS) * QUEUES * PER_QUEUE
    assert _rows(df) == want
    # committed data only, per group: group 1's tail is in its log, not in the DataFrame
    tail = st.expected_messages(_group_store(groups_dir, 1), committed_only=False)
    assert len(tail) == len(st.expected_messages(_group_store(groups_dir, 1))) + TAIL
    assert df.where("body like 'uncommitted%'").count() == 0
    # every row is in the group the placement rule gives its queue; every group has rows
    got = df.select("topic", "queue_id", "group").distinct().collect()
    assert all(r["group"] == group_of(r["topic"], r["queue_id"], GROUPS) for r in got)
    assert {r["group"] for r in got} == set(range(GROUPS))
    # one split set per group: each group's store is planned on its own
    counts = {r["group"]: r["count"] for r in df.groupBy("group").count().collect()}
    assert counts == {g: len(_expected(groups_dir, g)) for g in range(GROUPS)}


def test_group_filters_prune_whole_groups_and_equal_the_unpushed_read(spark, groups_dir):
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    g = F.col("group")
    cases = {
        "group = 1": (g == 1, [1]),
        "group in (0, 2)": (g.isin(0, 2), [0, 2]),
        "group > 0": (g > 0, [1, 2]),
        "not group = 1": (~(g == 1), [0, 2]),
        "group = 1 or group = 2": ((g == 1) | (g == 2), [1, 2]),
        "group = 9": (g == 9, []),
        "group = 2 and topic": ((g == 2) & (F.col("topic") == "orders"), [2]),
    }
    for name, (cond, kept) in cases.items():
        pushed = spark.read.format("quorumlog").load(groups_dir).where(cond)
        walk = spark.read.format("quorumlog").option("pushdown", "false").load(groups_dir)
        want = _rows(walk.where(cond))
        assert _rows(pushed) == want, name
        assert {r[-1] for r in want} <= set(kept), name
        plan = _explain(pushed)
        assert f"Groups: {kept} of {GROUPS} stores" in plan, (name, plan)
        assert f"Groups: {list(range(GROUPS))} of" in _explain(walk.where(cond)), name
        # only the kept groups' stores are planned: their paths alone are in the scan
        for k in range(GROUPS):
            assert (os.path.join("groups", str(k)) in plan.split("PushedFilters")[0]) == (k in kept), name
    # a pushed aggregate over the pruned stores (count from group 2's consume queues)
    one = spark.read.format("quorumlog").load(groups_dir).where((g == 2) & (F.col("topic") == "orders"))
    assert one.count() == len([r for r in _expected(groups_dir, 2) if r[0] == "orders"])
    assert spark.read.format("quorumlog").load(groups_dir).where(g == 9).count() == 0


def test_single_group_directory_has_no_group_column(spark, engine_store):
    _jar_or_skip(spark)
    from quorumlog.spark import COLUMNS, read_store

    df = read_store(spark, engine_store)
    assert df.columns == list(COLUMNS)
    assert "Groups:" not in _explain(df)


def test_python_reader_refuses_a_multi_group_directory_by_name(spark, groups_dir):
    from quorumlog.errors import InvalidArgumentError
    from quorumlog.spark import read_store

    with pytest.raises(InvalidArgumentError, match="many Raft groups.*groups/<g>"):
        read_store(spark, groups_dir, engine="python").count()
    # one group's store is an ordinary store to it
    assert read_store(spark, _group_store(groups_dir, 0), engine="python").count() == len(
        _expected(groups_dir, 0))
