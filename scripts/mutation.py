#!/usr/bin/env python3
"""Mutation testing of the pure core and the safety-critical edges (issue 20, item 3).

One small bug at a time: each mutant changes one site of one module, in a private copy
of the project, and the tests mapped to that module run against it (``pytest -x``, a
per-mutant timeout). A mutant is *killed* when the tests fail, *survived* when they
pass, *timeout* when they run past the limit (counted as killed, as mutmut does).

Operators (AST, one site each):
  compare   ``<``↔``<=``, ``>``↔``>=``, ``==``↔``!=``, ``is``↔``is not``, ``in``↔``not in``
  arith     ``+``↔``-``, ``*``↔``/`` (also in ``+=``/``-=``)
  const     an integer constant ``n`` → ``n + 1``
  bool      ``and``↔``or``, ``True``↔``False``
  not       ``not x`` → ``x``
  return    ``return x`` → ``return None``
  delete    a statement of a function body → ``pass``

Not mutated: docstrings, string constants, annotations, ``assert`` statements, imports,
``if TYPE_CHECKING`` blocks (changing them proves nothing about the tests).

Usage::

    .venv/bin/python scripts/mutation.py                       # every target module
    .venv/bin/python scripts/mutation.py core/plan.py --list   # the mutants, not run
    .venv/bin/python scripts/mutation.py --sample 40 --seed 1  # 40 mutants per module
    .venv/bin/python scripts/mutation.py --json out.json       # a machine-readable report

Slow (minutes per module): run on demand, not in CI. Needs only the project's venv.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "trajectory_compressor"

# module (under the package) -> the tests that speak for it (fast ones; the slow
# end-to-end files are left out on purpose: a mutant they alone would kill needs a
# faster test).
_DIALECT_TESTS = ["tests/test_kills_dialects.py", "tests/test_dialects.py",
                  "tests/test_convert.py"]
TARGETS: dict[str, list[str]] = {
    "core/plan.py": ["tests/test_mutation_kills.py", "tests/test_plan_spec.py",
                     "tests/test_plan.py"],
    "core/assemble.py": ["tests/test_metrics_by_hand.py", "tests/test_mutation_kills.py"],
    "core/metrics.py": ["tests/test_metrics_by_hand.py", "tests/test_mutation_kills.py",
                        "tests/test_metrics_merge.py"],
    "core/redact.py": ["tests/test_redact.py", "tests/test_mutation_kills.py",
                       "tests/test_summary_redaction.py"],
    "engine/checkpoint.py": ["tests/test_checkpoint.py"],
    "formats/jsonl.py": ["tests/test_reader_rejects.py", "tests/test_writer_routing.py"],
    "engine/writer.py": ["tests/test_writer_routing.py"],
    # issue 26, item 5: the newer modules (the kills_* files first: they are fast, so a
    # killed mutant stops early).
    **{f"dialects/{name}": _DIALECT_TESTS
       for name in ("__init__.py", "base.py", "messages.py", "openai.py", "sharegpt.py")},
    "core/extractive.py": ["tests/test_kills_extractive.py", "tests/test_summary.py"],
    "core/summary.py": ["tests/test_kills_summary.py", "tests/test_summary.py",
                        "tests/test_summary_bounds.py"],
    "app/report_data.py": ["tests/test_kills_report_data.py", "tests/test_html_report.py"],
    "app/gates.py": ["tests/test_kills_gates.py", "tests/test_gates.py"],
    "formats/registry.py": ["tests/test_kills_formats.py", "tests/test_parquet.py",
                            "tests/test_reader_rejects.py"],
    "formats/json_array.py": ["tests/test_kills_formats.py", "tests/test_dialects.py"],
    "formats/parquet.py": ["tests/test_parquet.py"],
    "counting/template.py": ["tests/test_template_counting.py"],
    "summarizers/pool.py": ["tests/test_kills_pool.py", "tests/test_llm_pool.py"],
    "summarizers/batch.py": ["tests/test_kills_batch_import.py", "tests/test_formats.py"],
    "engine/batch.py": ["tests/test_kills_batch_files.py", "tests/test_batch.py"],
}

COPY_IGNORE = shutil.ignore_patterns(".venv", ".git", ".hypothesis", ".mypy_cache",
                                     ".ruff_cache", ".pytest_cache", "__pycache__",
                                     "*.egg-info", "mutants")

_COMPARE_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In,
}
_ARITH_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
}
# (``return x`` is covered by the ``return`` operator: deleting it too would count twice.)
_DELETABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.If,
              ast.For, ast.While, ast.With, ast.Try, ast.Delete)


@dataclass
class Mutant:
    """One site of one module, changed one way."""

    module: str
    index: int  # the site's rank in the module (stable for an unchanged file)
    line: int
    operator: str
    original: str
    mutated: str
    status: str = "pending"  # killed, survived, timeout, error
    seconds: float = 0.0

    @property
    def where(self) -> str:
        return f"{PACKAGE}/{self.module}:{self.line}"

    @property
    def key(self) -> str:
        """How `mutation_equivalent.json` names it: line and text (an edit that moves the
        line detaches the reason, and the mutant shows as a survivor again: look again)."""
        return f"{self.module}:{self.line} {self.operator}: {self.original} -> {self.mutated}"


# -- finding sites -----------------------------------------------------------------------

def _skipped_nodes(tree: ast.Module) -> set[int]:
    """ids of the nodes not to mutate: docstrings, annotations, asserts, imports,
    ``if TYPE_CHECKING`` blocks, and everything inside them."""
    skipped: set[int] = set()

    def skip(node: ast.AST | None) -> None:
        if node is not None:
            skipped.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                skip(body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            skip(node.returns)
            for arg in [*node.args.args, *node.args.posonlyargs, *node.args.kwonlyargs,
                        node.args.vararg, node.args.kwarg]:
                if arg is not None:
                    skip(arg.annotation)
            for deco in node.decorator_list:
                skip(deco)
        if isinstance(node, ast.AnnAssign):
            skip(node.annotation)
        if isinstance(node, (ast.Assert, ast.Import, ast.ImportFrom)):
            skip(node)
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            skip(node)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip(node)  # a bare string: documentation
    return skipped


def _function_statements(tree: ast.Module) -> set[int]:
    """ids of the statements inside function bodies (at any depth)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in ast.walk(node):
                if child is not node and isinstance(child, ast.stmt):
                    inside.add(id(child))
    return inside


def _text(node: ast.AST) -> str:
    text = ast.unparse(node).strip().splitlines()[0] if ast.unparse(node).strip() else ""
    return text if len(text) <= 70 else text[:67] + "..."


class _Site:
    """A way to change one node: ``apply(node)`` mutates a deep copy in place."""

    def __init__(self, path: tuple[int, ...], operator: str, line: int, before: str,
                 after: str, apply_name: str, extra: object = None) -> None:
        self.path, self.operator, self.line = path, operator, line
        self.before, self.after, self.apply_name, self.extra = before, after, apply_name, extra


def _walk_with_paths(tree: ast.AST) -> Iterator[tuple[tuple[int, ...], ast.AST]]:
    """Every node with a path that finds it again in a deep copy (field/index steps)."""
    stack: list[tuple[tuple[int, ...], ast.AST]] = [((), tree)]
    while stack:
        path, node = stack.pop(0)
        yield path, node
        for i, child in enumerate(_children(node)):
            stack.append(((*path, i), child))


def _children(node: ast.AST) -> list[ast.AST]:
    out: list[ast.AST] = []
    for _name, value in ast.iter_fields(node):
        if isinstance(value, ast.AST):
            out.append(value)
        elif isinstance(value, list):
            out.extend(v for v in value if isinstance(v, ast.AST))
    return out


def _node_at(tree: ast.AST, path: tuple[int, ...]) -> ast.AST:
    node = tree
    for step in path:
        node = _children(node)[step]
    return node


def find_sites(source: str) -> list[_Site]:
    """Every mutation site of a module, in a stable order."""
    tree = ast.parse(source)
    skipped = _skipped_nodes(tree)
    in_function = _function_statements(tree)
    sites: list[_Site] = []
    for path, node in _walk_with_paths(tree):
        if id(node) in skipped:
            continue
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                swap = _COMPARE_SWAP.get(type(op))
                if swap is not None:
                    after = copy.deepcopy(node)
                    after.ops[k] = swap()
                    sites.append(_Site(path, "compare", line, _text(node), _text(after),
                                       "compare", k))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)):
            swap_op = _ARITH_SWAP.get(type(node.op))
            if swap_op is not None:
                after = copy.deepcopy(node)
                after.op = swap_op()
                sites.append(_Site(path, "arith", line, _text(node), _text(after), "arith"))
        elif isinstance(node, ast.BoolOp):
            after = copy.deepcopy(node)
            after.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            sites.append(_Site(path, "bool", line, _text(node), _text(after), "boolop"))
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                sites.append(_Site(path, "bool", line, repr(node.value), repr(not node.value),
                                   "flip"))
            elif isinstance(node.value, int):
                sites.append(_Site(path, "const", line, repr(node.value),
                                   repr(node.value + 1), "plus_one"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            sites.append(_Site(path, "not", line, _text(node), _text(node.operand), "unnot"))
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            sites.append(_Site(path, "return", line, _text(node), "return None", "ret_none"))
        if (isinstance(node, ast.stmt) and id(node) in in_function
                and isinstance(node, _DELETABLE)):
            sites.append(_Site(path, "delete", line, _text(node), "pass", "delete"))
    return sites


def apply_site(source: str, site: _Site) -> str:
    """The module's source with ``site`` changed (the whole module unparsed)."""
    tree = ast.parse(source)
    node = _node_at(tree, site.path)
    if site.apply_name == "compare":
        assert isinstance(node, ast.Compare) and isinstance(site.extra, int)
        node.ops[site.extra] = _COMPARE_SWAP[type(node.ops[site.extra])]()
    elif site.apply_name == "arith":
        assert isinstance(node, (ast.BinOp, ast.AugAssign))
        node.op = _ARITH_SWAP[type(node.op)]()
    elif site.apply_name == "boolop":
        assert isinstance(node, ast.BoolOp)
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif site.apply_name == "flip":
        assert isinstance(node, ast.Constant)
        node.value = not node.value
    elif site.apply_name == "plus_one":
        assert isinstance(node, ast.Constant)
        node.value = node.value + 1
    elif site.apply_name in ("unnot", "ret_none", "delete"):
        parent = _node_at(tree, site.path[:-1])
        replacement: ast.AST
        if site.apply_name == "unnot":
            assert isinstance(node, ast.UnaryOp)
            replacement = node.operand
        elif site.apply_name == "ret_none":
            replacement = ast.Return(value=ast.Constant(value=None))
        else:
            replacement = ast.Pass()
        _replace_child(parent, node, replacement)
    tree = ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"


def _replace_child(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return
    raise LookupError("child not found")


# -- running -----------------------------------------------------------------------------

# pytest, with a hypothesis profile that makes property tests repeatable and immune to a
# loaded machine: derandomized (the same examples every run) and no per-example deadline.
_BOOT = ("import sys, hypothesis, pytest; "
         "hypothesis.settings.register_profile('mutation', derandomize=True, deadline=None, "
         "database=None); hypothesis.settings.load_profile('mutation'); "
         "sys.exit(pytest.main(sys.argv[1:]))")
EXTRA_PYTEST_ARGS: list[str] = []


def run_tests(work: Path, tests: list[str], timeout: float) -> tuple[str, float]:
    """``killed``/``survived``/``timeout`` for the tests in ``work`` as they stand."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(work)}
    command = [sys.executable, "-c", _BOOT, "-x", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", *EXTRA_PYTEST_ARGS, *tests]
    started = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started
    seconds = time.monotonic() - started
    if proc.returncode == 0:
        return "survived", seconds
    if proc.returncode == 5:
        return "error", seconds  # no tests ran: the mapping is wrong
    return "killed", seconds


def mutants_of(module: str, source: str) -> list[tuple[Mutant, _Site]]:
    return [(Mutant(module, i, s.line, s.operator, s.before, s.after), s)
            for i, s in enumerate(find_sites(source))]


def run_module(module: str, tests: list[str], args: argparse.Namespace,
               work: Path) -> tuple[list[Mutant], int, float]:
    target = work / PACKAGE / module
    source = (ROOT / PACKAGE / module).read_text(encoding="utf-8")
    found = mutants_of(module, source)
    total = len(found)
    if args.sample and args.sample < total:
        chosen = sorted(random.Random(f"{args.seed}:{module}").sample(range(total), args.sample))
        found = [found[i] for i in chosen]
    if args.only:
        found = [(m, s) for m, s in found if m.index in args.only]
    # The unmutated module, unparsed as every mutant is: the tests must pass on it.
    target.write_text(ast.unparse(ast.parse(source)) + "\n", encoding="utf-8")
    status, baseline = run_tests(work, tests, args.timeout * 4)
    if status != "survived":
        raise SystemExit(f"{module}: the tests fail on the unmutated module ({status}); "
                         f"run them: {' '.join(tests)}")
    limit = max(args.timeout, baseline * 3 + 5)
    results = []
    try:
        for mutant, site in found:
            target.write_text(apply_site(source, site), encoding="utf-8")
            mutant.status, mutant.seconds = run_tests(work, tests, limit)
            results.append(mutant)
            mark = {"killed": ".", "survived": "S", "timeout": "T", "error": "E"}
            print(mark[mutant.status], end="", flush=True)
    finally:
        target.write_text(source, encoding="utf-8")
    print()
    return results, total, baseline


def load_equivalent(path: Path) -> dict[str, str]:
    """`Mutant.key` -> why that surviving mutant is equivalent (a JSON object)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules under trajectory_compressor/ "
                        f"(default: {', '.join(TARGETS)})")
    parser.add_argument("--sample", type=int, default=0,
                        help="run this many mutants per module, drawn with --seed (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="run only these mutant indices")
    parser.add_argument("--tests", nargs="+", help="run these test files instead of the "
                        "module's mapped ones (e.g. to measure an older test set)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per mutant at least (3x the clean run + 5 if longer)")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments, e.g. "
                        "\"-k 'not test_x'\" to leave out a test that fails on its own")
    parser.add_argument("--list", action="store_true", help="list the mutants; run nothing")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--equivalent", type=Path,
                        default=ROOT / "scripts" / "mutation_equivalent.json",
                        help="known equivalent mutants with their reasons")
    args = parser.parse_args(argv)
    EXTRA_PYTEST_ARGS[:] = shlex.split(args.pytest_args)
    modules = args.modules or list(TARGETS)
    unknown = [m for m in modules if m not in TARGETS]
    if unknown:
        parser.error(f"no tests mapped for {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    if args.list:
        for module in modules:
            source = (ROOT / PACKAGE / module).read_text(encoding="utf-8")
            for m, _ in mutants_of(module, source):
                print(f"{m.where} #{m.index} {m.operator}: {m.original} -> {m.mutated}")
        return 0
    equivalent = load_equivalent(args.equivalent)
    report: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        work = Path(tmp) / "project"
        shutil.copytree(ROOT, work, ignore=COPY_IGNORE, symlinks=True)
        for module in modules:
            tests = args.tests or TARGETS[module]
            print(f"== {module} ({' '.join(tests)})", flush=True)
            started = time.monotonic()
            results, total, baseline = run_module(module, tests, args, work)
            survivors = [m for m in results if m.status == "survived"]
            eq = [m for m in survivors if m.key in equivalent]
            killed = sum(m.status in ("killed", "timeout") for m in results)
            ran = len(results)
            non_eq = ran - len(eq)
            score = killed / non_eq if non_eq else 1.0
            report[module] = {
                "tests": tests, "mutants": total, "ran": ran, "killed": killed,
                "timeout": sum(m.status == "timeout" for m in results),
                "survived": len(survivors), "equivalent": len(eq),
                "errors": sum(m.status == "error" for m in results),
                "score_non_equivalent": round(score, 4),
                "clean_run_seconds": round(baseline, 1),
                "seconds": round(time.monotonic() - started, 1),
                "survivors": [{**asdict(m), "where": m.where,
                               "equivalent": equivalent.get(m.key)}
                              for m in survivors],
            }
            print(f"   killed {killed}/{ran} ({total} mutants in the module), "
                  f"survived {len(survivors)} ({len(eq)} equivalent), "
                  f"score {score:.1%} of non-equivalent", flush=True)
            for m in survivors:
                why = equivalent.get(m.key)
                print(f"   survived {m.where} #{m.index} {m.operator}: {m.original} -> "
                      f"{m.mutated}" + (f"  [equivalent: {why}]" if why else ""))
    print("\nmodule                 killed/ran  equivalent  score(non-eq)")
    for module, r in report.items():
        print(f"{module:22} {r['killed']:>5}/{r['ran']:<5} {r['equivalent']:>9}  "
              f"{r['score_non_equivalent']:.1%}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
