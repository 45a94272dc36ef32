"""The host package's shape, read from its source (nothing imported): no import cycle (at import time, nor
through imports inside functions), the command-line framework (typer) imported only by the CLI package, and
exit codes defined only in errors.py (docs/architecture.md)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "host" / "kitctl"


def _modules() -> dict[str, tuple[Path, bool]]:
    """kitctl.<dotted name> -> (file, is a package's __init__)."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported: its body's, and those in a top-level if/try (not the
    `if TYPE_CHECKING:` ones, nor any inside a function: those run later, when called)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        for n in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                out.append(n)
    return out


def _targets(name: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, mods: dict) -> set[str]:
    """The kitctl modules an import statement names (a `from pkg import mod` names pkg.mod)."""
    if isinstance(node, ast.Import):
        found = {a.name for a in node.names if a.name.split(".")[0] == "kitctl"}
    else:
        if node.level:
            base = name.split(".") if is_pkg else name.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
            if target.split(".")[0] != "kitctl":
                return set()
        found = {f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names}
    out = set()
    for t in found:
        while t and t not in mods:  # `kitctl.x.name`: the module kitctl.x
            t = t.rpartition(".")[0]
        if t and t != name:
            out.add(t)
    return out


def _all_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, those inside functions too (they run when called)."""
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def import_graph(lazy: bool = False) -> dict[str, set[str]]:
    """kitctl module -> the kitctl modules it imports at import time (`lazy`: or anywhere in it)."""
    mods = _modules()
    read = _all_imports if lazy else _top_level_imports
    return {name: set().union(*[_targets(name, is_pkg, n, mods)
                                for n in read(ast.parse(path.read_text(encoding="utf-8")))])
            for name, (path, is_pkg) in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_reader_sees_a_cycle_when_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_host_package_has_no_module_level_import_cycle():
    graph = import_graph()
    assert "kitctl.cli.application" in graph and "kitctl.run.session" in graph["kitctl.benchmarks.maxbatch.command"]
    assert cycles(graph) == []


def test_no_import_cycle_either_through_imports_made_inside_functions():
    """A function-level import only postpones a circle; the layers hold when none is drawn."""
    assert cycles(import_graph(lazy=True)) == []


def test_only_the_cli_package_imports_typer():
    outside = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG)
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = ([a.name for a in n.names] if isinstance(n, ast.Import)
                     else [n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level else [])
            if any(x.split(".")[0] in ("typer", "click") for x in names) and rel.parts[0] != "cli":
                outside.append(str(rel))
    assert outside == []


def test_exit_codes_are_defined_only_in_errors():
    defined = []
    for p in sorted(PKG.rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    for x in ast.walk(t):
                        if isinstance(x, ast.Name) and x.id.startswith("EXIT_"):
                            defined.append(f"{p.relative_to(PKG)}: {x.id}")
    assert defined and all(d.startswith("errors.py:") for d in defined), defined


MAX_MODULE_LINES = 500  # a module a newcomer reads whole; a larger one holds more than one concern


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(PKG)): n for p in sorted(PKG.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_each_benchmark_module_imports_first_in_a_fresh_interpreter():
    """The registry loads benchmarks by name (importlib), which no graph above sees: a benchmark's module
    imported before anything else must not come back to itself through the CLI package and the registry."""
    import os
    import subprocess
    import sys

    names = sorted({f"kitctl.benchmarks.{p.parent.name}.{p.stem}" for p in PKG.glob("benchmarks/*/*.py")
                    if p.stem != "__init__" and p.parent.name != "data"})
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    bad = []
    for name in names:
        p = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(PKG.parent)})
        if p.returncode:
            bad.append(f"{name}: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
    assert len(names) > 20 and bad == [], bad


def test_the_registry_lists_benchmarks_in_builtin_order_whatever_was_imported_first():
    """benchmarks.all() (every report's order of benchmarks) is BUILTIN's, not the order in which the benchmark
    packages happened to be imported (a test importing dataload's config first used to reorder 'report')."""
    code = ("import kitctl.benchmarks.train_e2e.config, kitctl.benchmarks.dataload.config\n"
            "from kitctl import benchmarks\nprint(','.join(b.name for b in benchmarks.all()))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "maxbatch,throughput,datasize,dataload,train-e2e"
