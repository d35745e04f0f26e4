"""Strategies (§19) on every engine: the same bytes on the local engine and Ray, batch
export + finish equal to an online run, a warm summary cache asks nothing, and a resume
refuses another strategy. Inputs: the bundled terminal-heavy samples, cut short."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli
from tests.fake_llm_server import FakeLLMServer, default_reply
from tests.sample_files import sample_head
from tests.test_batch import answer, request_files
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.engine.checkpoint import settings_fingerprint

ARGS = ("--model", "fake-model", "--target-max-tokens", "3000", "--summary-target-tokens",
        "150", "--strategy", "hybrid", "--mask-keep-last", "1", "--max-concurrent-requests", "4")


def sample(tmp_path: Path, name: str = "terminal_hermes.jsonl", rows: int = 6) -> Path:
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    return sample_head(name, folder, rows=rows)


def strategy_section(out: Path) -> dict:
    return json.loads(out.with_name(out.stem + "_metrics.json").read_text())["strategy"]


def test_batch_export_and_finish_equal_an_online_hybrid_run(tmp_path):
    src = sample(tmp_path)
    online = tmp_path / "online" / "out.jsonl"
    bodies: list[dict] = []

    def reply(data: dict) -> str:
        bodies.append(data)
        return default_reply(data)

    with FakeLLMServer(reply=reply).in_thread() as server:
        proc = run_cli("compress", str(src), "-o", str(online), "--base-url", server.url,
                       *ARGS, "--quiet")
        assert proc.returncode in (0, 1), proc.stderr
        sent = server.requests
    section = strategy_section(online)
    assert section["rows_by_strategy"].get("mask+summarize", 0) == sent > 0
    assert section["masked_rows"] > 0
    # Each request carries the original tool text of the turns it replaces: no placeholder.
    assert all("tool output masked" not in json.dumps(b) for b in bodies)

    folder, out = tmp_path / "batch", tmp_path / "run" / "out.jsonl"
    export = run_cli("compress", str(src), "-o", str(out), "--summarizer", "batch",
                     "--batch-dir", str(folder), *ARGS, "--quiet")
    assert export.returncode == 0, export.stderr
    files = request_files(folder)
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    key = lambda b: json.dumps(b, sort_keys=True)  # noqa: E731
    assert sorted(key(x["body"]) for x in lines) == sorted(key(b) for b in bodies)
    answer(files, folder / "results-00001.jsonl")
    finish = run_cli("compress", str(src), "-o", str(out), "--summarizer", "batch",
                     "--batch-dir", str(folder), "--batch-results",
                     str(folder / "results-*.jsonl"), *ARGS, "--quiet")
    assert finish.returncode in (0, 1), finish.stderr
    assert out.read_bytes() == online.read_bytes()


def test_a_warm_cache_makes_no_request(tmp_path):
    src = sample(tmp_path, "terminal_openai.jsonl")
    with FakeLLMServer().in_thread() as server:
        out = tmp_path / "out.jsonl"
        first = run_cli("compress", str(src), "-o", str(out), "--base-url", server.url, *ARGS,
                        "--quiet")
        assert first.returncode in (0, 1), first.stderr
        asked = server.requests
        assert asked > 0
        again = run_cli("compress", str(src), "-o", str(out), "--base-url", server.url,
                        *ARGS, "--quiet", "--overwrite")
        assert again.returncode in (0, 1), again.stderr
        assert server.requests == asked
    metrics = json.loads((tmp_path / "out_metrics.json").read_text())
    assert metrics["summarization"]["summaries_by_source"]["cache"] == asked


def test_a_resume_refuses_another_strategy(tmp_path):
    outputs = {tmp_path / "in.jsonl": tmp_path / "out.jsonl"}
    base = CompressionConfig()
    fingerprints = [settings_fingerprint(base.replace(**change), outputs, None, 42)
                    for change in ({}, {"strategy": "mask"}, {"strategy": "hybrid"},
                                   {"strategy": "hybrid", "mask_keep_last": 1},
                                   {"strategy": "hybrid", "mask_exclude_tools": ["open"]})]
    assert len({json.dumps(f, sort_keys=True, default=str) for f in fingerprints}) == 5


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="needs the 'ray' extra")
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # a machine too loaded to start a local Ray in time
        pytest.skip(f"a local Ray did not start here: {str(exc)[:120]}")
    try:
        yield
    finally:
        ray.shutdown()


@pytest.mark.parametrize("name", ["terminal_hermes.jsonl", "terminal_openai.jsonl",
                                  "terminal_llamafactory.json"])
def test_local_and_ray_write_the_same_bytes(local_ray, tmp_path, name):
    from tests.test_ray_engine import assert_same, extractive, run

    src = sample(tmp_path, name)
    config = extractive(target_max_tokens=3000, summary_target_tokens=150,
                        strategy="hybrid", mask_keep_last=1)
    local = run(src, tmp_path / f"local{src.suffix}", "local", config)
    on_ray = run(src, tmp_path / f"ray{src.suffix}", "ray", config)
    assert local.metrics.masked_rows > 0
    assert_same(local, on_ray)
