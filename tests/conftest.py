from __future__ import annotations

import dis
import functools
import os
import signal
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# No user config (app.config_file: $XDG_CONFIG_HOME/trajectory-compressor/config.yaml) of
# the machine running the suite reaches a test: an empty folder of the suite's own.
# It goes with the session (`pytest_unconfigure`: the mutation runner's children end
# with os._exit, which runs no finalizer): each run and each mutant's had left one.
_NO_USER_CONFIG = tempfile.TemporaryDirectory(prefix="tc-xdg-")
os.environ["XDG_CONFIG_HOME"] = _NO_USER_CONFIG.name
# A suite started in the background by a non-interactive shell (`cmd &`) inherits SIGINT
# ignored, and so would every CLI it starts, which then cannot see the Ctrl-C the
# interruption tests send. A handled signal is reset to the default in a child.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from tests import schedule  # noqa: E402
from trajectory_compressor.counting.tokens import TokenCounter  # noqa: E402

SAMPLES = ROOT / "data_samples"


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    """The real default tokenizer (bundled DeepSeek V4 files)."""
    return TokenCounter.load()


@pytest.fixture(scope="session")
def sample_jsonl() -> Path:
    return SAMPLES / "trajectories.jsonl"


def turns_of(spec: str, size: int = 10) -> list[dict]:
    """Turns from a compact role string: S=system H=human G=gpt T=tool."""
    roles = {"S": "system", "H": "human", "G": "gpt", "T": "tool"}
    return [{"from": roles[c], "value": f"{roles[c]} {i} " + "word " * size}
            for i, c in enumerate(spec)]


# The quick tier (`bash scripts/test.sh --quick`, i.e. `pytest -m quick`): every test that
# starts no process, no Ray, llama.cpp or browser. Each test is sorted at collection by what
# its code can reach: the test function, the fixtures it asks for, and the functions and
# classes of tests/ that these call, followed transitively. A test that reaches one of the
# names below is `heavy`; the others are `quick`. New tests need no marker; a test that
# starts a process some other way is stopped in a quick run with a message (see
# `_no_process_in_the_quick_tier`) and is marked `@pytest.mark.heavy` by hand. A test that
# names a heavy class without starting anything (a backend built and closed, never
# started) is marked `@pytest.mark.quick` by hand; the guard still stops it if it starts one.
TESTS_DIR = str(Path(__file__).resolve().parent)
HEAVY_PACKAGES = {"subprocess", "multiprocessing", "ray", "playwright", "llama_cpp"}
HEAVY_CALLABLES = {("tests.cli_helpers", "run_cli"), ("tests.cli_helpers", "start_cli"),
                   ("tests.fake_llm_server", "spawn_server"),
                   ("trajectory_compressor.summarizers.local_server", "LocalServer"),
                   ("trajectory_compressor.summarizers.local", "LocalSummarizer")}


def _heavy_value(value: object) -> bool:
    if isinstance(value, types.ModuleType):
        return value.__name__.split(".")[0] in HEAVY_PACKAGES
    module = getattr(value, "__module__", None)
    if not isinstance(module, str):
        return False
    return ((module, getattr(value, "__name__", None)) in HEAVY_CALLABLES
            or module.split(".")[0] in HEAVY_PACKAGES - {"subprocess", "multiprocessing"})


def _reaches_heavy(value: object, seen: set[int]) -> bool:
    """Whether ``value`` (a function or class of tests/) can reach a heavy name."""
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, type):
        return any(_heavy_value(base) for base in value.__mro__) or any(
            _reaches_heavy(member, seen) for member in vars(value).values()
                   if callable(member) or isinstance(member, staticmethod | classmethod))
    function = getattr(value, "__func__", value)  # methods, static and class methods
    code = getattr(function, "__code__", None)
    if code is None or not code.co_filename.startswith(TESTS_DIR):
        return False
    return _code_reaches_heavy(code, function.__globals__, seen)


def _code_reaches_heavy(code: types.CodeType, scope: dict, seen: set[int]) -> bool:
    heavy, names, nested = _code_facts(code)
    if heavy:
        return True
    for name in names:
        if name not in scope:
            continue
        value = scope[name]
        if _heavy_value(value):
            return True
        if _in_tests(value) and _reaches_heavy(value, seen):
            return True
    return any(_code_reaches_heavy(const, scope, seen) for const in nested)


@functools.cache
def _code_facts(code: types.CodeType) -> tuple[bool, tuple[str, ...], tuple[types.CodeType, ...]]:
    """What one code object says by itself (read once: each helper is reached from many
    tests): whether it imports or names a heavy package, the global names it reads, the
    code of the functions it defines."""
    # `import ray` in a function, `pytest.importorskip("llama_cpp")`
    imported: set[str] = set()
    module = ""
    nested = tuple(c for c in code.co_consts if isinstance(c, types.CodeType))
    for instruction in dis.get_instructions(code):
        if instruction.opname == "IMPORT_NAME":
            module = str(instruction.argval)
            imported.add(module)
        elif instruction.opname == "IMPORT_FROM" and (  # `from tests.cli_helpers import run_cli`
                module, instruction.argval) in HEAVY_CALLABLES:
            return True, (), nested
    named = {c for c in code.co_consts if isinstance(c, str)}
    heavy = any(name.split(".")[0] in HEAVY_PACKAGES for name in imported | named)
    return heavy, code.co_names, nested


def _in_tests(value: object) -> bool:
    if isinstance(value, type):
        return sys.modules.get(value.__module__) is not None and str(
            getattr(sys.modules[value.__module__], "__file__", "")).startswith(TESTS_DIR)
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    return code is not None and code.co_filename.startswith(TESTS_DIR)


def _is_heavy(item: pytest.Item) -> bool:
    if item.get_closest_marker("heavy") is not None:
        return True
    if item.get_closest_marker("quick") is not None:
        return False
    if _root_reaches_heavy(getattr(item, "function", None)):
        return True
    fixtures = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        if name == "_no_process_in_the_quick_tier":
            continue
        for definition in (fixtures.name2fixturedefs.get(name, ()) if fixtures else ()):
            if _root_reaches_heavy(definition.func):
                return True
    return False


_ROOTS: dict[int, tuple[object, bool]] = {}


def _root_reaches_heavy(value: object) -> bool:
    """`_reaches_heavy` from ``value``, once per test function or fixture (a parametrized
    test, a shared fixture: many items ask the same)."""
    known = _ROOTS.get(id(value))
    if known is None or known[0] is not value:
        known = _ROOTS[id(value)] = (value, _reaches_heavy(value, set()))
    return known[1]


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture its own file builds once (a Ray instance, a browser,
    generated data): with pytest-xdist, such a file's tests stay on one worker."""
    fixtures = getattr(item, "_fixtureinfo", None)
    path = str(getattr(item, "path", ""))
    return fixtures is not None and any(
        definition.scope in ("module", "class", "package")
        and getattr(definition.func, "__code__", None) is not None
        and definition.func.__code__.co_filename == path
        for definitions in fixtures.name2fixturedefs.values() for definition in definitions)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.heavy if _is_heavy(item) else pytest.mark.quick)
        if _shares_a_module_fixture(item):  # read by `pytest -n 2 --dist loadgroup`
            item.add_marker(pytest.mark.xdist_group(item.path.name))
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the longest tests first
        schedule.longest_first(items, schedule.recorded())


_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """`TC_RECORD_DURATIONS=1`: this run's durations go to tests/durations.json (once, by
    the process that sees every test: the controller of a run on workers)."""
    if schedule.recording() and not hasattr(session.config, "workerinput"):
        schedule.record(_DURATIONS, _DURATIONS)


def pytest_unconfigure(config: pytest.Config) -> None:
    _NO_USER_CONFIG.cleanup()


def _quick_run(config: pytest.Config) -> bool:
    expression = config.getoption("markexpr", "") or ""
    return "quick" in expression and "not quick" not in expression


@pytest.fixture(autouse=True)
def _no_process_in_the_quick_tier(request: pytest.FixtureRequest,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """In a quick run, a test that starts a process fails and says how to move it out."""
    if not _quick_run(request.config):
        return
    def refuse(self: object, args: object, *rest: object, **kwargs: object) -> None:
        raise AssertionError(
            f"{request.node.nodeid} started a process ({args!r}) in the quick tier: mark it "
            "@pytest.mark.heavy (tests/conftest.py sorts tests into the tiers)")
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
