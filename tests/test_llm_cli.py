"""The CLI with the `openai` backend, end to end: real subprocess, real loopback servers."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from tests.agent_rows import write_agent_rows
from tests.cli_helpers import read_jsonl, run_cli
from tests.fake_llm_server import REPLY_MARK, FakeLLMServer, spawn_server
from tests.sample_files import sample_head
from trajectory_compressor.core.conversation import SUMMARY_PREFIX

KEY = "sk-e2e-4b1d9f0c7a2e5d3b8c6aTOPSECRET"
KEY_ENV = "TC_TEST_LLM_KEY"


def summary_turns(row: dict) -> list[str]:
    return [t["value"] for t in row["conversations"] if t["value"].startswith(SUMMARY_PREFIX)]


def assert_key_absent(folder: Path, *texts: str) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"
    for text in texts:
        assert KEY not in text


def llm_args(*urls: str) -> list[str]:
    args = []
    for url in urls:
        args += ["--base-url", url]
    return [*args, "--model", "fake-model", "--api-key-env", KEY_ENV]


def test_compress_through_an_endpoint_then_rerun_from_the_cache(tmp_path):
    (tmp_path / "in").mkdir()
    # The sample's first ten rows: two under the default target, eight to summarize.
    src = sample_head("trajectories.jsonl", tmp_path / "in")
    out = tmp_path / "out.jsonl"
    env = {KEY_ENV: KEY}
    with FakeLLMServer(api_key=KEY, latency=0.005).in_thread() as server:
        proc = run_cli("compress", str(src), "-o", str(out), *llm_args(server.url),
                       env=env)
        assert proc.returncode == 0, proc.stderr
        first_requests = server.requests
        first = read_jsonl(out)
        metrics = json.loads((tmp_path / "out_metrics.json").read_text())
        rerun = run_cli("compress", str(src), "-o", str(out), *llm_args(server.url),
                        env=env)
        assert rerun.returncode == 0, rerun.stderr
        rerun_requests = server.requests - first_requests
        again = json.loads((tmp_path / "out_metrics.json").read_text())
        uncached = run_cli("compress", str(src), "-o", str(tmp_path / "nc.jsonl"),
                           *llm_args(server.url), "--no-cache", "--quiet", env=env)
        assert uncached.returncode == 0, uncached.stderr
        uncached_requests = server.requests - first_requests - rerun_requests
        shared = run_cli("compress", str(src), "-o", str(tmp_path / "sh.jsonl"),
                         *llm_args(server.url), "--cache-path",
                         str(tmp_path / "out_summary_cache.sqlite"), "--quiet", env=env)
        assert shared.returncode == 0, shared.stderr
        shared_requests = server.requests - first_requests - rerun_requests - uncached_requests
    rows_in = read_jsonl(src)
    assert [r["id"] for r in first] == [r["id"] for r in rows_in]
    compressed = [r for r in first if r.get("compression_metrics", {}).get("was_compressed")]
    assert compressed and first_requests == len(compressed)
    for row in compressed:
        [summary] = summary_turns(row)
        assert summary.startswith(f"{SUMMARY_PREFIX} {REPLY_MARK}")
        assert row["compression_metrics"]["summary_source"] == "llm"
        assert row["compression_metrics"]["summarization_api_calls"] == 1
    assert metrics["summarization"]["summaries_by_source"]["llm"] == len(compressed)
    assert metrics["usage"]["prompt_tokens"] > 0 and metrics["usage"]["completion_tokens"] > 0
    assert (tmp_path / "out_summary_cache.sqlite").exists()
    # The identical rerun makes no request and writes the same rows, sourced from the cache.
    assert rerun_requests == 0
    assert again["summarization"]["summaries_by_source"]["cache"] == len(compressed)
    assert again["summarization"]["total_api_calls"] == 0
    second = read_jsonl(out)
    assert [summary_turns(r) for r in second] == [summary_turns(r) for r in first]
    assert uncached_requests == len(compressed)
    assert not (tmp_path / "nc_summary_cache.sqlite").exists()
    # Another output pointed at the first run's cache file needs no request either.
    assert shared_requests == 0 and not (tmp_path / "sh_summary_cache.sqlite").exists()
    assert_key_absent(tmp_path, proc.stdout, proc.stderr, rerun.stdout, rerun.stderr)


def test_a_rejected_key_stops_the_run_at_once_with_exit_code_2(tmp_path, sample_jsonl):
    out = tmp_path / "out.jsonl"
    with FakeLLMServer(api_key="a-different-key", latency=0.05).in_thread() as server:
        proc = run_cli("compress", str(sample_jsonl), "-o", str(out), *llm_args(server.url),
                       "--max-concurrent-requests", "4", env={KEY_ENV: KEY})
        requests = server.requests
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"error: the endpoint {server.url} rejected the API key from ${KEY_ENV} "
                     "(HTTP 401); check the key and the endpoint's URL"]
    assert requests <= 4, "requests already waiting must not be sent after a 401"
    assert not out.exists() and not (tmp_path / "out_metrics.json").exists()
    assert_key_absent(tmp_path, proc.stdout, proc.stderr)


def test_a_401_mid_run_does_not_wait_for_requests_in_flight(tmp_path, sample_jsonl):
    out = tmp_path / "out.jsonl"
    # Every request stalls for ten minutes except the second, which is refused: the run
    # must stop without waiting for the first row (the head of the ordered window). The
    # 120 s timeout is that check, with room for a cold start on a loaded machine.
    server = FakeLLMServer(faults={"stall": 1.0}, stall_seconds=600,
                           script=["stall", "unauthorized"])
    with server.in_thread():
        proc = run_cli("compress", str(sample_jsonl), "-o", str(out), *llm_args(server.url),
                       "--max-concurrent-requests", "8", env={KEY_ENV: KEY}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "rejected the API key" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_a_missing_key_variable_is_a_usage_error(tmp_path, sample_jsonl):
    proc = run_cli("compress", str(sample_jsonl), "-o", str(tmp_path / "o.jsonl"),
                   "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "TC_UNSET_KEY_VAR",
                   env={"TC_UNSET_KEY_VAR": ""})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: the environment variable TC_UNSET_KEY_VAR (API key for http://127.0.0.1:9/v1) "
        "is not set; export it, name another with --api-key-env, or use --summarizer "
        "extractive"]


@pytest.mark.parametrize("pool", ["faulty+healthy", "faulty only"])
def test_fault_mix_end_to_end(tmp_path, pool):
    """~40% faults; servers in separate processes; the real CLI; then an identical rerun.
    150 agent rows of ~700 tokens, each compressed (one request) at a 400-token target:
    the requests of 150 sample-sized rows at a twentieth of the counting."""
    corpus = write_agent_rows(tmp_path / "corpus.jsonl", 150)
    rows_in = read_jsonl(corpus)
    config = tmp_path / "run.yaml"
    # Alone, the faulty endpoint needs more attempts: 0.4^5 = 1% of rows fall back.
    retries = 3 if pool == "faulty+healthy" else 5
    config.write_text(f"summarization:\n  request_timeout: 1\n  retry_delay: 0.05\n"
                      f"  max_retries: {retries}\nprocessing:\n  max_concurrent_requests: 16\n"
                      "compression:\n  target_max_tokens: 400\n  summary_target_tokens: 120\n")
    faults = {"http500": 0.1, "rate_limit": 0.06, "stall": 0.06, "html": 0.06,
              "truncated": 0.06, "empty": 0.06}
    out = tmp_path / "out" / "corpus_compressed.jsonl"
    metrics_file = out.parent / "corpus_compressed_metrics.json"
    env = {KEY_ENV: KEY}
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(spawn_server(
            faults=faults, latency=0.01, retry_after=1, stall_seconds=30, seed=3,
            api_key_env=KEY_ENV, env=env))]
        if pool == "faulty+healthy":
            servers.append(stack.enter_context(spawn_server(latency=0.01,
                                                            api_key_env=KEY_ENV, env=env)))
        args = ["compress", str(corpus), "-o", str(out), "--config", str(config),
                *llm_args(*(s.url for s in servers))]
        first = run_cli(*args, env=env)
        assert first.returncode == 0, first.stderr
        before = sum(s.stats()["requests"] for s in servers)
        rows_first = read_jsonl(out)
        metrics = json.loads(metrics_file.read_text())
        second = run_cli(*args, env=env)
        assert second.returncode == 0, second.stderr
        faulty_outcomes = servers[0].stats()["outcomes"]
        new_requests = sum(s.stats()["requests"] for s in servers) - before
    injected = sum(faulty_outcomes.get(f, 0) for f in faults)
    # Beside a healthy endpoint the pool steers requests away from the failing one, which
    # then serves few (4 faults in one run of 150 rows, a few dozen in others): here the
    # point is that faults were served and every row still came out; the faulty-only
    # pool checks the volume.
    assert injected >= (2 if pool == "faulty+healthy" else 30)
    # Every row out, in order; each compressed row has the server's text or says fallback.
    assert [r["id"] for r in rows_first] == [r["id"] for r in rows_in]
    sources = []
    for row in rows_first:
        m = row.get("compression_metrics")
        if not m or not m["was_compressed"]:
            continue
        [summary] = summary_turns(row)
        sources.append(m["summary_source"])
        if m["summary_source"] == "llm":
            assert summary.startswith(f"{SUMMARY_PREFIX} {REPLY_MARK}")
        else:
            assert m["summary_source"] == "fallback" and m["summarization_errors"] > 0
            assert REPLY_MARK not in summary
    fallbacks = sources.count("fallback")
    assert len(sources) == len(rows_in) and fallbacks <= 0.05 * len(sources)
    assert metrics["summarization"]["total_errors"] >= injected - faulty_outcomes.get("stall", 0)
    assert metrics["summary"]["total_trajectories"] == len(rows_in)
    # The identical rerun asks again only for the rows that fell back.
    by_source = json.loads(metrics_file.read_text())["summarization"]["summaries_by_source"]
    assert by_source["cache"] >= sources.count("llm")
    if fallbacks == 0:
        assert new_requests == 0
    else:
        assert by_source["llm"] + by_source["fallback"] <= fallbacks
    assert_key_absent(tmp_path, first.stdout, first.stderr, second.stdout, second.stderr)
