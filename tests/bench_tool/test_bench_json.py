"""The `--json` document: it validates against the schema shipped in the package
(quorumlog/bench/schema.json, documented in docs/benchmarks.md), carries the references measured
in the same run, and agrees with the printed table."""
import copy
import importlib.resources
import json

import jsonschema
import pytest


@pytest.fixture(scope="module")
def schema():
    text = importlib.resources.files("quorumlog.bench").joinpath("schema.json").read_text()
    s = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(s)
    return s


def test_document_with_references_validates(bench, schema):
    run = bench("store", "--count", "2000", "--batch", "100", "--quick", "--warm-gib", "0.05",
                fast=False)
    assert run.exit_code == 0, run.output
    doc = run.doc
    jsonschema.validate(doc, schema)
    assert doc["schema"] == "quorumlog-bench" and doc["version"] == 1
    refs = doc["references"]
    for k in ("memcpy_GBps", "page_cache_write_GBps", "loopback_tcp_MBps"):
        assert refs[k] > 0
    assert refs["fdatasync_p90_ms"] >= refs["fdatasync_p50_ms"] > 0
    assert refs["warm_bytes"] == int(0.05 * (1 << 30))
    put, get = doc["results"]
    assert put["reference"]["name"] == "page_cache_write"
    assert put["reference"]["ratio"] == pytest.approx(
        put["MBps"] / (refs["page_cache_write_GBps"] * 1e3))
    assert get["reference"]["name"] == "memcpy" and get["reference"]["ratio"] > 0
    assert doc["options"]["count"] == 2000 and doc["options"]["producers"] is None
    lat = put["latency"]
    assert lat["p50_us"] <= lat["p90_us"] <= lat["p99_us"] <= lat["p99_9_us"] <= lat["max_us"]
    assert "references (same run): memcpy" in run.output
    assert "page-cache write" in run.output


def test_document_without_references_validates_and_matches_the_table(bench, schema):
    run = bench("log", "--count", "3000", "--batch", "300")
    jsonschema.validate(run.doc, schema)
    assert run.doc["references"] is None
    (row,) = run.doc["results"]
    assert row["reference"] == {"name": "page_cache_write", "ratio": None}
    line = next(ln for ln in run.output.splitlines() if ln.strip().startswith("log"))
    assert f"{row['messages']:,}" in line and f"{row['msgs_per_s']:,.0f}" in line
    assert "batch of 300" in line and line.rstrip().endswith("ok")


def test_schema_is_not_vacuous(bench, schema):
    doc = bench("log", "--count", "100", "--batch", "10").doc
    jsonschema.validate(doc, schema)
    for mutate in (lambda d: d.pop("version"),
                   lambda d: d.__setitem__("version", 2),
                   lambda d: d["results"][0].pop("latency"),
                   lambda d: d["results"][0]["latency"].__setitem__("p99_us", "fast"),
                   lambda d: d["results"][0]["integrity"].__setitem__("ok", "yes"),
                   lambda d: d["results"][0].__setitem__("undocumented", 1),
                   lambda d: d["options"].__setitem__("flush", "sometimes")):
        bad = copy.deepcopy(doc)
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_skipped_workloads_are_in_the_document(bench, schema, monkeypatch):
    from quorumlog.bench import suite
    from quorumlog.bench.workloads import REGISTRY
    monkeypatch.setattr(suite, "DEFAULT_SUITE", (("log", {}), ("cluster", {})))
    monkeypatch.setattr(REGISTRY["cluster"], "unavailable", lambda: "hidden by the test")
    run = bench("--count", "200", "--batch", "100")
    assert run.exit_code == 0
    jsonschema.validate(run.doc, schema)
    assert run.doc["skipped"] == [{"workload": "cluster", "reason": "hidden by the test"}]
