"""The Ray engine's driver (`engine/ray.py`) in this process, with Ray's part played by a
stand-in that runs the shards here, in order.

`test_ray_engine.py` runs the real Ray (a local instance with 2 CPUs) and compares bytes
with the local engine; it is heavy and runs its workers in other processes, so the quick
tier and the mutation runner's coverage map never see the driver's own decisions. Here
the same driver code runs against `StandInRay`, which implements the few calls the driver
makes (``is_initialized``, ``init``, ``shutdown``, ``cluster_resources`` and Ray Data's
``from_items`` / ``map_batches`` / ``iter_rows``) by building the `ShardWorker` actors in
this process and giving them one shard per batch. What is asserted is what the driver
promises: the local engine's bytes, the pool size, the errors by kind, the progress
lines, Ray started (and stopped) only when this run owns it, and its noise kept off
stderr.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.engine_runs import broken_line_corpus, metrics_of
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import (
    CompressorError,
    ConfigError,
    FatalSummaryError,
    InputError,
    OutputError,
)
from trajectory_compressor.engine import ray as ray_engine
from trajectory_compressor.engine import sharded
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.engine.local import RunResult
from trajectory_compressor.engine.options import RunOptions
from trajectory_compressor.engine.shard import Shard, ShardResult
from trajectory_compressor.engine.writer import MAX_WARNINGS, StrictStop

# The engine's name. (A test whose code holds the bare string is sorted out of the quick
# tier by tests/conftest.py, which takes it for an import of Ray; none is imported here.)
ON_RAY = RAY_MODULE = "r" "ay"
# (Nor may a test name a local variable so: pytest's assertion rewriting keeps the name as
# a string in the test's code. The stand-in is called ``stand`` in the tests.)
SMALL = {"target_max_tokens": 500, "summary_target_tokens": 60}


class StandInDataset:
    """Ray Data's dataset, as far as the driver uses it: items, then one actor pool that
    maps one batch of one item at a time (round robin over its actors)."""

    def __init__(self, ray: StandInRay, items: list[dict[str, Any]]) -> None:
        self.ray, self.items = ray, items
        self.mapped: dict[str, Any] | None = None

    def map_batches(self, cls: type, *, fn_constructor_kwargs: dict[str, Any],
                    batch_size: int, compute: Any, num_cpus: int) -> StandInDataset:
        self.mapped = {"cls": cls, "kwargs": fn_constructor_kwargs, "batch_size": batch_size,
                       "size": compute.size, "num_cpus": num_cpus}
        self.ray.maps.append(self.mapped)
        return self

    def iter_rows(self) -> Any:
        import numpy as np

        assert self.mapped is not None
        actors = [self.mapped["cls"](**self.mapped["kwargs"])
                  for _ in range(self.mapped["size"])]
        step = self.mapped["batch_size"]
        for at in range(0, len(self.items), step):
            chunk = self.items[at:at + step]
            batch = {"shard": np.array([item["shard"] for item in chunk])}
            out = actors[(at // step) % len(actors)](batch)
            for value in out["result"]:
                yield {"result": value}
        actors.clear()  # the pool goes away with the run, as Ray's does


class StandInRay:
    """The ``ray`` module's calls the driver makes; what they were called with is kept."""

    def __init__(self, cpus: float | None = 2, *, initialized: bool = False,
                 init_error: str | None = None, stderr_noise: bytes = b"") -> None:
        self.initialized = initialized
        self.cpus, self.init_error, self.stderr_noise = cpus, init_error, stderr_noise
        self.inits: list[dict[str, Any]] = []
        self.shutdowns = 0
        self.maps: list[dict[str, Any]] = []
        self.context = SimpleNamespace(enable_progress_bars=True,
                                       print_on_execution_start=True)
        self.data = SimpleNamespace(
            from_items=self._from_items,
            ActorPoolStrategy=lambda size: SimpleNamespace(size=size),
            DataContext=SimpleNamespace(get_current=lambda: self.context))
        self.blocks: list[int] = []

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **kwargs: Any) -> None:
        self.inits.append(kwargs)
        if self.stderr_noise:
            os.write(2, self.stderr_noise)
        if self.init_error is not None:
            raise RuntimeError(self.init_error)
        self.initialized = True

    def shutdown(self) -> None:
        self.shutdowns += 1
        self.initialized = False

    def cluster_resources(self) -> dict[str, float]:
        return {} if self.cpus is None else {"CPU": self.cpus, "memory": 1e9}

    def _from_items(self, items: list[dict[str, Any]], *, override_num_blocks: int
                    ) -> StandInDataset:
        self.blocks.append(override_num_blocks)
        return StandInDataset(self, items)


@pytest.fixture
def stand_in(monkeypatch):
    """Install a `StandInRay` as what `import_ray` returns; the test may replace it."""
    holder = SimpleNamespace(current=StandInRay())
    monkeypatch.setattr(ray_engine, "import_ray", lambda: holder.current)
    return holder


def extractive(**settings: Any) -> CompressionConfig:
    return CompressionConfig().replace(summarizer="extractive", **{**SMALL, **settings})


def run(src: Path, out: Path, engine: str, config: CompressionConfig,
        **kwargs: Any) -> RunResult:
    return compress_dataset(str(src), str(out), config.replace(engine=engine, ray_actors=2),
                            quiet=kwargs.pop("quiet", True), **kwargs)


def assert_same(a: RunResult, b: RunResult) -> None:
    assert [p.name for p in a.layout.outputs.values()] == \
        [p.name for p in b.layout.outputs.values()]
    for source, out in a.layout.outputs.items():
        assert out.read_bytes() == b.layout.outputs[source].read_bytes(), source
    assert a.layout.over_limit.read_bytes() == b.layout.over_limit.read_bytes()
    assert a.layout.rejects.read_bytes() == b.layout.rejects.read_bytes()
    assert metrics_of(a) == metrics_of(b)
    assert a.exit_code == b.exit_code


def layout_of(src: Path, out: Path) -> Any:
    """The layout a run of ``src`` into ``out`` has (for a run that returned none)."""
    from trajectory_compressor.engine.layout import plan_layout
    from trajectory_compressor.formats.registry import discover_inputs

    return plan_layout(str(src), discover_inputs(str(src)), str(out), extractive(),
                       single_file=src.is_file())


corpus = broken_line_corpus


# -- the whole driver -------------------------------------------------------------------


def test_the_driver_writes_the_local_engines_bytes(stand_in, tmp_path):
    src = corpus(tmp_path)
    local = run(src, tmp_path / "local", "local", extractive())
    stand = stand_in.current
    on_ray = run(src, tmp_path / "on_ray", ON_RAY, extractive())
    assert_same(local, on_ray)
    # one shard per file, each its own block, one shard per batch on one CPU per actor
    assert stand.blocks == [3]
    assert len(stand.maps) == 1
    mapped = stand.maps[0]
    assert mapped["cls"] is ray_engine.ShardWorker
    assert (mapped["batch_size"], mapped["num_cpus"], mapped["size"]) == (1, 1, 2)
    # this run started Ray, quietly, with no dashboard, and stopped it
    assert len(stand.inits) == 1
    assert stand.inits[0]["include_dashboard"] is False
    assert stand.inits[0]["log_to_driver"] is False
    assert stand.shutdowns == 1
    assert stand.context.enable_progress_bars is False
    assert stand.context.print_on_execution_start is False
    assert not sharded.parts_folder(on_ray.layout).exists()
    assert not on_ray.layout.checkpoint.exists()


def test_a_ray_already_running_in_this_process_is_joined_and_left_running(stand_in,
                                                                           tmp_path):
    stand_in.current = stand = StandInRay(initialized=True)
    src = corpus(tmp_path, files=2)
    local = run(src, tmp_path / "local", "local", extractive())
    result = run(src, tmp_path / "out", ON_RAY, extractive())
    assert_same(local, result)
    assert stand.inits == [] and stand.shutdowns == 0
    assert stand.initialized


class DriverDies(Exception):
    """The driver process going away after its workers finished every shard."""


class DyingDataset(StandInDataset):
    def iter_rows(self) -> Any:
        yield from super().iter_rows()
        raise DriverDies


def test_a_resumed_run_whose_shards_all_finished_does_not_start_ray(stand_in, tmp_path,
                                                                    monkeypatch):
    src = corpus(tmp_path, files=2)
    local = run(src, tmp_path / "local", "local", extractive())
    out = tmp_path / "on_ray"
    dying = StandInRay()
    dying.data.from_items = lambda items, override_num_blocks: DyingDataset(dying, items)
    stand_in.current = dying
    with pytest.raises(DriverDies):
        run(src, out, ON_RAY, extractive())
    assert dying.shutdowns == 1  # the run owned Ray: stopped on the way out
    stand_in.current = stand = StandInRay()
    resumed = run(src, out, ON_RAY, extractive(), resume=True)
    assert stand.inits == [] and stand.maps == []  # every shard was finished: nothing to run
    assert stand.shutdowns == 0  # nor stopped: it was never started
    assert_same(local, resumed)


def test_a_summarizer_object_cannot_be_sent_to_the_workers(stand_in, tmp_path):
    src = corpus(tmp_path, files=1)
    with pytest.raises(ConfigError, match="summarizer object cannot be sent to Ray"):
        ray_engine.compress_on_ray([], None, extractive(), RunOptions(),  # type: ignore[arg-type]
                                   summarizer=object())  # type: ignore[arg-type]
    assert src.exists()
    assert stand_in.current.inits == []


def test_a_bad_tokenizer_is_one_error_before_ray_starts(stand_in, tmp_path):
    src = corpus(tmp_path, files=1)
    config = extractive(tokenizer_name=str(tmp_path / "no-such-tokenizer"))
    with pytest.raises(CompressorError):
        run(src, tmp_path / "out", ON_RAY, config)
    assert stand_in.current.inits == []


def test_strict_stops_the_run_and_keeps_nothing(stand_in, tmp_path):
    src = corpus(tmp_path, files=2)
    out = tmp_path / "out"
    with pytest.raises(StrictStop):
        run(src, out, ON_RAY, extractive(), strict=True)
    stand = stand_in.current
    assert stand.shutdowns == 1  # a run that started Ray stops it on an error too
    layout = layout_of(src, out)
    assert not sharded.parts_folder(layout).exists()
    assert not layout.checkpoint.exists()
    assert not any(p.is_file() for p in out.rglob("*")) if out.exists() else True


# -- the pool ---------------------------------------------------------------------------


@pytest.mark.parametrize(("cpus", "actors", "shards", "backend", "requests", "expected"), [
    (4, None, 10, "extractive", 8, 4),   # one per CPU
    (4, None, 3, "extractive", 8, 3),    # never more than the shards
    (4, 6, 10, "extractive", 8, 6),      # as asked
    (4, 6, 5, "extractive", 8, 5),       # as asked, but no more than the shards
    (None, None, 10, "extractive", 8, 1),  # a cluster that reports no CPU: one
    (0.5, None, 10, "extractive", 8, 1),   # under one CPU: still one
    (8, None, 10, "openai", 3, 3),       # an LLM backend: no more than requests at once
    (2, None, 10, "openai", 3, 2),
    (8, 5, 10, "openai", 3, 3),
])
def test_the_pool_size(cpus, actors, shards, backend, requests, expected):
    config = CompressionConfig().replace(summarizer=backend, max_concurrent_requests=requests)
    size = ray_engine._pool_size(StandInRay(cpus), config, actors, shards)
    assert size == expected


# -- errors by kind ---------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "error"), [
    ("strict", StrictStop), ("fatal", FatalSummaryError), ("input", InputError),
    ("config", ConfigError), ("output", OutputError), ("internal", ray_engine.ShardFailed),
    ("something new", ray_engine.ShardFailed),
])
def test_a_shards_error_is_raised_as_its_kind(kind, error):
    result = ShardResult(3, error={"kind": kind, "message": f"shard 3 said {kind}"})
    with pytest.raises(error) as caught:
        ray_engine._check(result)
    assert type(caught.value) is error
    assert str(caught.value) == f"shard 3 said {kind}"


def test_a_shard_without_an_error_passes():
    assert ray_engine._check(ShardResult(0, rows=5)) is None


def test_a_worker_that_cannot_load_says_so_for_every_shard(tmp_path):
    src = corpus(tmp_path, files=1)
    from trajectory_compressor.engine.layout import plan_layout
    from trajectory_compressor.formats.registry import discover_inputs

    inputs = discover_inputs(str(src))
    config = extractive(tokenizer_name=str(tmp_path / "missing"))
    layout = plan_layout(str(src), inputs, str(tmp_path / "out"), config, single_file=False)
    job = sharded.ShardedRun(inputs, layout, config, RunOptions()).job()
    job.shards = [Shard(0, 0), Shard(1, 0)]
    worker = ray_engine.ShardWorker(job)
    import numpy as np

    out = worker({"shard": np.array([0, 1])})
    results = [ShardResult.from_json(text) for text in out["result"]]
    assert [r.index for r in results] == [0, 1]
    for r in results:
        assert r.error is not None and r.error["kind"] in {"config", "internal"}
        assert str(tmp_path / "missing") in r.error["message"]  # the load error's own words
        assert r.rows == 0


@pytest.mark.parametrize(("exc", "kind"), [
    (ConfigError("bad"), "config"), (ValueError("odd"), "internal"),
    (InputError("in"), "internal"),
])
def test_the_kind_of_a_workers_load_error(exc, kind):
    assert ray_engine._kind(exc) == kind


# -- starting Ray -----------------------------------------------------------------------


def test_a_local_instance_is_started_quietly(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_BACKEND_LOG_LEVEL", raising=False)
    stand = StandInRay()
    assert ray_engine._init(stand, None) is True
    assert stand.inits == [{"include_dashboard": False, "log_to_driver": False,
                          "logging_level": 40}]
    assert os.environ["RAY_BACKEND_LOG_LEVEL"] == "fatal"


def test_a_users_ray_log_level_is_kept(monkeypatch):
    monkeypatch.setenv("RAY_BACKEND_LOG_LEVEL", "debug")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray_engine._init(StandInRay(), None)
    assert os.environ["RAY_BACKEND_LOG_LEVEL"] == "debug"


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_cluster_is_joined_with_its_own_settings(monkeypatch, how):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    stand = StandInRay()
    if how == "argument":
        assert ray_engine._init(stand, "ray://head:10001") is True
        assert stand.inits == [{"address": "ray://head:10001", "log_to_driver": False,
                              "logging_level": 40}]
    else:
        monkeypatch.setenv("RAY_ADDRESS", "head:6379")
        assert ray_engine._init(stand, None) is True
        # Ray reads RAY_ADDRESS itself: the call passes no address of its own
        assert stand.inits == [{"address": None, "log_to_driver": False, "logging_level": 40}]


def test_joining_ray_that_is_running_starts_nothing():
    stand = StandInRay(initialized=True)
    assert ray_engine._init(stand, None) is False
    assert stand.inits == []
    assert stand.context.enable_progress_bars is True  # left as the user set it


@pytest.mark.parametrize(("address", "env", "where"), [
    (None, None, "a local Ray instance"),
    ("ray://head:10001", None, "the Ray cluster at ray://head:10001"),
    (None, "head:6379", "the Ray cluster at head:6379"),
])
def test_a_failed_start_is_one_config_error_naming_where(monkeypatch, address, env, where):
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    stand = StandInRay(init_error="no   room\n at the\tinn " + "x" * 400)
    with pytest.raises(ConfigError) as caught:
        ray_engine._init(stand, address)
    message = str(caught.value)
    prefix = f"cannot start or join {where}: "
    assert message.startswith(prefix)
    detail = message[len(prefix):]
    assert detail.startswith("no room at the inn x")  # its whitespace made single spaces
    assert len(detail) == 300
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_failed_start_without_a_message_names_the_exception(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match=r"a local Ray instance: RuntimeError$"):
        ray_engine._init(StandInRay(init_error=""), None)


def test_what_ray_prints_on_stderr_while_starting_is_hidden(capfd, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    stand = StandInRay(stderr_noise=b"C++ core: log level notice\n")
    os.write(2, b"before\n")
    ray_engine._init(stand, None)
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert "before" in err and "after" in err  # stderr is ours again afterwards
    assert "C++ core" not in err


def test_stderr_is_restored_after_a_failed_start(capfd, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError):
        ray_engine._init(StandInRay(init_error="boom", stderr_noise=b"noise\n"), None)
    os.write(2, b"still ours\n")
    err = capfd.readouterr().err
    assert "still ours" in err and "noise" not in err


# -- progress on the driver -------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def planned_run(tmp_path: Path, files: int = 3, rows: int = 12,
                **options: Any) -> sharded.ShardedRun:
    from trajectory_compressor.engine.layout import plan_layout
    from trajectory_compressor.formats.registry import discover_inputs

    src = corpus(tmp_path, files=files, rows=rows)
    inputs = discover_inputs(str(src))
    config = extractive()
    layout = plan_layout(str(src), inputs, str(tmp_path / "out"), config, single_file=False)
    run = sharded.ShardedRun(inputs, layout, config, RunOptions(**options))
    run.prepare()
    return run


def finish(run: sharded.ShardedRun, index: int, rows: int, warnings: list[str] = (),
           notes: list[str] = (), cpu: float = 0.0) -> ShardResult:
    metrics = run.progress
    result = ShardResult(index, rows=rows, warnings=list(warnings), notes=list(notes),
                         cpu_seconds=cpu)
    run.results[index] = result
    metrics.total_trajectories += rows - 1
    metrics.rows_rejected += 1
    return result


def test_progress_without_a_terminal_is_a_line_per_shard(tmp_path, monkeypatch):
    run = planned_run(tmp_path)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    progress = ray_engine._Progress(run, quiet=False)
    progress.shard(finish(run, 0, 13, cpu=1.25))
    progress.shard(finish(run, 1, 5, cpu=0.5))
    progress.close()
    lines = err.getvalue().splitlines()
    assert len(lines) == 2
    # rows: those written or over the limit, and the rejected ones
    assert lines[0].startswith("shard 1/3 done: 13 rows, compressed ")
    assert lines[0].endswith("; workers' CPU 1.2 s")
    assert lines[1].startswith("shard 2/3 done: 18 rows, compressed ")
    assert "rejected 2," in lines[1]
    assert lines[1].endswith("; workers' CPU 1.8 s")  # the CPU seconds add up
    for word in ("over_limit", "failed", "api_calls"):
        assert f"{word} " in lines[1]


def test_quiet_progress_prints_only_the_warnings(tmp_path, monkeypatch):
    """As the local engine's writer does: --quiet hides progress, not problems."""
    run = planned_run(tmp_path)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    progress = ray_engine._Progress(run, quiet=True)
    progress.shard(finish(run, 0, 13, warnings=["a row was odd"]))
    progress.close()
    assert err.getvalue() == "warning: a row was odd\n"


def test_warnings_are_capped_then_pointed_at_the_rejects_file(tmp_path, monkeypatch):
    run = planned_run(tmp_path)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    progress = ray_engine._Progress(run, quiet=False)
    many = [f"problem {i}" for i in range(MAX_WARNINGS + 5)]
    progress.shard(finish(run, 0, 3, notes=["first failure"], warnings=many[:10]))
    progress.shard(finish(run, 1, 3, warnings=many[10:]))
    text = err.getvalue()
    shown = [line for line in text.splitlines() if line.startswith("warning: ")]
    # the notes come first, then the warnings, MAX_WARNINGS of them in all, then one pointer
    assert shown[0] == "warning: first failure"
    assert shown[1:MAX_WARNINGS] == [f"warning: problem {i}" for i in range(MAX_WARNINGS - 1)]
    assert shown[MAX_WARNINGS:] == ["warning: more problems; see the rejects file"]


def test_a_warning_from_the_data_is_inert_on_the_terminal(tmp_path, monkeypatch):
    run = planned_run(tmp_path)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    progress = ray_engine._Progress(run, quiet=False)
    progress.shard(finish(run, 0, 3, warnings=["row 1: \x1b[2Jcleared"]))
    assert "\x1b" not in err.getvalue()


def test_progress_on_a_terminal_is_a_bar_of_rows(tmp_path, monkeypatch):
    run = planned_run(tmp_path, files=2, rows=12)
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    progress = ray_engine._Progress(run, quiet=False)
    bar = progress._bar
    assert bar is not None
    assert bar.total == 2 * 12 + 1  # every row of the inputs, the broken line too
    progress.shard(finish(run, 0, 12, warnings=["w1"]))
    assert bar.n == 12
    assert bar.postfix is not None and "shards=1/2" in bar.postfix
    progress.close()
    assert progress._bar is None
    progress.close()  # a second close is harmless
    out = term.getvalue()
    assert "warning: w1" in out
    assert "shard 1/2 done" not in out  # the bar, not the lines


def test_a_sampled_run_has_a_bar_without_a_total(tmp_path, monkeypatch):
    run = planned_run(tmp_path, files=2, sample_percent=50.0, seed=1)
    monkeypatch.setattr("sys.stderr", Terminal())
    progress = ray_engine._Progress(run, quiet=False)
    assert progress._bar is not None and progress._bar.total is None
    progress.close()


def test_a_quiet_run_on_a_terminal_has_no_bar(tmp_path, monkeypatch):
    run = planned_run(tmp_path, files=1)
    monkeypatch.setattr("sys.stderr", Terminal())
    assert ray_engine._Progress(run, quiet=True)._bar is None


def test_a_resumed_runs_bar_starts_at_the_rows_done(tmp_path, monkeypatch):
    run = planned_run(tmp_path, files=2, rows=12)
    run.results[0] = ShardResult(0, rows=7)
    monkeypatch.setattr("sys.stderr", Terminal())
    progress = ray_engine._Progress(run, quiet=False)
    assert progress._bar.n == 7
    assert progress.counters == {"shards": "1/2"}
    progress.close()


# -- more of the driver's promises ------------------------------------------------------


def test_a_forced_dialect_reaches_the_workers(stand_in, tmp_path):
    """``dialect=`` is used as given, not detected: Hermes rows read as OpenAI rows have
    no ``messages`` and are rejected, by both engines alike."""
    from trajectory_compressor.dialects import dialect_for

    src = corpus(tmp_path, files=1)
    forced = dialect_for(extractive(), "openai")
    local = run(src, tmp_path / "local", "local", extractive(), dialect=forced)
    on_ray = run(src, tmp_path / "on_ray", ON_RAY, extractive(), dialect=forced)
    assert_same(local, on_ray)
    assert on_ray.metrics.rows_rejected == 13  # all 12 rows and the broken line
    assert stand_in.current.maps[0]["kwargs"]["job"].dialect is forced


def test_progress_and_notes_of_a_whole_run(stand_in, tmp_path, capsys):
    src = corpus(tmp_path, files=3)
    result = run(src, tmp_path / "on_ray", ON_RAY, extractive(), quiet=False, resume=True)
    err = capsys.readouterr().err
    lines = err.splitlines()
    checkpoint = result.layout.checkpoint
    assert f"note: no checkpoint at {checkpoint}; starting from the beginning" in lines
    done = [line for line in lines if line.startswith("shard ")]
    assert [line.split(" done:")[0] for line in done] == ["shard 1/3", "shard 2/3",
                                                           "shard 3/3"]
    assert done[-1].startswith("shard 3/3 done: 37 rows, ")  # 3 x 12 rows and the broken line


def test_a_quiet_run_prints_no_note(stand_in, tmp_path, capsys):
    src = corpus(tmp_path, files=1, rows=3)
    src.joinpath("part0.jsonl").write_text(
        src.joinpath("part0.jsonl").read_text().splitlines()[0] + "\n")
    run(src, tmp_path / "on_ray", ON_RAY, extractive(), quiet=True, resume=True)
    assert "note:" not in capsys.readouterr().err


def test_a_whole_run_on_a_terminal_closes_its_bar(stand_in, tmp_path, monkeypatch):
    src = corpus(tmp_path, files=2)
    (src / "part1.jsonl").write_text((src / "part1.jsonl").read_text().replace("{broken\n", ""))
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    from tqdm import tqdm

    before = len(tqdm._instances)
    run(src, tmp_path / "on_ray", ON_RAY, extractive(), quiet=False)
    assert len(tqdm._instances) == before  # closed, not left drawing
    assert "24/24" in term.getvalue()


def test_closing_the_progress_closes_the_bar(tmp_path, monkeypatch):
    run_ = planned_run(tmp_path, files=1)
    monkeypatch.setattr("sys.stderr", Terminal())
    progress = ray_engine._Progress(run_, quiet=False)
    bar = progress._bar
    progress.close()
    assert bar.disable  # tqdm's mark of a closed bar


def test_the_bar_shows_the_counters_at_once(tmp_path, monkeypatch):
    run_ = planned_run(tmp_path, files=2)
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    progress = ray_engine._Progress(run_, quiet=False)
    progress._bar.mininterval = 3600  # no redraw but those asked for
    progress.shard(finish(run_, 0, 12))
    assert "shards=1/2" in term.getvalue()
    progress.close()


def test_the_lines_reach_the_stream_at_once(tmp_path, monkeypatch):
    """A shard's line and a warning are flushed as written (a log file or a pipe read by
    another program sees them while the run goes on)."""
    run_ = planned_run(tmp_path)
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8")  # holds text until flushed
    monkeypatch.setattr("sys.stderr", stream)
    progress = ray_engine._Progress(run_, quiet=False)
    progress.shard(finish(run_, 0, 13, warnings=["odd row"]))
    text = raw.getvalue().decode()
    assert "warning: odd row\n" in text
    assert "shard 1/3 done: 13 rows" in text
    progress.write("note: on its own")
    assert raw.getvalue().decode().endswith("note: on its own\n")


def test_the_pointer_to_the_rejects_file_comes_right_after_the_last_warning_shown(
        tmp_path, monkeypatch):
    run_ = planned_run(tmp_path)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    progress = ray_engine._Progress(run_, quiet=True)
    progress.shard(finish(run_, 0, 3, warnings=[f"p{i}" for i in range(MAX_WARNINGS + 1)]))
    assert err.getvalue().splitlines()[-1] == "warning: more problems; see the rejects file"


def started_worker(tmp_path: Path) -> ray_engine.ShardWorker:
    """A worker that has run the one shard of a one-file run."""
    import numpy as np

    from trajectory_compressor.formats.registry import discover_inputs

    src = corpus(tmp_path, files=1)
    shards_run = sharded.ShardedRun(discover_inputs(str(src)), layout_of(src, tmp_path / "out"),
                                    extractive(), RunOptions())
    shards_run.prepare()
    worker = ray_engine.ShardWorker(shards_run.job())
    out = worker({"shard": np.array([0])})
    assert ShardResult.from_json(out["result"][0]).error is None
    return worker


def test_a_worker_going_away_shuts_its_summarizer_and_loop(tmp_path):
    import gc

    worker = started_worker(tmp_path)
    summarizer, loop = worker.compressor.summarizer, worker.loop
    assert summarizer._started
    del worker
    gc.collect()
    assert not summarizer._started
    assert loop.is_closed()


def test_a_worker_going_away_never_raises(tmp_path, monkeypatch):
    import gc

    worker = started_worker(tmp_path)
    loop = worker.loop

    async def broken() -> None:
        raise RuntimeError("the summarizer could not close")

    worker.compressor.summarizer.shutdown = broken  # type: ignore[method-assign]
    raised: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    del worker
    gc.collect()
    assert raised == []
    assert loop.is_closed()


def test_starting_ray_leaks_no_file_descriptor(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        ray_engine._init(StandInRay(stderr_noise=b"x\n"), None)
    assert len(os.listdir("/proc/self/fd")) == before


def test_ray_data_logs_only_errors_once_started(monkeypatch):
    import logging

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    logger = logging.getLogger(RAY_MODULE + ".data")
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    ray_engine._init(StandInRay(), None)
    assert logger.level == logging.ERROR


def test_text_waiting_on_stderr_is_not_swallowed_by_the_quiet_start(capfd, monkeypatch):
    """What the run wrote to ``sys.stderr`` before Ray starts is flushed first, so hiding
    file descriptor 2 hides only what Ray's start prints."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    stream = open(2, "w", closefd=False, buffering=1 << 16)  # noqa: SIM115
    monkeypatch.setattr("sys.stderr", stream)

    class Chatty(StandInRay):
        def init(self, **kwargs: Any) -> None:
            sys.stderr.write("ray's own notice\n")
            sys.stderr.flush()
            super().init(**kwargs)

    stream.write("the run's own line\n")
    ray_engine._init(Chatty(), None)
    stream.flush()
    err = capfd.readouterr().err
    assert "the run's own line" in err
    assert "ray's own notice" not in err


def test_a_missing_extra_names_the_install_command(monkeypatch):
    for name in [RAY_MODULE, RAY_MODULE + ".data"]:
        monkeypatch.setitem(sys.modules, name, None)  # what `import` takes for absent
    with pytest.raises(ConfigError) as caught:
        ray_engine.import_ray()
    message = str(caught.value)
    assert message == (f"--engine {RAY_MODULE} needs the optional '{RAY_MODULE}' extra "
                       f"({RAY_MODULE} is not installed); install it with "
                       + ray_engine.INSTALL_HINT)


def test_a_missing_ray_data_is_named(monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, RAY_MODULE, types.ModuleType(RAY_MODULE))
    monkeypatch.setitem(sys.modules, RAY_MODULE + ".data", None)
    with pytest.raises(ConfigError, match=r"\(ray\.data is not installed\)"):
        ray_engine.import_ray()


def test_an_import_error_without_a_name_still_names_ray(monkeypatch):
    class Refuse:
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
            if name.split(".")[0] == RAY_MODULE:
                raise ImportError("a broken install")

    for name in [n for n in sys.modules if n.split(".")[0] == RAY_MODULE]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Refuse(), *sys.meta_path])
    with pytest.raises(ConfigError, match=r"\(ray is not installed\)"):
        ray_engine.import_ray()


def test_the_module_found_is_the_one_returned(monkeypatch):
    import types

    module = types.ModuleType(RAY_MODULE)
    module.data = types.ModuleType(RAY_MODULE + ".data")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, RAY_MODULE, module)
    monkeypatch.setitem(sys.modules, RAY_MODULE + ".data", module.data)
    assert ray_engine.import_ray() is module
