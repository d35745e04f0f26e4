"""Failing endpoints are loud (§12): the first failure of each kind is printed with its
reason, an endpoint that fails its first requests stops the run (exit 2) unless
--allow-fallback, errors are counted by kind, and rows cut by the deadline count the
requests they made. Real CLI, loopback servers."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from tests.cli_helpers import read_jsonl, run_cli
from tests.fake_llm_server import FakeLLMServer

KEY = "sk-loud-7c1e9a4b2d8f6e0a3b5cSECRET"
KEY_ENV = "TC_TEST_LOUD_KEY"
ENV = {KEY_ENV: KEY}
LATER = ("later ones are counted in the metrics file under summarization.errors_by_kind)")


def three_rows(sample: Path, folder: Path) -> Path:
    """Rows 1, 7 and 16 of the sample: each needs one summary."""
    lines = sample.read_bytes().splitlines(keepends=True)
    source = folder / "in.jsonl"
    source.write_bytes(lines[1] + lines[7] + lines[16])
    return source


def config(folder: Path, extra: str = "") -> Path:
    path = folder / "run.yaml"
    path.write_text("summarization:\n  retry_delay: 0.01\n  request_timeout: 10\n" + extra)
    return path


def compress(source: Path, out: Path, cfg: Path, url: str, *args: str):
    return run_cli("compress", str(source), "-o", str(out), "--config", str(cfg),
                   "--base-url", url, "--api-key-env", KEY_ENV, *args, env=ENV)


def metrics_of(out: Path) -> dict:
    return json.loads(out.with_name(out.stem + "_metrics.json").read_text())


def test_a_wrong_model_stops_the_run_with_one_sentence(tmp_path, sample_jsonl):
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"
    with FakeLLMServer(models={"real-model"}, echo_authorization=True).in_thread() as server:
        proc = compress(source, out, config(tmp_path), server.url, "--model", "wrong-model",
                        "--max-concurrent-requests", "1")
        requests = server.requests
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: the endpoint {server.url} failed its first 3 requests (last: HTTP 404: The "
        "model 'wrong-model' does not exist (the request carried Bearer [REDACTED])); check "
        "its URL and model, or pass --allow-fallback to use extractive summaries instead"]
    assert requests == 3 and not out.exists()


def test_with_allow_fallback_a_wrong_model_falls_back_and_is_counted(tmp_path, sample_jsonl):
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"
    with FakeLLMServer(models={"real-model"}, echo_authorization=True).in_thread() as server:
        proc = compress(source, out, config(tmp_path), server.url, "--model", "wrong-model",
                        "--allow-fallback", "--quiet")
        requests = server.requests
    assert proc.returncode == 0, proc.stderr
    assert requests == 9  # 3 rows x 3 attempts
    assert proc.stderr.splitlines() == [
        f"warning: {server.url}: HTTP 404: The model 'wrong-model' does not exist (the "
        "request carried Bearer [REDACTED]) (the first 'not_found' failure from this "
        f"endpoint; {LATER}"]
    sources = [r["compression_metrics"]["summary_source"] for r in read_jsonl(out)]
    assert sources == ["fallback"] * 3
    summarization = metrics_of(out)["summarization"]
    assert summarization["errors_by_kind"] == {"not_found": 9}
    assert (summarization["total_api_calls"], summarization["total_errors"]) == (9, 9)
    # The same through the config file.
    yaml_out = tmp_path / "yaml.jsonl"
    with FakeLLMServer(models={"real-model"}).in_thread() as server:
        proc = compress(source, yaml_out, config(tmp_path, "  allow_fallback: true\n"),
                        server.url, "--model", "wrong-model", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert metrics_of(yaml_out)["summarization"]["errors_by_kind"] == {"not_found": 9}


def test_an_unreachable_endpoint_stops_the_run(tmp_path, sample_jsonl):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"
    proc = compress(source, out, config(tmp_path), url, "--model", "m")
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"error: the endpoint {url} failed its first 3 requests (last: "
                           "cannot connect (")
    assert line.endswith("); check its URL and model, or pass --allow-fallback to use "
                         "extractive summaries instead")


def test_the_first_failure_of_each_kind_is_printed_once(tmp_path, sample_jsonl):
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"
    # One request at a time; 5 attempts per summary, so every row ends with the LLM's.
    script = ["http500", "empty", "http500", "ok", "empty", "ok", "ok"]
    with FakeLLMServer(script=script).in_thread() as server:
        proc = compress(source, out, config(tmp_path, "  max_retries: 5\n"), server.url,
                        "--model", "m", "--max-concurrent-requests", "1", "--quiet")
        requests = server.requests
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"warning: {server.url}: HTTP 500: internal server error (the first 'http' failure "
        f"from this endpoint; {LATER}",
        f"warning: {server.url}: the reply's content is empty (the first 'invalid' failure "
        f"from this endpoint; {LATER}"]
    summarization = metrics_of(out)["summarization"]
    assert summarization["errors_by_kind"] == {"http": 2, "invalid": 2}
    assert summarization["total_api_calls"] == requests == 7
    assert summarization["summaries_by_source"]["llm"] == 3


def test_rows_cut_by_the_deadline_count_the_requests_they_made(tmp_path, sample_jsonl):
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"
    # The row's own work before its request counts against the deadline too; 3 s leaves a
    # busy machine time to send it (0.5 s once did not, under CI's load of five).
    cfg = config(tmp_path, "processing:\n  per_trajectory_timeout: 3\n")
    with FakeLLMServer(faults={"stall": 1.0}, stall_seconds=30).in_thread() as server:
        proc = compress(source, out, cfg, server.url, "--model", "m", "--quiet")
        requests = server.requests
    assert proc.returncode == 1  # failed rows
    for row in read_jsonl(out):
        m = row["compression_metrics"]
        assert m["error"].startswith("summarization exceeded the per-trajectory deadline")
        assert (m["summarization_api_calls"], m["summarization_errors"]) == (1, 0)
    assert requests == 3
    assert metrics_of(out)["summarization"]["total_api_calls"] == 3


def test_with_allow_fallback_a_rejected_key_is_an_ordinary_failure():
    """Library level: the summarizer raises `SummaryFailed` (the caller falls back), the
    first 401 is told once, and the key is not in it."""
    from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
    from trajectory_compressor.core.summary import SummaryFailed, SummaryRequest
    from trajectory_compressor.summarizers.openai import OpenAISummarizer

    told: list[str] = []

    async def main():
        async with FakeLLMServer(api_key="another-key", echo_authorization=True) as server:
            cfg = CompressionConfig(allow_fallback=True, retry_delay=0.01, cache_enabled=False)
            s = OpenAISummarizer(cfg, [EndpointConfig(server.url, "m", KEY_ENV)],
                                 environ=ENV)
            s.notify = told.append
            turns = [{"from": "gpt", "value": "ran ls"}, {"from": "tool", "value": "a b"}]
            async with s:
                for i in range(2):
                    with pytest.raises(SummaryFailed) as failure:
                        await s.summarize(SummaryRequest(turns, 3 + i, 100))
                    assert failure.value.usage.errors_by_kind == {"auth": 3}
            return server.url, server.requests

    url, requests = asyncio.run(main())
    assert requests == 6
    assert told == [f"{url}: HTTP 401: invalid API key (the request carried Bearer "
                    f"[REDACTED]) (the first 'auth' failure from this endpoint; {LATER}"]
