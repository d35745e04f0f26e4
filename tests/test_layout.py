"""The package's import direction: app → inspect → engine → summarizers/formats/dialects →
core. What predicts or inspects a run (`inspect/`) builds on what runs one (`engine/`),
never the other way round.

Imports are read with `ast` (function-level ones too: a lazy import is still a
dependency), so a layering mistake fails here before it becomes a tangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trajectory_compressor"
NAME = PACKAGE.name

# What each subpackage may import from the rest of the package (besides itself).
ALLOWED = {
    "core": set(),
    "counting": {"core"},
    "dialects": {"core"},
    "formats": {"core"},
    "summarizers": {"core", "counting"},
    "live": {"core", "counting", "dialects"},
    "engine": {"core", "counting", "dialects", "formats", "summarizers"},
    "inspect": {"core", "counting", "dialects", "formats", "summarizers", "engine"},
    "app": {"core", "counting", "dialects", "formats", "summarizers", "engine", "inspect",
            "live"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Package-internal modules ``path`` imports, as absolute dotted names."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == NAME)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != NAME:
                continue
            found.add(target)
            # ``from . import jsonio`` imports a module, not a name.
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if _exists(candidate):
                    found.add(candidate)
    return found


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


GRAPH = _graph()


def _violations(graph: dict[str, set[str]], module: str) -> list[str]:
    layer = _layer(module)
    assert layer is not None
    return sorted(t for t in graph[module]
                  if (other := _layer(t)) != layer and other not in ALLOWED[layer])


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _layer(m)))
def test_each_subpackage_imports_only_the_layers_below_it(module):
    wrong = _violations(GRAPH, module)
    assert not wrong, f"{module} ({_layer(module)}/) imports {wrong}"


def test_no_module_outside_the_subpackages_but_the_facade():
    loose = sorted(m for m in GRAPH if _layer(m) is None)
    assert loose == [NAME, f"{NAME}.__main__"]


def test_no_import_cycles():
    # The facade (the package's own __init__) re-exports lazily and is left out.
    graph = {m: {t for t in ts if t in GRAPH and t not in (NAME, m)}
             for m, ts in GRAPH.items() if m != NAME}
    assert not _cycles(graph), f"import cycles: {_cycles(graph)}"


def test_the_checks_catch_a_wrong_direction_and_a_cycle():
    assert f"{NAME}.core.config" in GRAPH[f"{NAME}.core.plan"]  # relative imports resolved
    bad = {f"{NAME}.core.plan": {f"{NAME}.engine.local", f"{NAME}.core.config"},
           f"{NAME}.formats.jsonl": {f"{NAME}.app.cli"}}
    assert _violations(bad, f"{NAME}.core.plan") == [f"{NAME}.engine.local"]
    assert _violations(bad, f"{NAME}.formats.jsonl") == [f"{NAME}.app.cli"]
    # The job's engine may not reach up into what inspects a job; the inspection may use it.
    up = {f"{NAME}.engine.local": {f"{NAME}.inspect.analyze", f"{NAME}.engine.replan"},
          f"{NAME}.inspect.analyze": {f"{NAME}.engine.replan", f"{NAME}.app.fixes"}}
    assert _violations(up, f"{NAME}.engine.local") == [f"{NAME}.inspect.analyze"]
    assert _violations(up, f"{NAME}.inspect.analyze") == [f"{NAME}.app.fixes"]
    loop = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(loop) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
