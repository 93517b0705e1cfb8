"""No import circles between the modules of vlkernels/: every ``import`` (at the top or inside a function) is an edge,
and the module graph must have no cycle. Imports of a package itself (its ``__init__``, which re-exports) do not
count: a module may import its package's public names."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "vlkernels"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the vlkernels modules (not packages) it imports anywhere in its source."""
    mods = _modules()
    packages = {m for m, p in mods.items() if p.name == "__init__.py"}
    graph: dict[str, set[str]] = {m: set() for m in mods if m not in packages}
    for mod in graph:
        path = mods[mod]
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            for name in names:
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                if name and name != mod and name not in packages:
                    graph[mod].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# The one circle left: retrieval/ops.py's compatibility __getattr__ (old ``from vlkernels.retrieval.ops import
# evaluate``) imports functional.py, which imports ops.py's launchers. Deleting that __getattr__ empties this list.
KNOWN = [["vlkernels.retrieval.functional", "vlkernels.retrieval.ops"]]


def test_no_import_circles_in_vlkernels():
    graph = import_graph()
    assert "vlkernels.selftest" in graph["vlkernels.cli"] and "vlkernels.cli" not in graph["vlkernels.selftest"]
    assert [c for c in cycles(graph) if c not in KNOWN] == []
