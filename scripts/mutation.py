#!/usr/bin/env python3
"""Mutation testing of every module of the package's subpackages (issues 20, 26 and 40).

One small bug at a time: each mutant changes one site of one module, in a private copy of
the project, and the tests that run that site run against it (``pytest -x``, a per-mutant
timeout). A mutant is *killed* when a test fails (a test that also fails on the unmutated
module says nothing: see below), *survived* when they all pass, *timeout* when they run
past the limit (counted as killed, as mutmut does).

Which tests (the coverage map). The in-process tests (the quick tier, ``pytest -m quick``)
run once under coverage with a context per test (pytest-cov's ``--cov-context=test``):
which tests run each line of the package, and how long each test takes. The map is kept
in ``.mutation-cache/coverage-map.json`` and built again when the package, the tests or
their data change (7-8 minutes on two shared cores). A mutant runs the tests that run its
lines (the mutated node's span and its statement's first line), fastest first. A site that
runs when its module is imported (module constants, class bodies and decorators, default
arguments, a function called at import) runs every test that runs a line of the module
or whose file imports it (itself or through a helper of tests/): a test can use a frozen
dataclass without running a line of its module. A mutant on a line no in-process test runs
is *survived* with the note "no test runs this line": the place for a new test (code only
processes started by tests reach, the sharded and Ray engines or the llama.cpp server,
is there too). ``--select targets`` runs the hand-mapped test files of `TARGETS`, and
``--tests`` the given files, whole, after one clean run of them per module (the way of
issue 20's figures).

How (the fork server). The parent imports pytest, hypothesis and the third-party modules
the tests use (transformers, tokenizers, pyarrow, datasets, aiohttp, ...: the list the
map's run recorded) once, never the package or the tests, with bytecode writing off and
no ``__pycache__`` in the copies (a mutant written within the same second with the same
size must never meet a stale .pyc). For each run it writes the module into a worker's
copy and forks a child: ``pytest.main`` on the selected tests with that copy first on
sys.path (hypothesis derandomized, no deadline, no database: a result does not depend on
the machine's load). On timeout the child's process group is killed. The tests run in
stages, each a child of its own: the fastest of the first two test files, then of the next
eight, then the rest (a child pays 0.1-0.7 s to collect each file it is given). The first
failing test is run once more on the unmutated module (once per module and test); one that
fails there too (a flaky test, or one not at home in the fork server) is left out of that
module's selections and reported, and the mutant runs again without it. ``--jobs N``
runs N mutants at once, each worker in its own copy.

``--budget S``: a mutant's tests run, fastest first, only while their expected seconds
(measured under coverage) add up to S (at least one test). A survivor then says how many
covering tests it left out; a later run with a larger budget, or none, runs only those.
In samples of every module, 20 s changed no result but the survivors' cost: the kills
come from fast tests, and a survivor pays for every test that runs its line (up to 5
minutes where the end-to-end tests run it).

Results. Each finished mutant is appended as a JSON line to ``--results``
(``.mutation-cache/results.jsonl``: module, index, line, operator, text, status, wall and
CPU seconds, tests run, the killing test, a note), and a run skips the mutants already
there: a killed one while its module's text is unchanged, a survivor while nothing the
map depends on changed (a new test may kill it). Stopped (Ctrl-C, ``kill``), the same
command goes on from where it was. The kills of every earlier run are kept in the
repository (``scripts/mutation-results.jsonl.gz``, written by ``mutation_status.py
--save``) and reused the same way by the coverage selection.
``scripts/mutation_equivalent.json`` names the surviving mutants that no test can tell
apart, with the reason.

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

    .venv/bin/python scripts/mutation.py --map-only                # build the map; per module
    .venv/bin/python scripts/mutation.py core/plan.py --list       # the mutants, not run
    .venv/bin/python scripts/mutation.py core/plan.py app/gates.py # some modules, every mutant
    .venv/bin/python scripts/mutation.py --sample 3 --seed 1       # 3 mutants of every module
    nice -n 19 .venv/bin/python scripts/mutation.py --budget 20 --jobs 2 --json pass1.json
    nice -n 19 .venv/bin/python scripts/mutation.py --jobs 2 --json pass2.json  # the rest
    .venv/bin/python scripts/mutation.py core/plan.py --select targets  # the mapped files

Cost: a sample of 30 mutants per module (2,273 of the 11,987 in the 84 modules with
any; `--sample 30 --budget 20 --jobs 2`) took 2.3 CPU-hours, about 95 minutes on two
shared cores; the whole pass at that rate is about 12 CPU-hours (BENCHMARKS.md,
"Mutation score"). Not in CI. Needs the dev extra (pytest-cov, coverage).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import gzip
import hashlib
import importlib
import json
import os
import random
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
PACKAGE = "trajectory_compressor"
# Every kill on record, for the module texts they were run on (scripts/mutation_status.py).
KEPT = ROOT / "scripts" / "mutation-results.jsonl.gz"
# What issue 26 item 5 and issue 40 item 8 ask to measure: every module of these subpackages
# (app/ and live/ since issue 40; before it, of app/ only app/gates.py).
SCOPE_DIRS = ("core", "dialects", "counting", "formats", "summarizers", "engine", "inspect",
              "app", "live")
SCOPE_FILES: tuple[str, ...] = ()
CACHE = ROOT / ".mutation-cache"
# The in-process tests: the ones the coverage map is built from (tests/conftest.py sorts
# every test that starts no process, Ray, llama.cpp or browser into `quick`).
MAP_MARKER = "quick"
MAP_FORMAT = 3  # bump when the map's content or the way it is built changes
# What the map's key hashes: a change to any of these rebuilds the map.
MAP_INPUTS = (PACKAGE, "tests", "data_samples", "configs", "pyproject.toml")

# module (under the package) -> hand-picked test files (issues 20 and 26): the selection of
# `--select targets`, the way the figures before the coverage map were measured (fast
# files; the slow end-to-end files were left out on purpose).
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
                                     "*.pyc", "*.egg-info", "mutants", ".mutation-cache",
                                     ".coverage", ".coverage.*")

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
    seconds: float = 0.0  # wall time of its runs
    cpu: float = 0.0  # CPU time of its runs
    tests_run: int = 0  # tests that ran against it (to the first failure: pytest -x)
    killed_by: str = ""  # the first test that failed
    note: str = ""  # e.g. "no test runs this line"
    left_out: int = 0  # a survivor's covering tests not run: over the --budget
    budget: float = 0.0  # the --budget it ran with (0: none)

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
        # The lines whose tests can tell the mutant apart (set by `find_sites`): the node's
        # own span and its statement's first line; `module_level`: the statement runs when
        # the module is imported (module constants, class bodies, decorators, defaults),
        # so every test that uses the module depends on it.
        self.lines: tuple[int, ...] = (line,)
        self.module_level = False


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
    for site in sites:
        node, statement = tree, None
        for step in site.path:
            node = _children(node)[step]
            if isinstance(node, ast.stmt):
                statement = node
        span = set(range(getattr(node, "lineno", site.line),
                         (getattr(node, "end_lineno", None) or site.line) + 1))
        if statement is not None:
            span.add(statement.lineno)
        site.lines = tuple(sorted(span))
        site.module_level = statement is None or id(statement) not in in_function
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




# -- the coverage map: which tests run each line ------------------------------------------

NO_TEST = "no test runs this line"


def _copy_project(dest: Path) -> None:
    """A private copy of the project, without caches: no ``__pycache__`` may exist in it
    (with bytecode writing off, every module is compiled from its text as it stands)."""
    shutil.copytree(ROOT, dest, ignore=COPY_IGNORE, symlinks=True)
    stale = [p for p in dest.rglob("__pycache__")]
    if stale:
        raise SystemExit(f"{stale[0]}: a bytecode cache in the work copy")


def inputs_hash(root: Path = ROOT) -> str:
    """What the map depends on: the package, the tests, their data, the settings."""
    digest = hashlib.sha256(f"{MAP_FORMAT} {MAP_MARKER} {sys.version}".encode())
    for name in MAP_INPUTS:
        base = root / name
        paths = [base] if base.is_file() else sorted(
            p for p in base.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
        for path in paths:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@dataclass
class ModuleCoverage:
    """One module's lines: which tests run each (an empty set: only at import time)."""

    lines: dict[int, set[int]]
    imported: set[int]  # lines run with no test's context: when the module was imported
    tests: set[int]  # every test that runs a line of the module
    # the tests whose file imports the module (itself or through a helper of tests/): they
    # may use its classes and constants without running a line of it (a frozen
    # dataclass's generated __setattr__ is not the module's code)
    importers: set[int]


@dataclass
class CoverageMap:
    """The in-process tests, and the lines of the package each one runs."""

    key: str
    tests: list[str]  # node ids
    durations: list[float]  # seconds each (setup, call, teardown; measured under coverage)
    failed: set[int]  # failed in the map's own run: never selected
    modules: dict[str, ModuleCoverage]
    preload: list[str]  # the third-party modules the tests import
    seconds: float  # how long the map's run took

    def save(self, path: Path) -> None:
        data = {
            "key": self.key, "seconds": round(self.seconds, 1), "tests": self.tests,
            "durations": [round(d, 4) for d in self.durations],
            "failed": sorted(self.failed), "preload": self.preload,
            "modules": {m: {"lines": {str(k): sorted(v) for k, v in sorted(c.lines.items())},
                            "imported": sorted(c.imported), "tests": sorted(c.tests),
                            "importers": sorted(c.importers)}
                        for m, c in sorted(self.modules.items())},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data) + "\n", encoding="utf-8")
        temporary.replace(path)

    @classmethod
    def load(cls, path: Path) -> CoverageMap:
        data = json.loads(path.read_text(encoding="utf-8"))
        modules = {m: ModuleCoverage({int(k): set(v) for k, v in c["lines"].items()},
                                     set(c["imported"]), set(c["tests"]), set(c["importers"]))
                   for m, c in data["modules"].items()}
        return cls(data["key"], data["tests"], data["durations"], set(data["failed"]),
                   modules, data["preload"], data["seconds"])

    def select(self, module: str, site: _Site) -> list[str]:
        """The tests that run the site, fastest first (none: no test runs its lines).

        A site run when its module is imported (module level, or a function called then)
        may change what every test of the module sees: every test that runs a line of the
        module or whose file imports it runs it."""
        info = self.modules.get(module)
        if info is None:
            return []
        run = [line for line in site.lines if line in info.lines]
        if not run:
            return []
        chosen: set[int] = set().union(*(info.lines[line] for line in run))
        if site.module_level or info.imported.intersection(run):
            chosen |= info.tests | info.importers
        chosen -= self.failed
        return [self.tests[i] for i in sorted(chosen, key=lambda i: (self.durations[i], i))]

    def within(self, tests: list[str], budget: float) -> int:
        """How many of ``tests`` (fastest first) fit in ``budget`` expected seconds: at
        least one (a line only a slow test runs is still tested); all with no budget."""
        if budget <= 0:
            return len(tests)
        where, spent = self._where(), 0.0
        for n, test in enumerate(tests):
            spent += self.durations[where[test]]
            if spent > budget:
                return max(n, 1)
        return len(tests)

    def seconds_of(self, tests: list[str]) -> float:
        where = self._where()
        return sum(self.durations[where[t]] for t in tests if t in where)

    def _where(self) -> dict[str, int]:
        if not hasattr(self, "_index"):
            self._index = {t: i for i, t in enumerate(self.tests)}
        return self._index


def _hypothesis_profile() -> None:
    """Property tests repeatable and immune to a loaded machine: derandomized (the same
    examples every run, in the map's run too), no per-example deadline, no database."""
    import hypothesis

    hypothesis.settings.register_profile("mutation", derandomize=True, deadline=None,
                                         database=None)
    hypothesis.settings.load_profile("mutation")


def _own_paths() -> set[str]:
    """sys.path entries that point into the project itself (this script's folder)."""
    return {"", str(SCRIPT.parent), str(ROOT)}


def _third_party_modules(*roots: Path) -> list[str]:
    """The modules imported now that are not the project's, its tests' or this script's
    (the virtual environment may well sit inside the project)."""
    own = tuple(str(root / name) for root in roots for name in (PACKAGE, "tests", "scripts"))
    names = []
    for name, module in list(sys.modules.items()):
        top = name.split(".")[0]
        if module is None or top in (PACKAGE, "tests", "conftest", "__main__", "__mp_main__"):
            continue
        if str(getattr(module, "__file__", None) or "").startswith(own):
            continue
        names.append(name)
    return sorted(names)


def _coverage_run(work: Path, out: Path, marker: str) -> int:
    """In its own process: the in-process tests under coverage, a context per test."""
    import pytest

    os.chdir(work)
    sys.path[:] = [str(work), *(p for p in sys.path if p not in _own_paths())]
    sys.dont_write_bytecode = True
    sys.argv = ["pytest"]
    _hypothesis_profile()
    durations: dict[str, float] = {}
    failed: set[str] = set()
    modules: list[str] = []

    class Recorder:
        def pytest_runtest_logreport(self, report: Any) -> None:
            durations[report.nodeid] = durations.get(report.nodeid, 0.0) + report.duration
            if report.failed:
                failed.add(report.nodeid)

        def pytest_sessionfinish(self) -> None:
            modules.extend(_third_party_modules(work, ROOT))

    code = pytest.main(["-q", "-p", "no:cacheprovider", "-o", "addopts=", "-m", marker,
                        f"--cov={PACKAGE}", "--cov-context=test", "--cov-report=", "tests"],
                       plugins=[Recorder()])
    out.write_text(json.dumps({"exit": int(code), "durations": durations,
                               "failed": sorted(failed), "preload": modules}),
                   encoding="utf-8")
    return 0


def _dotted(module: str) -> str:
    """``core/plan.py`` -> ``trajectory_compressor.core.plan``."""
    return ".".join([PACKAGE, *module.removesuffix(".py").split("/")]).removesuffix(".__init__")


def _test_files_importing(root: Path) -> dict[str, set[str]]:
    """module -> the test files (``tests/test_x.py``) that import it, themselves or
    through the helpers of tests/ they import (any depth; not through the package)."""
    imports: dict[str, set[str]] = {}
    for path in sorted((root / "tests").glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative, from inside tests/
                    base = ".".join(filter(None, ["tests", base]))
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names)
        imports[f"tests.{path.stem}"] = names
    users: dict[str, set[str]] = {}
    package = root / PACKAGE
    dotted = {_dotted(p.relative_to(package).as_posix()): p.relative_to(package).as_posix()
              for p in package.rglob("*.py")}
    for helper in imports:
        if not helper.split(".")[-1].startswith("test_"):
            continue
        seen, todo = {helper}, [helper]
        while todo:
            for name in imports.get(todo.pop(), ()):
                if name in imports and name not in seen:
                    seen.add(name)
                    todo.append(name)
                if name in dotted:
                    users.setdefault(dotted[name], set()).add(
                        "tests/" + helper.removeprefix("tests.") + ".py")
    return users


def build_map(key: str) -> CoverageMap:
    """Run the in-process tests once under coverage (in a copy of the project) and read
    which lines each test ran."""
    import coverage

    CACHE.mkdir(exist_ok=True)
    log = CACHE / "coverage-run.log"
    print(f"building the coverage map: the in-process tests (pytest -m {MAP_MARKER}) under "
          f"coverage, once per change of the sources or tests (log: {log})", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutation-map-") as tmp:
        work = Path(tmp) / "project"
        _copy_project(work)
        out = Path(tmp) / "tests.json"
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(work),
               "COVERAGE_FILE": str(work / ".coverage")}
        with log.open("w", encoding="utf-8") as sink:
            proc = subprocess.Popen([sys.executable, str(SCRIPT), "--coverage-run", str(work),
                                     str(out), MAP_MARKER], cwd=work, env=env, stdout=sink,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                beat = started + 60
                while proc.poll() is None:
                    time.sleep(1)
                    if time.monotonic() >= beat:
                        print(f"  coverage run: {(beat - started) / 60:.0f} min", flush=True)
                        beat += 60
            except BaseException:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
        if not out.exists():
            raise SystemExit(f"the coverage run failed (exit {proc.returncode}); see {log}")
        recorded = json.loads(out.read_text(encoding="utf-8"))
        tests = sorted(recorded["durations"])
        index = {t: i for i, t in enumerate(tests)}
        data = coverage.CoverageData(basename=str(work / ".coverage"))
        data.read()
        package = (work / PACKAGE).resolve()
        modules: dict[str, ModuleCoverage] = {}
        for filename in data.measured_files():
            try:
                module = Path(filename).resolve().relative_to(package).as_posix()
            except ValueError:
                continue
            info = ModuleCoverage({}, set(), set(), set())
            for line, contexts in (data.contexts_by_lineno(filename) or {}).items():
                who = info.lines.setdefault(line, set())
                for context in contexts:
                    nodeid = context.rsplit("|", 1)[0]  # pytest-cov: "<node id>|<phase>"
                    if nodeid in index:
                        who.add(index[nodeid])
                    elif not context:
                        info.imported.add(line)
                info.tests |= who
            modules[module] = info
        users = _test_files_importing(work)
        for module, info in modules.items():
            files = users.get(module, set())
            info.importers = {i for t, i in index.items() if t.split("::")[0] in files}
    cmap = CoverageMap(key, tests, [recorded["durations"][t] for t in tests],
                       {index[t] for t in recorded["failed"] if t in index}, modules,
                       recorded["preload"], time.monotonic() - started)
    print(f"coverage map: {len(tests)} tests ({len(cmap.failed)} failed: never selected), "
          f"{len(modules)} modules, {cmap.seconds / 60:.1f} min", flush=True)
    for i in sorted(cmap.failed):
        print(f"  failed in the map's run: {tests[i]}")
    return cmap


def load_or_build_map(rebuild: bool = False, key: str | None = None) -> CoverageMap:
    key = key or inputs_hash()
    path = CACHE / "coverage-map.json"
    if path.exists() and not rebuild:
        cmap = CoverageMap.load(path)
        if cmap.key == key:
            return cmap
        print("the sources or tests changed since the coverage map was built", flush=True)
    cmap = build_map(key)
    cmap.save(path)
    return cmap


# -- the fork server -----------------------------------------------------------------------

# Imported once by the parent, before any fork: what makes a child cheap. Never the package
# or the tests: each child imports them afresh from its copy of the project.
PRELOAD = ("pytest", "hypothesis", "transformers", "tokenizers", "pyarrow", "pyarrow.parquet",
           "datasets", "aiohttp", "orjson", "yaml", "typer", "typer.testing", "jinja2")


def preload(names: list[str]) -> None:
    # tests/conftest.py sets this before transformers is imported: so must the parent.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in [*PRELOAD, *names]:
            try:
                importlib.import_module(name)
            except BaseException:
                continue
    leaked = [n for n in sys.modules if n.split(".")[0] in (PACKAGE, "tests", "conftest")]
    if leaked:
        raise SystemExit(f"preloading imported {leaked[0]}: the children would not see "
                         "their own copy of it")


@dataclass
class _Run:
    """One pytest run in a worker's copy, with ``source`` as the module's text."""

    kind: str  # "mutant", "verify" (a test on the unmutated module) or "baseline"
    module: str
    source: str
    tests: list[str]  # node ids (run only them, in this order) or files (`by_id` False)
    by_id: bool
    limit: float
    mutant: Mutant | None = None
    key: tuple[str, str] | None = None  # a verification's (module, test)
    extra: tuple[str, ...] = ()
    seconds_before: float = 0.0  # earlier runs of the same mutant
    cpu_before: float = 0.0
    ran_before: int = 0
    later: list[list[str]] | None = None  # the stages still to run if this one passes


@dataclass
class _Outcome:
    code: int | None  # pytest's exit code; None: timed out
    seconds: float
    cpu: float = 0.0
    failed: str = ""  # the first failing test, "collect:<node>" or "" (none known)
    ran: int = 0
    found: int = 0
    imported_from: str = ""
    log: str = ""


class _Worker:
    """A private copy of the project and at most one child running in it."""

    def __init__(self, number: int, sources: dict[str, str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"mutation-{number}-"))
        self.root = self.dir / "project"
        _copy_project(self.root)
        self.sources = sources
        self.written: str | None = None  # the module whose text is not the original
        self.log = self.dir / "child.log"
        self.result = self.dir / "result.json"
        self.pid = 0
        self.pidfd = -1
        self.started = 0.0
        self.run: _Run | None = None

    def put(self, module: str, source: str) -> None:
        if self.written is not None and self.written != module:
            (self.root / PACKAGE / self.written).write_text(self.sources[self.written],
                                                           encoding="utf-8")
        (self.root / PACKAGE / module).write_text(source, encoding="utf-8")
        self.written = module


def _child_plugin(wanted: list[str] | None) -> Any:
    import pytest

    order = {t: i for i, t in enumerate(wanted or [])}

    class Child:
        found = 0
        ran = 0
        failed = ""

        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, config: Any, items: list[Any]) -> None:
            if wanted is None:
                self.found = len(items)
                return
            keep = sorted((i for i in items if i.nodeid in order), key=lambda i: order[i.nodeid])
            drop = [i for i in items if i.nodeid not in order]
            items[:] = keep
            if drop:
                config.hook.pytest_deselected(items=drop)
            self.found = len(keep)

        def pytest_runtest_logreport(self, report: Any) -> None:
            if report.when == "setup":
                self.ran += 1
            if report.failed and not self.failed:
                self.failed = report.nodeid

        def pytest_collectreport(self, report: Any) -> None:
            if report.failed and not self.failed:
                self.failed = f"collect:{report.nodeid}"

    return Child()


def _child(worker: _Worker, args: list[str], wanted: list[str] | None) -> NoReturn:
    """The forked child: pytest on the worker's copy, its result in a file. Never returns."""
    code = 70
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        fd = os.open(worker.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.chdir(worker.root)
        sys.path[:] = [str(worker.root), *(p for p in sys.path if p not in _own_paths())]
        os.environ["PYTHONPATH"] = str(worker.root)  # for the processes tests start
        sys.argv = ["pytest"]
        import pytest

        plugin = _child_plugin(wanted)
        code = int(pytest.main(args, plugins=[plugin]))
        package = sys.modules.get(PACKAGE)
        worker.result.write_text(json.dumps({
            "failed": plugin.failed, "ran": plugin.ran, "found": plugin.found,
            "imported_from": str(getattr(package, "__file__", "") or "")}), encoding="utf-8")
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class Server:
    """Forks a child per run from a parent that has the heavy imports done already."""

    def __init__(self, jobs: int, sources: dict[str, str], preload_names: list[str],
                 pytest_args: list[str]) -> None:
        sys.dont_write_bytecode = True
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        preload(preload_names)
        _hypothesis_profile()
        self.pytest_args = pytest_args
        self.workers = [_Worker(n, sources) for n in range(jobs)]
        import gc
        import threading

        if threading.active_count() > 1:
            print(f"warning: {threading.active_count() - 1} threads in the parent after the "
                  "imports: a forked child may hang on a lock one of them held", flush=True)
        gc.freeze()  # the children share the parent's objects without copying their pages

    def close(self) -> None:
        for worker in self.workers:
            if worker.pid:
                self._reap(worker, kill=True)
            shutil.rmtree(worker.dir, ignore_errors=True)

    def start(self, worker: _Worker, run: _Run) -> None:
        worker.put(run.module, run.source)
        # (pytest warns that the preloaded plugins' modules cannot be rewritten: noise)
        base = ["-x", "-q", "--tb=short", "-p", "no:cacheprovider", "-o", "addopts=",
                "-W", "ignore::pytest.PytestAssertRewriteWarning",
                *self.pytest_args, *run.extra]
        if run.by_id:
            # pytest is given each test's function (a parametrized test's every case is
            # collected) and the plugin keeps the wanted cases in the wanted order.
            targets = list(dict.fromkeys(t.split("[")[0] for t in run.tests))
            wanted: list[str] | None = run.tests
        else:
            targets, wanted = list(run.tests), None
        worker.result.unlink(missing_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(worker, [*base, *targets], wanted)
        with contextlib.suppress(OSError):  # the child did it first, or has ended
            os.setpgid(pid, pid)
        worker.pid, worker.run, worker.started = pid, run, time.monotonic()
        worker.pidfd = os.pidfd_open(pid)

    def _reap(self, worker: _Worker, kill: bool) -> tuple[int | None, float]:
        # The child is a zombie or alive: its process group id cannot have been reused,
        # so killing the group (what its tests left running, or all of it) is safe.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGKILL)
        _, status, usage = os.wait4(worker.pid, 0)
        os.close(worker.pidfd)
        worker.pid, worker.pidfd = 0, -1
        # CPU seconds of the child and the processes it waited for: less at the mercy of
        # the machine's load than the wall time.
        cpu = usage.ru_utime + usage.ru_stime
        return (None if kill else os.waitstatus_to_exitcode(status)), cpu

    def wait(self) -> list[tuple[_Worker, _Run, _Outcome]]:
        """Block until at least one run ends (or times out); its outcome."""
        busy = [w for w in self.workers if w.pid]
        if not busy:
            return []
        now = time.monotonic()
        delay = min(w.started + w.run.limit - now for w in busy if w.run)
        ready, _, _ = select.select([w.pidfd for w in busy], [], [], max(0.0, delay))
        done = []
        for worker in busy:
            run = worker.run
            assert run is not None
            seconds = time.monotonic() - worker.started
            if worker.pidfd in ready:
                code, cpu = self._reap(worker, kill=False)
            elif seconds >= run.limit:
                code, cpu = self._reap(worker, kill=True)
            else:
                continue
            outcome = _Outcome(code, seconds, cpu=cpu)
            if worker.result.exists():
                data = json.loads(worker.result.read_text(encoding="utf-8"))
                outcome.failed, outcome.ran = data["failed"], data["ran"]
                outcome.found, outcome.imported_from = data["found"], data["imported_from"]
            if code not in (0, 1, None) or run.kind != "mutant" or not worker.result.exists():
                outcome.log = _tail(worker.log)
            if outcome.imported_from and not outcome.imported_from.startswith(
                    str(worker.root)):
                raise SystemExit(f"the child imported {PACKAGE} from {outcome.imported_from},"
                                 f" not from its copy {worker.root}")
            worker.run = None
            done.append((worker, run, outcome))
        return done


def _tail(path: Path, lines: int = 30) -> str:
    """The end of a child's output, without pytest's warnings summary."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    text = re.sub(r"=+ warnings summary =+\n.*?(?=^=+ )", "", text, flags=re.S | re.M)
    return "\n".join(text.splitlines()[-lines:])


# -- scheduling: mutants, the checks that their killing tests pass without them ------------

class Campaign:
    """The runs of one invocation: mutants, and the runs that make their results honest.

    A mutant is *killed* when a selected test fails. With a per-mutant selection there is
    no single clean run of "the module's tests" to make first (the old baseline), so the
    first failing test is run once more on the unmutated module (once per module and
    test): if it fails there too, it says nothing of the mutant; it is left out of that
    module's selections (reported) and the mutant runs again without it. With
    ``--tests``/``--select targets`` the files run whole after one clean run of them per
    module, as before."""

    def __init__(self, server: Server, args: argparse.Namespace, sources: dict[str, str],
                 cmap: CoverageMap | None, record: Any) -> None:
        self.server, self.args, self.sources, self.cmap = server, args, sources, cmap
        self.record = record  # called with each finished mutant
        self.queue: deque[_Run] = deque()
        self.verified: dict[tuple[str, str], bool] = {}
        self.waiting: dict[tuple[str, str], list[tuple[_Run, _Outcome]]] = {}
        self.broken: dict[str, set[str]] = {}
        self.held: dict[str, list[_Run]] = {}
        self.notes: list[str] = []

    def clean(self, module: str) -> str:
        """The unmutated module as every mutant is written: unparsed."""
        return ast.unparse(ast.parse(self.sources[module])) + "\n"

    def limit(self, tests: list[str]) -> float:
        expected = self.cmap.seconds_of(tests) if self.cmap else 0.0
        return max(self.args.timeout, 3 * (expected + 10) + 5)

    def add_mutant(self, mutant: Mutant, source: str, tests: list[str], by_id: bool) -> None:
        if by_id:
            first, *later = stages(tests)
            self.queue.append(_Run("mutant", mutant.module, source, first, True,
                                   self.limit(first), mutant, later=later,
                                   seconds_before=mutant.seconds, cpu_before=mutant.cpu,
                                   ran_before=mutant.tests_run))
            return
        run = _Run("mutant", mutant.module, source, tests, False, 0.0, mutant)
        if mutant.module not in self.held:  # a clean run of the files first
            self.held[mutant.module] = []
            self.queue.append(_Run("baseline", mutant.module, self.clean(mutant.module),
                                   tests, False, self.args.timeout * 4))
        self.held[mutant.module].append(run)

    def go(self) -> None:
        while self.queue or any(w.pid for w in self.server.workers):
            for worker in self.server.workers:
                if not worker.pid and self.queue:
                    run = self.queue.popleft()
                    if run.by_id and run.kind == "mutant" and not self._leave_out_broken(run):
                        self.finish(run, _Outcome(5, 0.0), "error",
                                    note="its tests fail on the unmutated module")
                        continue
                    self.server.start(worker, run)
            for _worker, run, outcome in self.server.wait():
                self.handle(run, outcome)

    def _leave_out_broken(self, run: _Run) -> bool:
        """Drop the tests found failing on the unmutated module; False: none left."""
        broken = self.broken.get(run.module, set())
        while True:
            run.tests = [t for t in run.tests if t not in broken]
            if run.tests:
                return True
            if not run.later:
                return False
            run.tests = run.later.pop(0)

    def finish(self, run: _Run, outcome: _Outcome, status: str, note: str = "") -> None:
        mutant = run.mutant
        assert mutant is not None
        mutant.status = status
        mutant.seconds = round(run.seconds_before + outcome.seconds, 2)
        mutant.cpu = round(run.cpu_before + outcome.cpu, 2)
        mutant.tests_run = run.ran_before + outcome.ran
        mutant.killed_by = outcome.failed if status == "killed" else ""
        if status != "survived":
            mutant.left_out = 0
        elif mutant.left_out and not note:
            note = (f"{mutant.left_out} slower covering tests not run (--budget "
                    f"{mutant.budget:g})")
        mutant.note = note
        self.record(mutant)

    def handle(self, run: _Run, outcome: _Outcome) -> None:
        if run.kind == "baseline":
            self._baseline_done(run, outcome)
        elif run.kind == "verify":
            self._verify_done(run, outcome)
        elif outcome.code is None:
            self.finish(run, outcome, "timeout")
        elif outcome.code == 0 and run.later:
            run.tests = run.later.pop(0)  # the next stage
            run.limit = self.limit(run.tests)
            run.seconds_before += outcome.seconds
            run.cpu_before += outcome.cpu
            run.ran_before += outcome.ran
            self.queue.appendleft(run)
        elif outcome.code == 0:
            self.finish(run, outcome, "survived")
        elif outcome.code == 5 or (outcome.found == 0 and not outcome.failed
                                   and outcome.code in (0, 1, 5)):
            self.finish(run, outcome, "error", note="no test ran: " + outcome.log[-300:])
        elif not run.by_id:
            self.finish(run, outcome, "killed")  # the files passed clean (the baseline)
        else:
            test = outcome.failed or "session"
            key = (run.module, test)
            if key in self.verified:
                self._resolve(run, outcome, test, self.verified[key])
            elif key in self.waiting:
                self.waiting[key].append((run, outcome))
            else:
                self.waiting[key] = [(run, outcome)]
                self.queue.appendleft(self._verification(run, test, key))

    def _verification(self, run: _Run, test: str, key: tuple[str, str]) -> _Run:
        source = self.clean(run.module)
        if test.startswith("collect:"):
            where = test.removeprefix("collect:") or "tests"
            return _Run("verify", run.module, source, [where], False,
                        self.args.timeout * 2, key=key, extra=("--collect-only",))
        tests = [run.tests[0] if test == "session" else test]
        return _Run("verify", run.module, source, tests, True, self.limit(tests), key=key)

    def _verify_done(self, run: _Run, outcome: _Outcome) -> None:
        assert run.key is not None
        module, test = run.key
        passed = outcome.code == 0 and (outcome.found > 0 or "--collect-only" in run.extra)
        self.verified[run.key] = passed
        if not passed:
            self.broken.setdefault(module, set()).add(test)
            self.notes.append(f"{module}: {test} fails on the unmutated module in the fork "
                              f"server (exit {outcome.code}): left out of its selections\n"
                              + _indent(outcome.log))
            print(f"\n{self.notes[-1]}", flush=True)
        for waiting, first in self.waiting.pop(run.key, []):
            self._resolve(waiting, first, test, passed)

    def _resolve(self, run: _Run, outcome: _Outcome, test: str, passed: bool) -> None:
        if passed:
            self.finish(run, outcome, "killed")
        elif test == "session" or test.startswith("collect:"):
            self.finish(run, outcome, "error", note="its tests fail on the unmutated module")
        else:
            run.seconds_before += outcome.seconds
            run.cpu_before += outcome.cpu
            self.queue.appendleft(run)  # again, without the test (left out in `go`)

    def _baseline_done(self, run: _Run, outcome: _Outcome) -> None:
        held = self.held.get(run.module, [])
        if outcome.code == 0:
            limit = max(self.args.timeout, outcome.seconds * 3 + 5)
            for mutant_run in held:
                mutant_run.limit = limit
            self.queue.extendleft(reversed(held))
            print(f"\n{run.module}: clean run of {' '.join(run.tests)}: "
                  f"{outcome.seconds:.1f} s", flush=True)
            return
        note = f"the tests fail on the unmutated module (exit {outcome.code})"
        self.notes.append(f"{run.module}: {note}; run them: {' '.join(run.tests)}\n"
                          + _indent(outcome.log))
        print(f"\n{self.notes[-1]}", flush=True)
        for mutant_run in held:
            self.finish(mutant_run, _Outcome(None, 0.0), "error", note=note)


# A mutant's tests run in stages, each a child of its own: the fastest tests of the first
# two test files, then those of the next eight, then the rest. Most mutants are killed by
# a fast test of the first stage, and a child pays for collecting each file it is given
# (0.1-0.7 s a file: their imports), not for the tests it does not reach.
STAGE_FILES = (2, 10)


def stages(tests: list[str]) -> list[list[str]]:
    """``tests`` (fastest first) cut where the count of distinct files passes each of
    `STAGE_FILES`: the same tests in the same order."""
    out: list[list[str]] = [[]]
    files: set[str] = set()
    limits = list(STAGE_FILES)
    for test in tests:
        where = test.split("::")[0]
        if where not in files and limits and len(files) == limits[0]:
            limits.pop(0)
            out.append([])
        files.add(where)
        out[-1].append(test)
    return out


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


# -- results: one line per mutant, kept across runs ----------------------------------------

def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


class Results:
    """The JSONL file every finished mutant is appended to, and what a restart reuses: a
    killed mutant while its module's text is unchanged; a survivor (or an unselected one)
    only while nothing the coverage map depends on has changed (a new test may kill it)."""

    def __init__(self, path: Path, fresh: bool, kept: Path | None = None) -> None:
        self.path = path
        self.done: dict[tuple[str, int, str, str], dict[str, Any]] = {}
        # The kills recorded in the repository (`KEPT`, written by mutation_status.py
        # --save): reused by the coverage selection while the module's text is unchanged.
        self.kept: dict[tuple[str, int, str], dict[str, Any]] = {}
        if kept is not None and kept.exists() and not fresh:
            with gzip.open(kept, "rt", encoding="utf-8") as f:
                for line in f:
                    rec = json.loads(line)
                    if rec["status"] in ("killed", "timeout"):
                        self.kept[(rec["module"], rec["index"], rec["source_hash"])] = rec
        if path.exists() and not fresh:
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut by a stopped run
                self.done[(rec["module"], rec["index"], rec["source_hash"],
                           rec["selection"])] = rec
        path.parent.mkdir(parents=True, exist_ok=True)
        self.sink = path.open("a", encoding="utf-8")

    def previous(self, mutant: Mutant, digest: str, selection: str, inputs: str,
                 budget: float) -> tuple[dict[str, Any] | None, bool]:
        """The mutant's last result that still holds, and whether it is final: False for
        a survivor of a smaller --budget, whose slower tests are still to run."""
        rec = self.done.get((mutant.module, mutant.index, digest, selection))
        if selection == "coverage" and (rec is None or rec["status"] not in (
                "killed", "timeout")):
            rec = self.kept.get((mutant.module, mutant.index, digest), rec)
        if rec is None or rec["status"] == "error":
            return None, False
        if rec["status"] in ("killed", "timeout"):
            return rec, True
        if rec["inputs"] != inputs:
            return None, False
        cut = rec.get("left_out", 0) and (budget <= 0 or budget > rec.get("budget", 0))
        return rec, not cut

    def write(self, mutant: Mutant, digest: str, selection: str, inputs: str) -> None:
        rec = {"module": mutant.module, "index": mutant.index, "line": mutant.line,
               "operator": mutant.operator, "original": mutant.original,
               "mutated": mutant.mutated, "status": mutant.status, "seconds": mutant.seconds,
               "cpu": mutant.cpu, "left_out": mutant.left_out, "budget": mutant.budget,
               "tests_run": mutant.tests_run, "killed_by": mutant.killed_by,
               "note": mutant.note, "source_hash": digest, "selection": selection,
               "inputs": inputs, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        self.sink.write(json.dumps(rec) + "\n")
        self.sink.flush()


# -- the command ----------------------------------------------------------------------------

def scope_modules() -> list[str]:
    """Every module issues 26 (item 5) and 40 (item 8) ask about."""
    package = ROOT / PACKAGE
    found = [p.relative_to(package).as_posix() for d in SCOPE_DIRS
             for p in sorted((package / d).rglob("*.py")) if "__pycache__" not in p.parts]
    return [*found, *SCOPE_FILES]


def mutants_of(module: str, source: str) -> list[tuple[Mutant, _Site]]:
    return [(Mutant(module, i, s.line, s.operator, s.before, s.after), s)
            for i, s in enumerate(find_sites(source))]


def choose(module: str, source: str, args: argparse.Namespace) -> tuple[
        list[tuple[Mutant, _Site]], int]:
    """The module's mutants to run (a sample, or some indices) and how many it has."""
    found = mutants_of(module, source)
    total = len(found)
    if args.sample and args.sample < total:
        chosen = sorted(random.Random(f"{args.seed}:{module}").sample(range(total), args.sample))
        found = [found[i] for i in chosen]
    if args.only:
        found = [(m, s) for m, s in found if m.index in args.only]
    return found, total


def load_equivalent(path: Path) -> dict[str, str]:
    """`Mutant.key` -> why that surviving mutant is equivalent (a JSON object)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data.items()}


def _mark(status: str) -> str:
    return {"killed": ".", "survived": "S", "timeout": "T", "error": "E"}[status]


def summarize(module: str, results: list[Mutant], total: int, equivalent: dict[str, str],
              selection: str) -> dict[str, Any]:
    survivors = [m for m in results if m.status == "survived"]
    eq = [m for m in survivors if m.key in equivalent]
    killed = sum(m.status in ("killed", "timeout") for m in results)
    ran = len(results)
    non_eq = ran - len(eq)
    return {
        "selection": selection, "mutants": total, "ran": ran, "killed": killed,
        "timeout": sum(m.status == "timeout" for m in results),
        "survived": len(survivors), "equivalent": len(eq),
        "no_test": sum(m.note == NO_TEST for m in survivors),
        "over_budget": sum(m.left_out > 0 for m in survivors),
        "errors": sum(m.status == "error" for m in results),
        "score_non_equivalent": round(killed / non_eq if non_eq else 1.0, 4),
        "seconds": round(sum(m.seconds for m in results), 1),
        "cpu_seconds": round(sum(m.cpu for m in results), 1),
        "survivors": [{**asdict(m), "where": m.where, "equivalent": equivalent.get(m.key)}
                      for m in survivors],
        "errored": [{**asdict(m), "where": m.where}
                    for m in results if m.status == "error"],
    }


def _print_module(module: str, r: dict[str, Any], results: list[Mutant],
                  equivalent: dict[str, str]) -> None:
    print(f"\n== {module}: killed {r['killed']}/{r['ran']} ({r['mutants']} mutants in the "
          f"module), survived {r['survived']} ({r['equivalent']} equivalent, {r['no_test']} "
          f"run by no test, {r['over_budget']} over the budget), score "
          f"{r['score_non_equivalent']:.1%} of non-equivalent, "
          f"{r['seconds']:.0f} s of runs", flush=True)
    for m in results:
        if m.status in ("survived", "error"):
            why = equivalent.get(m.key)
            extra = f"  [equivalent: {why}]" if why else f"  [{m.note}]" if m.note else ""
            print(f"   {m.status} {m.where} #{m.index} {m.operator}: {m.original} -> "
                  f"{m.mutated}{extra}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--coverage-run"]:
        return _coverage_run(Path(argv[1]), Path(argv[2]), argv[3])
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules under trajectory_compressor/ "
                        "(default: every module of " + ", ".join([*SCOPE_DIRS, *SCOPE_FILES])
                        + ")")
    parser.add_argument("--sample", type=int, default=0,
                        help="run this many mutants per module, drawn with --seed (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="run only these mutant indices")
    parser.add_argument("--select", choices=("coverage", "targets"), default="coverage",
                        help="coverage: the tests that run the mutated lines (default); "
                        "targets: the module's hand-mapped test files (TARGETS), whole")
    parser.add_argument("--tests", nargs="+", help="run these test files, whole, for every "
                        "module instead (e.g. to measure an older test set)")
    parser.add_argument("--budget", type=float, default=0.0,
                        help="run a mutant's covering tests, fastest first, only while their "
                        "expected seconds (measured under coverage) add up to this (at "
                        "least one test); a survivor notes how many it left out, and a "
                        "later run with a larger budget or none (0, the default) runs just "
                        "those")
    parser.add_argument("--jobs", type=int, default=1,
                        help="mutants run at once, each in its own copy of the project")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per mutant at least (3x its tests' expected time + 35 "
                        "if longer; with --tests/--select targets: 3x the clean run + 5)")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments, e.g. "
                        "\"-k 'not test_x'\" to leave out a test that fails on its own")
    parser.add_argument("--results", type=Path, default=CACHE / "results.jsonl",
                        help="the JSONL file each mutant's result is appended to; a restart "
                        "skips the mutants it already holds")
    parser.add_argument("--fresh", action="store_true",
                        help="run every chosen mutant again, whatever --results holds")
    parser.add_argument("--rebuild-map", action="store_true",
                        help="build the coverage map again even if nothing changed")
    parser.add_argument("--map-only", action="store_true",
                        help="build (or check) the coverage map, say what it holds, stop")
    parser.add_argument("--list", action="store_true", help="list the mutants; run nothing")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--equivalent", type=Path,
                        default=ROOT / "scripts" / "mutation_equivalent.json",
                        help="known equivalent mutants with their reasons")
    args = parser.parse_args(argv)
    modules = args.modules or scope_modules()
    missing = [m for m in modules if not (ROOT / PACKAGE / m).is_file()]
    if missing:
        parser.error(f"no module {', '.join(missing)} under {PACKAGE}/")
    by_files = bool(args.tests) or args.select == "targets"
    if args.select == "targets" and not args.tests:
        unknown = [m for m in modules if m not in TARGETS]
        if unknown:
            parser.error(f"no tests mapped for {', '.join(unknown)}; known: "
                         f"{', '.join(TARGETS)}")
    sources = {m: (ROOT / PACKAGE / m).read_text(encoding="utf-8") for m in modules}
    if args.list:
        for module in modules:
            for m, s in mutants_of(module, sources[module]):
                print(f"{m.where} #{m.index} {m.operator}: {m.original} -> {m.mutated}"
                      + ("  (module level)" if s.module_level else ""))
        return 0
    # Stopped (Ctrl-C, `kill` or `timeout` of a run in the background, where the shell
    # leaves SIGINT ignored): the children and the copies go, the results written so far
    # stay. Set before the coverage map is built, so its run is stopped too, not orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.map_only:
        try:
            return _describe_map(load_or_build_map(args.rebuild_map), modules, sources)
        except KeyboardInterrupt:
            print("\nstopped: the coverage map was not built", flush=True)
            return 130

    try:
        return _run(args, modules, sources, by_files)
    except KeyboardInterrupt:
        print(f"\nstopped; the results so far are in {args.results}: the same command "
              "goes on from there", flush=True)
        return 130


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _run(args: argparse.Namespace, modules: list[str], sources: dict[str, str],
         by_files: bool) -> int:
    equivalent = load_equivalent(args.equivalent)
    inputs = inputs_hash()
    results = Results(args.results, args.fresh, KEPT)
    plan: dict[str, tuple[list[tuple[Mutant, _Site]], int, str]] = {}
    to_run: list[tuple[Mutant, _Site]] = []
    finished: dict[str, list[Mutant]] = {m: [] for m in modules}
    for module in modules:
        chosen, total = choose(module, sources[module], args)
        tests = args.tests or (TARGETS[module] if by_files else [])
        selection = f"files:{','.join(tests)}" if by_files else "coverage"
        plan[module] = (chosen, total, selection)
        for mutant, site in chosen:
            rec, final = results.previous(mutant, source_hash(sources[module]), selection,
                                          inputs, 0.0 if by_files else args.budget)
            if rec is not None:
                for name in ("status", "seconds", "cpu", "tests_run", "killed_by", "note",
                             "left_out", "budget"):
                    setattr(mutant, name, rec.get(name, type(getattr(mutant, name))()))
            if not final:
                to_run.append((mutant, site))
                continue
            finished[module].append(mutant)
    reused = sum(map(len, finished.values()))
    print(f"{sum(len(p[0]) for p in plan.values())} mutants in {len(modules)} modules: "
          f"{reused} already in {args.results}, {len(to_run)} to run", flush=True)

    report: dict[str, dict[str, Any]] = {}
    remaining = {m: len(plan[m][0]) - len(finished[m]) for m in modules}
    started = time.monotonic()
    done_count = 0

    def conclude(module: str) -> None:
        chosen, total, selection = plan[module]
        order = {m.index: i for i, (m, _) in enumerate(chosen)}
        found = sorted(finished[module], key=lambda m: order[m.index])
        report[module] = summarize(module, found, total, equivalent, selection)
        _print_module(module, report[module], found, equivalent)

    def record(mutant: Mutant) -> None:
        nonlocal done_count
        selection = plan[mutant.module][2]
        results.write(mutant, source_hash(sources[mutant.module]), selection, inputs)
        finished[mutant.module].append(mutant)
        print(_mark(mutant.status), end="", flush=True)
        done_count += 1
        remaining[mutant.module] -= 1
        if remaining[mutant.module] == 0:
            conclude(mutant.module)
            elapsed = time.monotonic() - started
            print(f"   [{done_count}/{len(to_run)} mutants run in {elapsed / 60:.1f} min; "
                  f"about {elapsed / done_count * (len(to_run) - done_count) / 60:.0f} min "
                  "left]", flush=True)

    for module in modules:
        if remaining[module] == 0:
            conclude(module)
    campaign = None
    if to_run:
        cmap = None if by_files else load_or_build_map(args.rebuild_map, inputs)
        server = Server(args.jobs, sources, cmap.preload if cmap else [],
                        shlex.split(args.pytest_args))
        try:
            campaign = Campaign(server, args, sources, cmap, record)
            for mutant, site in to_run:
                source = apply_site(sources[mutant.module], site)
                if cmap is None:
                    campaign.add_mutant(mutant, source, list(plan[mutant.module][2]
                                                             .removeprefix("files:")
                                                             .split(",")), False)
                    continue
                tests = cmap.select(mutant.module, site)
                if not tests:
                    mutant.status, mutant.note = "survived", NO_TEST
                    record(mutant)
                    continue
                # a survivor of a smaller budget runs the tests beyond it only
                start = (cmap.within(tests, mutant.budget) if mutant.status == "survived"
                         else 0)
                end = cmap.within(tests, args.budget)
                mutant.budget, mutant.left_out = args.budget, len(tests) - end
                if end <= start:
                    record(mutant)
                else:
                    campaign.add_mutant(mutant, source, tests[start:end], True)
            campaign.go()
        finally:
            server.close()
            results.sink.close()
    _print_table(report)
    if campaign and campaign.notes:
        print("\nTests left out (they fail on the unmutated module in the fork server):")
        for note in campaign.notes:
            print(note.splitlines()[0])
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def _print_table(report: dict[str, dict[str, Any]]) -> None:
    print("\nmodule                          killed/ran   no test  over budget  equivalent  "
          "score(non-eq)")
    for module, r in report.items():
        print(f"{module:31} {r['killed']:>5}/{r['ran']:<5} {r['no_test']:>8} "
              f"{r['over_budget']:>12} {r['equivalent']:>11}  {r['score_non_equivalent']:.1%}")
    low = [m for m, r in report.items() if r["score_non_equivalent"] < 0.9]
    if low:
        print(f"\nunder 90% of non-equivalent mutants killed: {', '.join(low)}")
    cpu = sum(r["cpu_seconds"] for r in report.values())
    print(f"\n{sum(r['ran'] for r in report.values())} mutants, {cpu / 3600:.2f} CPU-hours "
          "of runs (reused results included)")


def _describe_map(cmap: CoverageMap, modules: list[str], sources: dict[str, str]) -> int:
    print(f"coverage map {cmap.key[:12]}: {len(cmap.tests)} tests, "
          f"{sum(cmap.durations) / 60:.1f} min of tests under coverage, built in "
          f"{cmap.seconds / 60:.1f} min; {len(cmap.failed)} failed in its run")
    print("\nmodule                          mutants  run by no test  tests of the module")
    for module in modules:
        found = mutants_of(module, sources[module])
        unrun = sum(not cmap.select(module, s) for _, s in found)
        info = cmap.modules.get(module)
        print(f"{module:31} {len(found):>7} {unrun:>15} {len(info.tests) if info else 0:>20}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
