"""The Ray engine (`--engine ray`) against the local engine, on a local Ray with 2 CPUs.

Every comparison runs the same input through both engines and requires the same bytes:
each output file, the over-limit and rejects files, and the metrics file (but for its
timings and output paths). The corpora are small and generated: Hermes JSONL (several
files, an empty one, a broken line, one file cut into ranges of lines, sampling),
Parquet, and variants of the dialect samples (OpenAI and LLaMA-Factory `messages`
JSONL, the LLaMA-Factory ShareGPT `.json` array), each with the extractive summarizer
and with the loopback fake LLM server. A driver SIGKILLed after its first finished shard
resumes to the same outputs; an actor that dies mid-shard is replaced and its shard
rewritten; a rerun with a warm cache makes no request; a missing extra is one line.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import ROOT, read_jsonl, run_cli
from tests.datagen import write_jsonl, write_parquet
from tests.engine_runs import metrics_of
from tests.fake_llm_server import FakeLLMServer
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.engine import sharded
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.engine.layout import plan_layout
from trajectory_compressor.engine.local import RunResult
from trajectory_compressor.engine.options import RunOptions
from trajectory_compressor.engine.shard import KILL_ENV
from trajectory_compressor.engine.writer import StrictStop
from trajectory_compressor.formats.registry import discover_inputs

ray = pytest.importorskip("ray", reason="needs the 'ray' extra: bash scripts/setup.sh dev,ray")

SAMPLES = ROOT / "data_samples"
SMALL = {"target_max_tokens": 500, "summary_target_tokens": 60}
BIG = {"target_max_tokens": 6000, "summary_target_tokens": 300}


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A local Ray with 2 CPUs for this module; every worker carries the kill hook, which
    stays disarmed while its marker file exists (`arm_kill` removes it)."""
    marker = tmp_path_factory.mktemp("kill") / "fired"
    marker.touch()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {KILL_ENV: f"{marker}:5"}})
    try:
        yield marker
    finally:
        ray.shutdown()


def run(src: Path, out: Path, engine: str, config: CompressionConfig,
        **kwargs: Any) -> RunResult:
    config = config.replace(engine=engine, ray_actors=2)
    return compress_dataset(str(src), str(out), config, quiet=True, **kwargs)


def extractive(**settings: Any) -> CompressionConfig:
    return CompressionConfig().replace(summarizer="extractive", **settings)


def llm(url: str, **settings: Any) -> CompressionConfig:
    return CompressionConfig().replace(summarizer="openai", api_key_env="", **settings
                                       ).with_endpoint_flags([url], "fake-model")


def assert_same(a: RunResult, b: RunResult) -> None:
    """The two runs wrote the same bytes, file for file, and the same metrics."""
    assert list(a.layout.outputs) == list(b.layout.outputs)
    for source, out in a.layout.outputs.items():
        other = b.layout.outputs[source]
        assert out.read_bytes() == other.read_bytes(), f"output of {source} differs"
    assert a.layout.over_limit.read_bytes() == b.layout.over_limit.read_bytes()
    assert a.layout.rejects.read_bytes() == b.layout.rejects.read_bytes()
    assert metrics_of(a) == metrics_of(b)
    assert a.exit_code == b.exit_code


def plan_of(src: Path, out: Path, config: CompressionConfig):
    """The layout a run of ``src`` into ``out`` has (for a run that returned none)."""
    return plan_layout(str(src), discover_inputs(str(src)), str(out), config,
                       single_file=src.is_file())


def no_leftovers(result: RunResult) -> None:
    assert not result.layout.checkpoint.exists()
    assert not sharded.parts_folder(result.layout).exists()


# corpora


def hermes_folder(root: Path, files: int = 3, rows: int = 60) -> Path:
    folder = root / "hermes"
    folder.mkdir()
    for i in range(files):
        write_jsonl(folder / f"part{i}.jsonl", rows, seed=i)
    with (folder / "part1.jsonl").open("ab") as f:
        f.write(b"{broken\n")
    (folder / "zz_empty.jsonl").write_bytes(b"")
    return folder


def _vary(row: Any, k: int) -> Any:
    """``row`` with the text of its tool results made unique to variant ``k``, so that no
    two rows share a summarized region (and hence a cache key)."""
    row = copy.deepcopy(row)
    suffix = f" (variant {k})"
    for item in row.get("messages") or row.get("conversations") or []:
        if item.get("role") == "tool" or item.get("from") == "observation":
            key = "content" if "content" in item else "value"
            if isinstance(item[key], str):
                item[key] += suffix
            else:
                for part in item[key]:
                    part["value" if "value" in part else "text"] += suffix
    if "id" in row:
        row["id"] = f"{row['id']}-{k}"
    return row


def sample_variants(sample: Path, target: Path, variants: range) -> Path:
    if sample.suffix == ".json":
        rows = json.loads(sample.read_text(encoding="utf-8"))
        out = [_vary(r, k) for k in variants for r in rows]
        target.write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
    else:
        rows = read_jsonl(sample)
        target.write_text("".join(json.dumps(_vary(r, k), ensure_ascii=False) + "\n"
                                  for k in variants for r in rows), encoding="utf-8")
    return target


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("corpora")
    messages = root / "messages"
    messages.mkdir()
    sample_variants(SAMPLES / "openai_messages.jsonl", messages / "openai.jsonl", range(1))
    sample_variants(SAMPLES / "llamafactory_messages.jsonl", messages / "lf_messages.jsonl",
                    range(1, 2))
    arrays = root / "lf_sharegpt"
    arrays.mkdir()
    for i in range(2):
        sample_variants(SAMPLES / "llamafactory_sharegpt.json", arrays / f"lf{i}.json",
                        range(i, i + 1))
    return {"hermes": hermes_folder(root), "messages": messages, "lf_sharegpt": arrays,
            "parquet": write_parquet(root / "rows.parquet", 120, seed=7, row_group_rows=50),
            "hf": hf_folder(root)}


def hf_folder(root: Path) -> Path:
    """A Hugging Face `save_to_disk` folder of 90 generated rows in 3 Arrow shards."""
    import datasets

    rows = read_jsonl(write_jsonl(root / "for_hf.jsonl", 90, seed=5))
    folder = root / "hf_saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder), num_shards=3)
    return folder


# local and ray write the same bytes


@pytest.mark.parametrize("corpus", ["hermes", "messages", "lf_sharegpt", "parquet", "hf"])
def test_extractive_runs_are_byte_identical(ray_cluster, corpora, tmp_path, corpus):
    settings = BIG if corpus in ("messages", "lf_sharegpt") else SMALL
    src = corpora[corpus]
    suffix = src.suffix
    local = run(src, tmp_path / f"local{suffix}", "local", extractive(**settings))
    on_ray = run(src, tmp_path / f"ray{suffix}", "ray", extractive(**settings))
    assert on_ray.metrics.trajectories_compressed > 0
    assert_same(local, on_ray)
    no_leftovers(on_ray)


@pytest.mark.parametrize("corpus", ["hermes", "messages", "lf_sharegpt"])
def test_llm_runs_are_byte_identical(ray_cluster, corpora, tmp_path, corpus):
    settings = BIG if corpus != "hermes" else SMALL
    src = corpora[corpus]
    with FakeLLMServer(latency=0.01).in_thread() as server:
        local = run(src, tmp_path / "local", "local", llm(server.url, **settings))
        calls = server.requests
        on_ray = run(src, tmp_path / "ray", "ray", llm(server.url, **settings))
        ray_calls = server.requests - calls
    compressed = on_ray.metrics.trajectories_compressed
    assert compressed > 0 and calls == ray_calls == compressed
    assert on_ray.metrics.summaries_by_source["llm"] == compressed
    assert_same(local, on_ray)
    # The shards' caches were merged into the run's: a rerun asks nothing.
    assert (tmp_path / "ray_summary_cache.sqlite").is_file()
    no_leftovers(on_ray)


def test_a_file_cut_into_line_ranges_with_sampling(ray_cluster, tmp_path, monkeypatch):
    src = write_jsonl(tmp_path / "one.jsonl", 230, seed=3)
    with src.open("ab") as f:
        f.write(b"\n\n{broken\n")
    monkeypatch.setattr(sharded, "BLOCK_LINES", 50)  # 5 ranges
    for sample in (None, 40.0):
        local = run(src, tmp_path / f"local{sample}.jsonl", "local", extractive(**SMALL),
                    sample_percent=sample, seed=5)
        on_ray = run(src, tmp_path / f"ray{sample}.jsonl", "ray", extractive(**SMALL),
                     sample_percent=sample, seed=5)
        assert_same(local, on_ray)
        no_leftovers(on_ray)
    assert 0 < on_ray.metrics.total_trajectories < 230


def test_strict_reaches_the_shards_through_the_run_options(ray_cluster, corpora, tmp_path):
    # part1.jsonl holds a broken line: --strict stops there and commits nothing, on Ray as
    # locally (README: --strict), the shards reading it from the run's RunOptions.
    src = corpora["hermes"]
    for engine in ("local", "ray"):
        out = tmp_path / engine
        config = extractive(**SMALL).replace(engine=engine, ray_actors=2)
        with pytest.raises(StrictStop, match=r"part1\.jsonl"):
            compress_dataset(str(src), str(out), config, options=RunOptions(strict=True))
        assert not out.exists() or not any(out.iterdir()), engine
        layout = plan_of(src, out, config)
        assert not layout.checkpoint.exists() and not sharded.parts_folder(layout).exists()


# failures


def test_an_actor_killed_mid_shard_is_replaced_and_no_row_is_lost(ray_cluster, corpora,
                                                                  tmp_path):
    marker = ray_cluster
    src = corpora["hermes"]
    local = run(src, tmp_path / "local", "local", extractive(**SMALL))
    marker.unlink()  # armed: the next shard's worker exits after reading 5 records
    on_ray = run(src, tmp_path / "ray", "ray", extractive(**SMALL))
    assert "exited at" in marker.read_text(), "no worker died: the test hook did not fire"
    assert_same(local, on_ray)
    no_leftovers(on_ray)


def test_rerun_with_a_warm_cache_makes_no_request(ray_cluster, corpora, tmp_path):
    src = corpora["hermes"]
    with FakeLLMServer(latency=0.005).in_thread() as server:
        first = run(src, tmp_path / "out", "ray", llm(server.url, **SMALL))
        calls = server.requests
        again = run(src, tmp_path / "out", "ray", llm(server.url, **SMALL))
        assert server.requests == calls > 0
    assert again.metrics.total_summarization_calls == 0
    assert again.metrics.summaries_by_source["cache"] == first.metrics.trajectories_compressed


def limited_run(tmp_path: Path, engine: str, limit: dict[str, int]
                ) -> tuple[RunResult, FakeLLMServer]:
    """18 rows to summarize (two files of 9) through one endpoint with ``limit``."""
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(2):
        write_jsonl(folder / f"p{i}.jsonl", 27, seed=10 + i)  # 9 long rows each
    with FakeLLMServer().in_thread() as server:
        config = CompressionConfig.from_dict({
            "summarization": {"backend": "openai", "endpoints": [
                {"base_url": server.url, "model": "fake-model", **limit}]},
            "compression": SMALL})
        return run(folder, tmp_path / "out", engine, config), server


# The local runs wait on the bucket without Ray: they need not queue on the worker that
# holds this file's Ray instance (`ray_cluster`, built once for the `ray_engine` group).
ENGINES = ["local", pytest.param("ray", marks=pytest.mark.xdist_group("test_ray_engine.py"))]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_endpoint_sees_the_configured_requests_per_minute(request, tmp_path, engine):
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    rpm = 60  # a bucket of 10 s of budget: 10 requests at once, then 1 a second
    result, server = limited_run(tmp_path, engine, {"rpm": rpm})
    arrivals = sorted(server.arrivals)
    n = len(arrivals)
    assert n == result.metrics.trajectories_compressed == 18
    burst, per_second = rpm / 6, rpm / 60
    # However many actors share it, the endpoint sees what the one bucket of a local run
    # lets through: `burst` at once, then `per_second` (0.3 s of timing slack). A bucket
    # admits while its balance is positive, so each actor's may run one request ahead.
    buckets = 2 if engine == "ray" else 1
    for k, at in enumerate(arrivals):
        allowed = burst + per_second * (at - arrivals[0] + 0.3) + buckets
        assert k + 1 <= allowed, f"request {k + 1} at +{at - arrivals[0]:.2f}s"
    assert arrivals[-1] - arrivals[0] >= (n - burst - buckets) / per_second - 1


@pytest.mark.parametrize("engine", ENGINES)
def test_the_endpoint_sees_the_configured_tokens_per_minute(request, tmp_path, engine):
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    tpm = 36_000  # 600 tokens a second, a bucket of 6,000: a few requests, then a trickle
    result, server = limited_run(tmp_path, engine, {"tpm": tpm})
    log = sorted(server.token_log)
    assert len(log) == result.metrics.trajectories_compressed == 18
    start, total = log[0][0], sum(tokens for _, tokens in log)
    burst, per_second, biggest = tpm / 6, tpm / 60, max(tokens for _, tokens in log)
    assert total > 2 * burst, "the corpus must outlast the burst for the limit to show"
    # The server's own token counts: by any arrival, no more than the burst plus the
    # refill (0.3 s of timing slack), plus what each bucket may let through ahead of its
    # balance (one request admitted while positive, one whose estimate ran short).
    buckets = 2 if engine == "ray" else 1
    seen = 0
    for at, tokens in log:
        seen += tokens
        allowed = burst + per_second * (at - start + 0.3) + 2 * buckets * biggest
        assert seen <= allowed, f"{seen} tokens by +{at - start:.2f}s"
    assert log[-1][0] - start >= (total - burst - 2 * buckets * biggest) / per_second - 1


def test_a_missing_ray_extra_is_one_line_and_exit_2(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", 3)
    code = ("import sys; sys.modules['ray'] = None; "
            "from trajectory_compressor.app.cli import main; main()")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code, "compress", str(src), "--engine", "ray",
         "--summarizer", "extractive"], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: --engine ray needs the optional 'ray' extra (ray is not installed); install "
        "it with pip install 'trajectory-compressor[ray]' (in a checkout: bash "
        "scripts/setup.sh dev,ray)"]
    assert not (tmp_path / "in_compressed.jsonl").exists()


def test_the_engine_is_a_yaml_setting(tmp_path):
    config = CompressionConfig.from_dict({"processing": {"engine": "ray", "ray_actors": 3}})
    assert (config.engine, config.ray_actors) == ("ray", 3)
    with pytest.raises(Exception, match=r"processing\.engine must be one of local, ray"):
        CompressionConfig.from_dict({"processing": {"engine": "spark"}})
    # Both engines write the same rows: a run with either replaces the other's outputs.
    # (A config naming no endpoint leaves the summarizer to `auto`: issue 40.)
    assert config.fingerprint_dict() == CompressionConfig(summarizer="auto").fingerprint_dict()


# the driver killed, then resumed


def _ray_processes(run_id: str) -> list[int]:
    """Processes of the Ray instance a killed driver started (they carry its run id)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"TC_TEST_RUN_ID={run_id}".encode() in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def test_sigkill_of_the_driver_then_resume_equals_an_uninterrupted_run(ray_cluster, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(6):
        write_jsonl(folder / f"p{i}.jsonl", 30, seed=20 + i)
    out = tmp_path / "out"
    shards = tmp_path / ".out.shards"
    run_id = uuid.uuid4().hex
    with FakeLLMServer(latency=0.1).in_thread() as server:
        args = ["compress", str(folder), "-o", str(out), "--base-url", server.url,
                "--model", "fake-model", "--summarizer", "openai", "--target-max-tokens",
                "500", "--summary-target-tokens", "60", "--max-concurrent-requests", "2",
                "--engine", "ray", "--ray-actors", "1", "--quiet"]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TC_TEST_RUN_ID": run_id}
        env.pop("RAY_ADDRESS", None)
        proc = subprocess.Popen([sys.executable, "-m", "trajectory_compressor", *args],
                                env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            while not list(shards.glob("*/done.json")):
                assert proc.poll() is None, f"the run ended first: {proc.stderr.read()}"
                assert time.monotonic() < deadline
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            for pid in _ray_processes(run_id):  # the killed driver's Ray, left behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        done = len(list(shards.glob("*/done.json")))
        assert 1 <= done < 6, "the driver must die part-way"
        assert not (out / "p0.jsonl").exists()  # nothing under a final name yet
        resumed = run_cli(*args, "--resume", env={"TC_TEST_RUN_ID": run_id}, timeout=300)
        assert resumed.returncode == 0, resumed.stderr
        ref_args = [a if a != str(out) else str(tmp_path / "ref") for a in args]
        reference = run_cli(*ref_args[:-5], "--quiet", timeout=300)
        assert reference.returncode == 0, reference.stderr
    for i in range(6):
        assert (out / f"p{i}.jsonl").read_bytes() == (tmp_path / "ref" / f"p{i}.jsonl"
                                                       ).read_bytes()
    for name in ("_over_limit.jsonl", "_rejects.jsonl"):
        assert (tmp_path / f"out{name}").read_bytes() == (tmp_path / f"ref{name}").read_bytes()
    ours, theirs = (json.loads((tmp_path / f"{name}_metrics.json").read_text())
                    for name in ("out", "ref"))
    for data in (ours, theirs):
        data.pop("processing")
        data["run"].pop("outputs")
        committed = data.pop("committed")  # the same bytes at other paths
        data["committed"] = (committed["rows"], sorted(
            entry["sha256"] for entry in committed["files"].values()))
        data.pop("remedies", None)  # the reference ran locally: it stored the table
    assert ours == theirs
    assert not shards.exists() and not (tmp_path / ".out.checkpoint.json").exists()
