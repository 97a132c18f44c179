"""Builds quorumlog-spark.jar with javac against the jars inside the installed pyspark wheel.

No Maven, no network: pyspark ships Spark's and Hadoop's client jars, which is all the
InputFormat and the DataSource need. setup.py's build_py calls `build_into(target_dir)`;
`python spark/build_jar.py [target_dir]` does the same by hand, and `--test` also compiles
and runs the Java tests (spark/src/test/java, a plain main-based runner; JUnit is not in
pyspark's jars).

Without javac or pyspark the build warns and returns None (the pure-Python data source is
the fallback); when both are present a compile failure raises JarBuildError, so `make test`
fails instead of silently skipping the JVM reader.
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
MAIN_SRC = HERE / "src" / "main" / "java"
RESOURCES = HERE / "src" / "main" / "resources"
TEST_SRC = HERE / "src" / "test" / "java"
JAR_NAME = "quorumlog-spark.jar"
JAVA_RELEASE = "17"  # Spark 4 needs Java 17+


class JarBuildError(RuntimeError):
    """javac and pyspark were found but the jar could not be built."""


def pyspark_jars() -> list[pathlib.Path] | None:
    """pyspark's bundled jars: from the importable pyspark, else from the target
    environment's site-packages (pip's isolated build env hides those from sys.path, but
    the interpreter, and so sys.prefix, is still the target's), else $QUORUMLOG_PYSPARK_JARS."""
    dirs = []
    if os.environ.get("QUORUMLOG_PYSPARK_JARS"):
        dirs.append(pathlib.Path(os.environ["QUORUMLOG_PYSPARK_JARS"]))
    try:
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        dirs += [pathlib.Path(loc) / "jars" for loc in spec.submodule_search_locations]
    for prefix in dict.fromkeys([sys.prefix, sys.exec_prefix]):
        for key in ("purelib", "platlib"):
            lib = sysconfig.get_paths(vars={"base": prefix, "platbase": prefix})[key]
            dirs.append(pathlib.Path(lib) / "pyspark" / "jars")
    for d in dirs:
        jars = sorted(d.glob("*.jar"))
        if jars:
            return jars
    return None


def find_tool(name: str) -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (pathlib.Path(java_home) / "bin" / name).exists():
        return str(pathlib.Path(java_home) / "bin" / name)
    return shutil.which(name)


def _sources(root: pathlib.Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.java"))


def _javac(javac: str, classpath: list[pathlib.Path], sources: list[str], out: pathlib.Path):
    out.mkdir(parents=True, exist_ok=True)
    # An @argfile keeps the command line short (pyspark has ~280 jars).
    with tempfile.NamedTemporaryFile("w", suffix=".args", delete=False) as f:
        f.write("-cp\n" + os.pathsep.join(str(p) for p in classpath) + "\n")
        f.write("\n".join(sources) + "\n")
        argfile = f.name
    try:
        proc = subprocess.run(
            [javac, "--release", JAVA_RELEASE, "-encoding", "UTF-8", "-Xlint:-options",
             "-nowarn", "-d", str(out), "@" + argfile],
            capture_output=True, text=True)
    finally:
        os.unlink(argfile)
    if proc.returncode != 0:
        raise JarBuildError("javac failed:\n" + proc.stdout + proc.stderr)


def _write_jar(classes: pathlib.Path, jar: pathlib.Path):
    # zipfile instead of the `jar` tool: one less JDK binary to depend on; fixed timestamps
    # keep the jar reproducible.
    tmp = jar.with_suffix(".jar.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", (1980, 1, 1, 0, 0, 0)),
                   "Manifest-Version: 1.0\nCreated-By: quorumlog build_jar.py\n\n")
        for base in (classes, RESOURCES):
            if not base.exists():
                continue
            for p in sorted(base.rglob("*")):
                if p.is_file():
                    info = zipfile.ZipInfo(str(p.relative_to(base)), (1980, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    z.writestr(info, p.read_bytes())
    os.replace(tmp, jar)


def build_into(target_dir: pathlib.Path) -> pathlib.Path | None:
    """Compiles spark/src/main/java into target_dir/quorumlog-spark.jar and returns its path.

    Returns None (with a warning) when javac or pyspark is missing; raises JarBuildError when
    they are present and compilation fails."""
    target_dir = pathlib.Path(target_dir)
    javac = find_tool("javac")
    jars = pyspark_jars()
    if javac is None or jars is None:
        warnings.warn(
            f"quorumlog: not building {JAR_NAME} ("
            + ("javac not found" if javac is None else "pyspark not installed")
            + "); quorumlog.spark falls back to the Python data source", stacklevel=2)
        return None
    target_dir.mkdir(parents=True, exist_ok=True)
    jar = target_dir / JAR_NAME
    with tempfile.TemporaryDirectory(prefix="quorumlog-jar-") as tmp:
        classes = pathlib.Path(tmp) / "classes"
        _javac(javac, jars, _sources(MAIN_SRC), classes)
        _write_jar(classes, jar)
    return jar


def compile_java_tests(jar: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """Compiles spark/src/test/java against the jar into out (a directory); returns out."""
    javac = find_tool("javac")
    jars = pyspark_jars()
    if javac is None or jars is None:
        raise JarBuildError("javac and pyspark are needed to compile the Java tests")
    _javac(javac, [jar, *jars], _sources(TEST_SRC), pathlib.Path(out))
    return pathlib.Path(out)


def is_current(jar: pathlib.Path) -> bool:
    """The jar exists and is newer than every file under spark/src/main."""
    if not jar.is_file():
        return False
    newest = max((p.stat().st_mtime for p in (HERE / "src" / "main").rglob("*") if p.is_file()),
                 default=0)
    return jar.stat().st_mtime >= newest


def ensure_jar(target_dir: pathlib.Path) -> pathlib.Path | None:
    """build_into(target_dir) unless the jar there is current. Used by the Spark tests'
    conftest: a fresh `pip install -e .[spark]` builds the wheel BEFORE pyspark is installed,
    so the first install cannot compile the jar; the test session does it (and fails loudly
    when javac is there but compilation fails)."""
    jar = pathlib.Path(target_dir) / JAR_NAME
    if is_current(jar):
        return jar
    return build_into(target_dir)


def run_java_tests(jar: pathlib.Path, args: list[str] | None = None,
                   classes: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    """Runs io.quorumlog.spark.JavaTests (compiling it first unless classes is given)."""
    java = find_tool("java")
    if java is None:
        raise JarBuildError("java is needed to run the Java tests")
    with tempfile.TemporaryDirectory(prefix="quorumlog-jtest-") as tmp:
        if classes is None:
            classes = compile_java_tests(jar, pathlib.Path(tmp) / "classes")
        cp = [classes, jar, *pyspark_jars()]
        return subprocess.run(
            [java, "-Xmx512m", "-cp", os.pathsep.join(str(p) for p in cp),
             "io.quorumlog.spark.JavaTests", *(args or [])],
            capture_output=True, text=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--test"]
    out = build_into(pathlib.Path(args[0]) if args else HERE / "build")
    print(out)
    if "--test" in sys.argv and out is not None:
        res = run_java_tests(out, args[1:])
        sys.stdout.write(res.stdout)
        sys.stderr.write(res.stderr)
        sys.exit(res.returncode)
