"""The house rules of the source tree, checked: no import cycle among quorumlog modules, no
module touching another object's underscore attributes, no overlong function, and a first line
that says what each file holds."""
from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "quorumlog"
CSRC = ROOT / "csrc" / "quorumlog"
MAX_FUNCTION_LINES = 120

# Functions allowed past MAX_FUNCTION_LINES, each with the reason (keep this short).
LONG_FUNCTION_EXCEPTIONS: dict[str, str] = {}


def _py_files():
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (imports that never run)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                skip.update(id(n) for n in ast.walk(sub))
    return skip


def _imports(path: pathlib.Path, tree: ast.AST) -> set[str]:
    """quorumlog modules imported at module level or inside functions (a cycle through a
    late import is still a cycle of design); imports under `if TYPE_CHECKING:` never run and
    are left out."""
    mod = _module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    skip = _type_checking_blocks(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("quorumlog"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("quorumlog"):
                continue
            out.add(target)
            for a in node.names:          # `from . import x` may name a submodule
                out.add(f"{target}.{a.name}")
    return out


def _graph():
    files = {_module_name(p): p for p in _py_files()}
    graph = {}
    for mod, path in files.items():
        deps = {d for d in _imports(path, ast.parse(path.read_text())) if d in files}
        # importing a package runs its __init__: depend on the package, not a parent of ours
        graph[mod] = {d for d in deps if d != mod and not mod.startswith(d + ".")}
    return graph


def test_no_import_cycle():
    graph = _graph()
    assert len(graph) > 10, "the module scan found too little: the check is broken"
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_a_cycle(tmp_path):
    """The checker itself: a two-module cycle is found."""
    a = tmp_path / "a.py"
    a.write_text("from quorumlog import store\n")
    tree = ast.parse(a.read_text())
    assert "quorumlog.store" in _imports(SRC / "x.py", tree)


_PRIVATE = re.compile(r"^_[a-zA-Z0-9]")
# Underscore names that are other libraries' public API, each with its reason.
THIRD_PARTY_UNDERSCORE_API = {
    "_asdict": "collections.namedtuple's documented API",
    "_replace": "collections.namedtuple's documented API",
    "_fields": "collections.namedtuple's documented API",
    "_jvm": "PySpark: SparkContext._jvm is the only way to reach the JVM through py4j",
    "_jsc": "PySpark: SparkContext._jsc is the only way to reach the JavaSparkContext",
    "_jsparkSession": "PySpark: the JVM SparkSession has no public Python name",
    "_jdf": "PySpark: the JVM DataFrame has no public Python name",
}


def _names_defined_here(tree) -> set[str]:
    """Underscore names this file defines itself (methods, attributes set on self, slots):
    classes of one module may use each other's private parts; other modules may not."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.isidentifier():
            names.add(node.value)           # __slots__ entries
    return names


def _private_reaches(path):
    tree = ast.parse(path.read_text())
    own = _names_defined_here(tree)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _PRIVATE.match(node.attr) \
                and node.attr not in THIRD_PARTY_UNDERSCORE_API:
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) \
                    and base.func.id == "super":
                continue
            if isinstance(base, ast.Name) and base.id.startswith("_"):
                continue           # a private module alias of this file (e.g. `_cq`)
            if node.attr in own:
                continue
            bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    return bad


def test_no_module_reaches_into_another_objects_private_attributes():
    bad = [b for p in _py_files() for b in _private_reaches(p)]
    assert not bad, "private attributes reached from outside their object:\n" + "\n".join(bad)


def _python_function_lengths(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


_CY_DEF = re.compile(r"^(\s*)(?:async\s+)?(?:cpdef|cdef|def)\s+(?:[\w\[\]\*\s,.]+?\s+)?"
                     r"\**(\w+)\s*\(")


def _cython_function_lengths(path):
    """Functions of a .pyx/.pxi by indentation: a def runs until the next line (not blank,
    not a comment) indented at or left of it."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        m = _CY_DEF.match(line)
        if not m or " class " in line:
            continue
        indent = len(m.group(1))
        end = i
        for j in range(i + 1, len(lines)):
            s = lines[j]
            if not s.strip() or s.lstrip().startswith("#"):
                continue
            if len(s) - len(s.lstrip()) <= indent:
                break
            end = j
        yield m.group(2), i + 1, end - i + 1


def test_no_overlong_function():
    long = []
    for p in _py_files():
        for name, line, n in _python_function_lengths(p):
            if n > MAX_FUNCTION_LINES:
                long.append((f"{p.relative_to(ROOT)}:{line} {name}", n))
    for p in sorted(list(CSRC.rglob("*.pyx")) + list(CSRC.rglob("*.pxi"))):
        for name, line, n in _cython_function_lengths(p):
            if n > MAX_FUNCTION_LINES:
                long.append((f"{p.relative_to(ROOT)}:{line} {name}", n))
    long = [(w, n) for w, n in long if w.split(" ")[-1] not in LONG_FUNCTION_EXCEPTIONS]
    assert not long, "functions over %d lines: %s" % (MAX_FUNCTION_LINES, long)


def test_every_source_file_says_what_it_holds():
    missing = []
    for p in _py_files():
        tree = ast.parse(p.read_text())
        if not ast.get_docstring(tree) and p.stat().st_size > 0:
            missing.append(str(p.relative_to(ROOT)))
    for p in sorted(list(CSRC.rglob("*.pyx")) + list(CSRC.rglob("*.pxi"))
                    + list(CSRC.rglob("*.pxd"))):
        first = p.read_text().lstrip().splitlines()[:1]
        if p.stat().st_size and not (first and first[0].startswith(("#", '"""'))):
            missing.append(str(p.relative_to(ROOT)))
    assert not missing, "files without a first line saying what they hold: %s" % missing


def test_code_speaks_of_the_code_not_of_issues():
    pat = re.compile(r"\b(issue\s+#?\d+|a later issue|a separate issue)\b", re.I)
    hits = []
    for p in _py_files() + sorted(CSRC.rglob("*.py*")):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if pat.search(line):
                hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)


# -- the layers' lines (DESIGN.md "Consensus knows no bytes", "one small interface per seam")
RAFT = SRC / "raft"
# What consensus must not see: the store, the commit log (Python or native), the record
# format, the consume queues, the client frame codec.
NOT_FOR_RAFT = ("quorumlog.store", "quorumlog.commitlog", "quorumlog._commitlog",
                "quorumlog.format", "quorumlog._consumequeue", "quorumlog._clientframe")


def _raft_imports_of_the_store(files):
    bad = []
    for p in files:
        for dep in sorted(_imports(p, ast.parse(p.read_text()))):
            if dep.startswith(NOT_FOR_RAFT):
                bad.append(f"{p.relative_to(ROOT)}: imports {dep}")
    return bad


def test_raft_is_consensus_only():
    files = sorted(RAFT.glob("*.py"))
    assert len(files) > 5, "the raft/ scan found too little: the check is broken"
    bad = _raft_imports_of_the_store(files)
    assert not bad, "raft/ reaches past consensus:\n" + "\n".join(bad)


def test_the_raft_check_sees_a_store_import():
    """The checker itself: a raft module importing the store, inside a function, is found."""
    p = RAFT / "_house_probe.py"           # (parsed from text; never written)
    tree = ast.parse("def f():\n    from ..store import nativelog\n")
    assert any(d.startswith(NOT_FOR_RAFT) for d in _imports(p, tree))


# Classes that may define __getattr__, each with its reason (keep this short).
GETATTR_EXCEPTIONS = {
    "testing/faultproxy.py": "FaultProxy runs a test tool's calls on its own "
                             "loop's thread; it is no seam between layers of the product",
}


def _getattr_forwarders(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__getattr__":
                    yield f"{node.name}:{item.lineno}"


def test_no_getattr_forwarding_on_a_seam():
    """A seam is what its class says: a __getattr__ that forwards every other name hides
    what crosses it (node/storebridge.py's _MetaRaftLog did)."""
    bad = []
    for p in _py_files():
        rel = str(p.relative_to(SRC))
        if rel in GETATTR_EXCEPTIONS:
            continue
        bad += [f"{rel}: {w}" for w in _getattr_forwarders(p)]
    assert not bad, "classes forwarding by __getattr__: " + ", ".join(bad)


def test_the_getattr_check_sees_a_forwarder(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("class A:\n    def __getattr__(self, name):\n        return 1\n")
    assert list(_getattr_forwarders(p)) == ["A:2"]


MAX_NODE_CORE_FUNCTION_LINES = 80
# Functions of node/ and raft/core* over 80 lines, each with its reason (keep this empty).
NODE_CORE_LONG_EXCEPTIONS: dict[str, str] = {}


def test_no_function_over_80_lines_in_the_node_or_the_core():
    files = sorted((SRC / "node").glob("*.py")) + sorted(RAFT.glob("core*.py"))
    assert files, "the scan found nothing: the check is broken"
    long = []
    for p in files:
        for name, line, n in _python_function_lengths(p):
            key = f"{p.relative_to(SRC)} {name}"
            if n > MAX_NODE_CORE_FUNCTION_LINES and key not in NODE_CORE_LONG_EXCEPTIONS:
                long.append(f"{p.relative_to(ROOT)}:{line} {name} ({n} lines)")
    assert not long, "functions over 80 lines: " + ", ".join(long)


def _ready_calls(path):
    """Lines of `path` that take a Ready from a core: a call of a method named `ready`."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "ready" and not node.args:
            yield node.lineno


def test_one_ready_loop_in_the_code_base():
    """The driver's duties are run in one place (raft/ready.py): the node, the core simulator
    and the hand-driven cluster all call run_readies rather than keep a copy of the loop."""
    where = [f"{p.relative_to(SRC)}:{n}" for p in _py_files() for n in _ready_calls(p)]
    assert where and all(w.startswith("raft/ready.py:") for w in where), where


NODE = SRC / "node"
# What only the proposal pipeline (node/pipeline.py) does: propose to the core, read the
# producer table, make or complete a request's future, or hang a completion on a request.
_PROPOSAL_CALLS = {"propose", "create_future", "set_result"}
_PROPOSAL_MODULES = {"quorumlog.node.producers"}


def _proposal_code(path, tree=None):
    """Where `path` does a proposal's work: imports the producer table, calls one of
    _PROPOSAL_CALLS, or sets / calls an `on_done` completion callback."""
    tree = tree if tree is not None else ast.parse(path.read_text())
    out = [f"imports {d}" for d in sorted(_imports(path, tree) & _PROPOSAL_MODULES)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _PROPOSAL_CALLS:
            out.append(f"{node.lineno}: .{node.func.attr}()")
        elif isinstance(node, ast.Attribute) and node.attr == "on_done":
            out.append(f"{node.lineno}: .on_done")
    return out


def test_the_driver_holds_no_proposal_code():
    """node/driver.py is the Ready loop and the lifecycle: every write is the pipeline's."""
    bad = _proposal_code(NODE / "driver.py")
    assert not bad, "node/driver.py does proposal work:\n" + "\n".join(bad)


def test_one_tracker_completes_the_nodes_proposals():
    """A proposal's completion is tracked in one place, node/pipeline.py's Tracker: no other
    module of node/ makes or completes a future for a request or keeps on_done callbacks
    (MetaSeam's list of META requests and the node's per-request callbacks were such)."""
    assert (NODE / "pipeline.py").exists()
    bad = [f"{p.name}: {w}" for p in sorted(NODE.glob("*.py")) if p.name != "pipeline.py"
           for w in _proposal_code(p) if not w.startswith("imports")]
    assert not bad, "completion tracked outside node/pipeline.py:\n" + "\n".join(bad)
    tree = ast.parse((NODE / "pipeline.py").read_text())
    trackers = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                and "Track" in n.name]
    assert trackers == ["Tracker"], trackers


def test_the_proposal_check_sees_proposal_code():
    p = NODE / "_house_probe.py"           # (parsed from text; never written)
    tree = ast.parse("from .producers import table_for_term\n"
                     "def f(core, req, loop):\n    core.propose(req, 1, 1)\n"
                     "    req.on_done = print\n    return loop.create_future()\n")
    assert _proposal_code(p, tree) == ["imports quorumlog.node.producers", "3: .propose()",
                                       "4: .on_done", "5: .create_future()"]
