"""The Java reader's own tests (spark/src/test/java/.../JavaTests.java, a main-based runner:
JUnit is not among pyspark's jars and nothing is fetched), compiled and run with plain
`java` against the jar the install built, on engine-written stores and the golden vector.
All commands run in ONE JVM (start-up dominates on this machine); each test checks its part."""
from __future__ import annotations

import pathlib
import shutil
import sys

import pytest

import _spark_stores as st
from quorumlog import format as fmt
from quorumlog import spark as qs

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN_STORE = str(ROOT / "tests" / "golden" / "store")
sys.path.insert(0, str(ROOT / "spark"))
import build_jar  # noqa: E402

SPLITS = (1 << 40, 5003)


CQ_SEEDS = (1, 2, 3)    # JavaTests cq-tags / merge: seeded random queues and ranges


@pytest.fixture(scope="module")
def java_run(engine_store, log_store, tmp_path_factory):
    if build_jar.find_tool("javac") is None or build_jar.pyspark_jars() is None:
        pytest.skip("needs a JDK and pyspark (test_jar.py fails if the JDK is there but no jar)")
    jar = qs.jar_path()
    assert jar is not None, "javac and pyspark are present but quorumlog-spark.jar was not built"
    tmp = tmp_path_factory.mktemp("jtest")
    classes = build_jar.compile_java_tests(jar, tmp / "classes")
    corrupt = tmp / "corrupt"
    shutil.copytree(log_store, corrupt)
    victim = [r for r in st.all_records(str(corrupt)) if r.type == fmt.TYPE_MESSAGE][150]
    seg, _ = st.corrupt_byte(str(corrupt), victim.position + victim.size - 1)
    recycled = tmp / "recycled"
    shutil.copytree(log_store, recycled)
    args = ["selftest", engine_store, "--", "selftest", log_store, "--",
            "selftest", GOLDEN_STORE, "--",
            "expect-corrupt", corrupt, pathlib.Path(seg).name, victim.position % st.SEGMENT_SIZE,
            "--", "cq-ends", tmp, "--", "cq-reuse", tmp, "--", "positions-gone", recycled]
    for seed in CQ_SEEDS:
        args += ["--", "cq-tags", tmp, seed, "--", "merge", seed]
    dumps = {}
    for name, path in (("engine", engine_store), ("log", log_store), ("golden", GOLDEN_STORE)):
        for sb in SPLITS:
            dumps[name, sb] = tmp / f"{name}-{sb}.txt"
            args += ["--", "dump", path, sb, "true", dumps[name, sb]]
    res = build_jar.run_java_tests(jar, [str(a) for a in args], classes=classes)
    return res, dumps


def _line(r):
    keys = "".join(k.encode().hex() + "," for k in r.keys)
    props = "".join(k.encode().hex() + "=" + v.encode().hex() + "," for k, v in r.properties.items())
    tags = r.tags.encode().hex() if r.tags else "-"
    return (f"{r.index} {r.term} {r.position} {r.type} {r.topic.encode().hex()} {r.queue_id} "
            f"{r.queue_offset} {r.born_timestamp_ms} {r.store_timestamp_ms} {r.flags} {tags} "
            f"{keys} {props} {len(r.body)} {fmt.crc32c(bytes(r.body)):x}")


def test_java_tests_pass(java_run):
    res, _ = java_run
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert res.stdout.count("records checked") == 3      # 2 engine stores + golden vector
    assert "expect-corrupt:" in res.stdout and "CRC32C mismatch" in res.stdout
    assert "positions-gone: quorumlog: segment " in res.stdout
    assert "cq-reuse: done" in res.stdout
    for seed in CQ_SEEDS:      # the seeded consume-queue and merge checks ran (FAIL lines fail above)
        assert f"cq-tags: seed {seed}, 300 cases" in res.stdout
        assert f"merge: seed {seed}, 200 cases" in res.stdout


@pytest.mark.parametrize("store", ["engine", "log", "golden"])
def test_java_records_equal_reference_decoder(java_run, engine_store, log_store, store):
    res, dumps = java_run
    assert res.returncode == 0, res.stdout[-4000:]
    path = {"engine": engine_store, "log": log_store, "golden": GOLDEN_STORE}[store]
    cp = fmt.decode_checkpoint((pathlib.Path(path) / "checkpoint").read_bytes())
    want = [_line(r) for r in st.all_records(path)
            if r.type == fmt.TYPE_MESSAGE and r.position < cp.committed_position]
    assert want
    for sb in SPLITS:
        assert dumps[store, sb].read_text().splitlines() == want, sb
