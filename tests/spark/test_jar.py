"""The jar is part of the build: with a JDK and pyspark present, `make test` must fail (not
skip) when quorumlog-spark.jar was not built or does not compile."""
from __future__ import annotations

import pathlib
import sys
import zipfile

import pytest

from quorumlog import spark as qs

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "spark"))
import build_jar  # noqa: E402

HAVE_JDK = build_jar.find_tool("javac") is not None
HAVE_PYSPARK = build_jar.pyspark_jars() is not None


def test_jar_exists_when_javac_and_pyspark_are_present():
    if not (HAVE_JDK and HAVE_PYSPARK):
        pytest.skip("no javac or no pyspark: the install warns and uses the Python source")
    jar = qs.jar_path()
    assert jar is not None, "javac is on PATH but the install did not build quorumlog-spark.jar"
    names = set(zipfile.ZipFile(jar).namelist())
    assert "io/quorumlog/spark/QuorumlogInputFormat.class" in names
    assert "io/quorumlog/spark/QuorumlogRecordReader.class" in names
    assert "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister" in names
    # The jar is current: no Java source is newer than it (a stale jar hides build breaks).
    newest = max(p.stat().st_mtime for p in (ROOT / "spark" / "src" / "main").rglob("*")
                 if p.is_file())
    assert jar.stat().st_mtime >= newest, "quorumlog-spark.jar is older than spark/src/main"


def test_compile_error_raises_not_warns(tmp_path):
    if not (HAVE_JDK and HAVE_PYSPARK):
        pytest.skip("needs javac and pyspark")
    bad = tmp_path / "Bad.java"
    bad.write_text("class Bad { int x = ; }\n")
    with pytest.raises(build_jar.JarBuildError, match="javac failed"):
        build_jar._javac(build_jar.find_tool("javac"), build_jar.pyspark_jars(), [str(bad)],
                         tmp_path / "out")


def test_without_javac_the_build_warns_and_continues(monkeypatch, tmp_path):
    monkeypatch.setattr(build_jar, "find_tool", lambda name: None)
    with pytest.warns(UserWarning, match="javac not found"):
        assert build_jar.build_into(tmp_path) is None
    assert not (tmp_path / build_jar.JAR_NAME).exists()
