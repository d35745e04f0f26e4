"""--resume with the LLM backend and its cache gives exactly the output of an
uninterrupted run, including where the summaries came from (issue 13, lesser items)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.cli_helpers import interrupt_when, read_jsonl, run_cli, start_cli
from tests.fake_llm_server import FakeLLMServer

ARGS = ("--model", "fake-model", "--max-concurrent-requests", "4", "--checkpoint-every", "1",
        "--quiet")
COMPRESSED_ROWS = 38  # of the sample's 50


def _metrics(out: Path) -> dict:
    data = json.loads(out.with_name(out.stem + "_metrics.json").read_text())
    for volatile in ("processing", "run"):  # timings; the output's own paths
        data.pop(volatile, None)
    # A resumed run stores no "what would fix it" table (report re-plans, saying so).
    data.pop("remedies", None)
    committed = data.get("committed")
    if isinstance(committed, dict):  # the output's digest, without its path
        committed["files"] = sorted(committed.get("files", {}).values(),
                                    key=lambda f: f["sha256"])
    return data


def test_a_resumed_run_reports_what_an_uninterrupted_run_reports(tmp_path, sample_jsonl):
    reference, out = tmp_path / "ref" / "out.jsonl", tmp_path / "run" / "out.jsonl"
    with FakeLLMServer(latency=0.01).in_thread() as server:
        proc = run_cli("compress", str(sample_jsonl), "-o", str(reference),
                       "--base-url", server.url, *ARGS)
        assert proc.returncode == 0, proc.stderr
    assert server.requests == COMPRESSED_ROWS
    # One request hangs; the rows behind it get their summaries (and cache them) but
    # cannot be written before it: that is where the run is interrupted.
    server = FakeLLMServer(latency=0.01, script=["ok", "ok", "ok", "stall"], stall_seconds=60)
    with server.in_thread():
        run = start_cli("compress", str(sample_jsonl), "-o", str(out), "--base-url",
                        server.url, *ARGS)
        # Every reply but the hung one sent; a second for the run to read and cache the
        # last of them (0.2 s after the last request arrived was tight on a loaded machine).
        interrupt_when(run, lambda: server.outcomes["ok"] >= COMPRESSED_ROWS - 1,
                       signal.SIGINT, settle=1.0, limit=120)
        assert run.returncode == 130
        checkpoint = json.loads((out.parent / ".out.checkpoint.json").read_text())
        before = server.requests
        resumed = run_cli("compress", str(sample_jsonl), "-o", str(out), "--base-url",
                          server.url, "--resume", *ARGS)
        resumed_requests = server.requests - before
    assert resumed.returncode == 0, resumed.stderr
    rows_after = [r for r in read_jsonl(reference)[checkpoint["skip"]:]
                  if r.get("compression_metrics", {}).get("summarization_api_calls")]
    # Only the hung request is made again; the rest were cached by the interrupted part.
    assert resumed_requests == 1 < len(rows_after)
    assert out.read_bytes() == reference.read_bytes()
    for suffix in ("_over_limit.jsonl", "_rejects.jsonl"):
        assert (out.parent / f"out{suffix}").read_bytes() == \
            (reference.parent / f"out{suffix}").read_bytes()
    assert _metrics(out) == _metrics(reference)
    by_source = _metrics(out)["summarization"]["summaries_by_source"]
    assert by_source["llm"] == COMPRESSED_ROWS and by_source["cache"] == 0
    # A new run over the same outputs is not a resume: the cache serves it, and says so.
    rerun = run_cli("compress", str(sample_jsonl), "-o", str(out), "--base-url",
                    "http://127.0.0.1:9/v1", "--overwrite", *ARGS)  # nothing listens there
    assert rerun.returncode == 0, rerun.stderr
    assert _metrics(out)["summarization"]["summaries_by_source"]["cache"] == COMPRESSED_ROWS
