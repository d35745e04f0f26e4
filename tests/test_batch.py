"""Two-phase batch mode (§17, issue 19): export, a fake provider, import, finish.

The provider in these tests answers each request line with exactly what the loopback fake
server answers for the same body (`default_reply`, and usage counted as the fake counts
it), so a batch run must write what an online run against that server writes.
"""

from __future__ import annotations

import copy
import itertools
import json
import signal
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import interrupt_when, read_jsonl, run_cli, start_cli
from tests.fake_llm_server import REPLY_MARK, FakeLLMServer, default_reply
from tests.fixtures_runs import generated_rows, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.engine.batch import BatchLimits, export_batch, finish_batch

ARGS = ("--model", "fake-model", "--target-max-tokens", "1000", "--summary-target-tokens",
        "60", "--max-concurrent-requests", "4")
BATCH = ("--summarizer", "batch")


def corpus(path: Path) -> Path:
    """Generated rows, and the first compressed one again under another id (identical
    regions: one request, reported as a call by the first row and a cache hit by the
    second, as online)."""
    rows = generated_rows(11, 24)
    twin = copy.deepcopy(rows[0])
    twin["id"] = "twin"
    return write_jsonl(path, [*rows, twin])


def answer(requests: list[Path], results: Path, errors: Path | None = None, *,
           error_file: tuple[int, ...] = (), expired: tuple[int, ...] = (),
           length: tuple[int, ...] = (), missing: tuple[int, ...] = (),
           rejected: tuple[int, ...] = ()) -> list[str]:
    """A fake provider: request lines in, result lines out (the n-th request overall is
    answered per the index lists); returns the custom_ids in request order."""
    ids: list[str] = []
    out: list[str] = []
    err: list[str] = []
    for path in requests:
        for line in path.read_text(encoding="utf-8").splitlines():
            n = len(ids)
            request = json.loads(line)
            ids.append(request["custom_id"])
            assert request["method"] == "POST" and request["url"] == "/v1/chat/completions"
            body = request["body"]
            text = default_reply(body)
            finish = "stop"
            if n in length:
                text, finish = text[: len(text) // 2], "length"
            # Usage as the fake server counts it.
            prompt = sum(len(str(m.get("content", ""))) for m in body["messages"]) // 4 + 1
            usage = {"prompt_tokens": prompt, "completion_tokens": len(text) // 4 + 1}
            completion = {"id": f"chatcmpl-{n}", "object": "chat.completion",
                          "model": body["model"],
                          "choices": [{"index": 0, "finish_reason": finish,
                                       "message": {"role": "assistant", "content": text}}],
                          "usage": usage}
            result: dict[str, Any] = {"id": f"batch_req_{n}", "custom_id": request["custom_id"],
                                      "response": {"status_code": 200, "request_id": f"r{n}",
                                                   "body": completion}, "error": None}
            if n in missing:
                continue
            if n in expired:  # OpenAI: an expired request, in the error file
                err.append(json.dumps({"id": f"batch_req_{n}", "custom_id": request["custom_id"],
                                       "response": None, "error": {
                                           "code": "batch_expired",
                                           "message": "This request could not be executed "
                                                      "before the completion window expired."}}))
                continue
            if n in error_file:  # OpenAI: a request the model refused, in the error file
                err.append(json.dumps({"id": f"batch_req_{n}", "custom_id": request["custom_id"],
                                       "response": {"status_code": 500, "request_id": f"r{n}",
                                                    "body": {"error": {
                                                        "message": "The server had an error",
                                                        "type": "server_error"}}},
                                       "error": None}))
                continue
            if n in rejected:  # vllm run-batch: an error response in the output file
                result = {"id": f"vllm-{n}", "custom_id": request["custom_id"],
                          "response": {"status_code": 400, "request_id": f"vllm-batch-{n}",
                                       "body": {"object": "error", "message": "bad request",
                                                "type": "BadRequestError", "code": 400}},
                          "error": "bad request"}
            out.append(json.dumps(result))
    results.write_text("".join(line + "\n" for line in out), encoding="utf-8")
    if errors is not None:
        errors.write_text("".join(line + "\n" for line in err), encoding="utf-8")
    return ids


def request_files(folder: Path) -> list[Path]:
    manifest = json.loads((folder / "manifest.json").read_text())
    return [folder / f["name"] for f in manifest["files"]]


def metrics(out: Path) -> dict:
    return json.loads(out.with_name(out.stem + "_metrics.json").read_text())


def online_run(src: Path, out: Path, *extra: str) -> tuple[list[dict], int]:
    """The reference: the same run against the loopback server; the bodies it received."""
    bodies: list[dict] = []

    def reply(data: dict) -> str:
        bodies.append(data)
        return default_reply(data)

    with FakeLLMServer(reply=reply).in_thread() as server:
        proc = run_cli("compress", str(src), "-o", str(out), "--base-url", server.url, *ARGS,
                       *extra, "--quiet")
        assert proc.returncode == 0, proc.stderr
        return bodies, server.requests


def test_export_then_results_give_what_an_online_run_gives(tmp_path):
    src = corpus(tmp_path / "in.jsonl")
    online = tmp_path / "online" / "out.jsonl"
    bodies, sent = online_run(src, online)
    folder, out = tmp_path / "batch", tmp_path / "run" / "out.jsonl"

    export = run_cli("compress", str(src), "-o", str(out), *BATCH, "--batch-dir", str(folder),
                     *ARGS, "--price-in", "1.5", "--price-out", "6")
    assert export.returncode == 0, export.stderr
    # Phase 1 writes its folder and nothing else.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch", "in.jsonl", "online"]
    manifest = json.loads((folder / "manifest.json").read_text())
    files = request_files(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "requests-00001.jsonl"]
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    assert manifest["model"] == "fake-model" and manifest["requests"] == len(lines) == sent
    assert manifest["files"] == [{"name": "requests-00001.jsonl", "requests": len(lines),
                                  "bytes": files[0].stat().st_size}]
    assert manifest["stats"]["duplicates"] == 1  # the twin row
    # Each line: the online request's body exactly, under the key the online cache uses.
    key = lambda b: json.dumps(b, sort_keys=True)  # noqa: E731
    assert sorted(key(x["body"]) for x in lines) == sorted(key(b) for b in bodies)
    with sqlite3.connect(online.with_name("out_summary_cache.sqlite")) as db:
        online_keys = {k for (k,) in db.execute("SELECT key FROM summaries")}
    assert {x["custom_id"] for x in lines} == online_keys
    # The projection: prompt tokens counted in the prompts, output at max_tokens.
    counter = TokenCounter.load()
    prompt_tokens = sum(counter.count(m["content"]) for x in lines for m in x["body"]["messages"])
    output_tokens = sum(x["body"]["max_tokens"] for x in lines)
    cost = (prompt_tokens * 1.5 + output_tokens * 6) / 1e6
    text = " ".join(export.stdout.split())
    assert f"input tokens {prompt_tokens:,}" in text and f"output tokens {output_tokens:,}" in text
    assert f"projected cost $ {cost:,.2f}" in text
    assert f"vllm run-batch -i {files[0]} -o {folder / 'results-00001.jsonl'} --model fake-model" \
        in text

    # Phase 1 again: the same files, byte for byte.
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    again = run_cli("compress", str(src), "-o", str(out), *BATCH, "--batch-dir", str(folder),
                    *ARGS, "--quiet")
    assert again.returncode == 0, again.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before

    answer(files, folder / "results-00001.jsonl")
    finish = run_cli("compress", str(src), "-o", str(out), *BATCH, "--batch-dir", str(folder),
                     "--batch-results", str(folder / "results-*.jsonl"), *ARGS)
    assert finish.returncode == 0, finish.stderr
    assert f"{len(lines)} summaries accepted, 0 failed" in finish.stdout
    assert out.read_bytes() == online.read_bytes()
    for suffix in ("_over_limit.jsonl", "_rejects.jsonl"):
        assert (out.parent / f"out{suffix}").read_bytes() == \
            (online.parent / f"out{suffix}").read_bytes()
    ours, theirs = metrics(out), metrics(online)
    assert ours["summarization"] == theirs["summarization"]
    assert ours["usage"] == theirs["usage"]
    by_source = ours["summarization"]["summaries_by_source"]
    assert by_source["llm"] == len(lines) and by_source["cache"] == 1


def test_windows_output_through_batch_gives_the_online_bytes(tmp_path):
    """`--output-mode windows` (§20): every window's summary is exported in phase 1 and
    phase 2 writes the windows an online run writes, summarizer rows included."""
    windows = ("--output-mode", "windows")
    src = corpus(tmp_path / "in.jsonl")
    online = tmp_path / "online" / "out.jsonl"
    bodies, sent = online_run(src, online, *windows, "--emit-summarizer-rows",
                              str(tmp_path / "online" / "summaries.jsonl"))
    folder, out = tmp_path / "batch", tmp_path / "run" / "out.jsonl"
    more = (*windows, "--emit-summarizer-rows", str(tmp_path / "run" / "summaries.jsonl"))
    export = run_cli("compress", str(src), "-o", str(out), *BATCH, "--batch-dir", str(folder),
                     *ARGS, *more, "--quiet")
    assert export.returncode == 0, export.stderr
    files = request_files(folder)
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    key = lambda b: json.dumps(b, sort_keys=True)  # noqa: E731
    assert sorted(key(x["body"]) for x in lines) == sorted(key(b) for b in bodies)
    assert len(lines) == sent
    answer(files, folder / "results-00001.jsonl")
    finish = run_cli("compress", str(src), "-o", str(out), *BATCH, "--batch-dir", str(folder),
                     "--batch-results", str(folder / "results-*.jsonl"), *ARGS, *more)
    assert finish.returncode == 0, finish.stderr
    written = read_jsonl(out)
    ids = [r["id"] for r in written]
    assert sum(i.endswith("#w2") for i in ids) >= 2  # rows became windows
    assert out.read_bytes() == online.read_bytes()
    assert (out.parent / "summaries.jsonl").read_bytes() == \
        (online.parent / "summaries.jsonl").read_bytes()
    ours, theirs = metrics(out), metrics(online)
    assert ours["windows"] == theirs["windows"]
    assert ours["summarization"] == theirs["summarization"]
    made = sum(1 for r in written for m in r.get("conversations", r.get("messages", []))
               if "[CONTEXT SUMMARY]:" in str(m.get("value", m.get("content"))))
    assert ours["windows"]["summaries"] == made == \
        sum(ours["summarization"]["summaries_by_source"].values())


def test_failed_and_missing_results_fall_back_or_go_online(tmp_path):
    src = corpus(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    proc = run_cli("compress", str(src), *BATCH, "--batch-dir", str(folder), *ARGS, "--quiet")
    assert proc.returncode == 0, proc.stderr
    results, errors = folder / "output.jsonl", folder / "errors.jsonl"
    # (Not the first request: that one is also the twin row's.)
    ids = answer(request_files(folder), results, errors, error_file=(1,), expired=(2,),
                 length=(3,), missing=(4,), rejected=(5,))
    bad = {ids[1]: "http", ids[2]: "batch_error", ids[3]: "truncated", ids[4]: "batch_missing",
           ids[5]: "http"}
    out = tmp_path / "fallback" / "out.jsonl"
    proc = run_cli("compress", str(src), "-o", str(out), *BATCH, "--batch-dir", str(folder),
                   "--batch-results", str(results), "--batch-results", str(errors), *ARGS)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(ids) - 5} summaries accepted, 4 failed (http 2, " in proc.stdout
    assert "batch_error 1" in proc.stdout and "truncated 1" in proc.stdout
    assert "1 exported request has no result" in proc.stdout
    rows = read_jsonl(out)
    fell_back = [r["compression_metrics"] for r in rows
                 if r.get("compression_metrics", {}).get("summary_source") == "fallback"]
    assert len(fell_back) == 5
    assert all(m["summarization_errors"] == 1 for m in fell_back)
    summary = metrics(out)["summarization"]
    assert summary["errors_by_kind"] == dict(Counter(bad.values())) == {
        "http": 2, "batch_error": 1, "truncated": 1, "batch_missing": 1}
    assert summary["summaries_by_source"]["fallback"] == 5

    # With an endpoint, exactly those requests go online, and their rows get its reply.
    online = tmp_path / "online" / "out.jsonl"
    with FakeLLMServer().in_thread() as server:
        proc = run_cli("compress", str(src), "-o", str(online), *BATCH, "--batch-dir",
                       str(folder), "--batch-results", str(folder / "*.jsonl"),
                       "--base-url", server.url, *ARGS)
        assert proc.returncode == 0, proc.stderr
        assert server.requests == 5
    assert "go to the configured endpoints" in proc.stdout
    rows = read_jsonl(online)
    sources = [r.get("compression_metrics", {}).get("summary_source") for r in rows]
    assert "fallback" not in sources
    retried = [r["compression_metrics"] for r in rows
               if r.get("compression_metrics", {}).get("summarization_errors")]
    assert len(retried) == 5
    assert all(m["summary_source"] == "llm" and m["summarization_api_calls"] >= 1
               for m in retried)
    assert all(REPLY_MARK in t["value"] for r in rows for t in r["conversations"]
               if t["value"].startswith("[CONTEXT SUMMARY]:"))


def test_phase_2_resumed_after_an_interruption_equals_an_uninterrupted_one(tmp_path):
    src = corpus(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    proc = run_cli("compress", str(src), *BATCH, "--batch-dir", str(folder), *ARGS, "--quiet")
    assert proc.returncode == 0, proc.stderr
    results = folder / "results.jsonl"
    answer(request_files(folder), results, missing=(2,))  # its row must go online
    finish = (*BATCH, "--batch-dir", str(folder), "--batch-results", str(results), *ARGS,
              "--checkpoint-every", "1", "--quiet")
    reference, out = tmp_path / "ref" / "out.jsonl", tmp_path / "run" / "out.jsonl"
    with FakeLLMServer().in_thread() as server:
        proc = run_cli("compress", str(src), "-o", str(reference), *finish,
                       "--base-url", server.url)
        assert proc.returncode == 0, proc.stderr
    # The online request hangs: every row behind it waits there, unwritten. (The resume
    # goes to the same server: a resume refuses other endpoints.)
    stalled = FakeLLMServer(script=["stall"], stall_seconds=120)
    with stalled.in_thread():
        run = start_cli("compress", str(src), "-o", str(out), *finish, "--base-url",
                        stalled.url)
        checkpoint = out.parent / ".out.checkpoint.json"
        interrupt_when(run, lambda: stalled.requests >= 1 and checkpoint.exists(),
                       signal.SIGINT, settle=1.0)
        assert run.returncode == 130
        assert not out.exists()
        resumed = run_cli("compress", str(src), "-o", str(out), *finish, "--base-url",
                          stalled.url, "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert stalled.requests == 2  # the hung one, then again
    assert out.read_bytes() == reference.read_bytes()
    ours, theirs = metrics(out)["summarization"], metrics(reference)["summarization"]
    assert ours == theirs
    assert ours["summaries_by_source"]["cache"] == 1  # the twin, in both


def config() -> CompressionConfig:
    return CompressionConfig(target_max_tokens=1000, summary_target_tokens=60,
                             summarization_model="fake-model")


def test_request_files_are_split_at_the_limits(tmp_path):
    src = corpus(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    whole = export_batch(str(src), None, config(), folder)
    [only] = request_files(folder)
    lines = only.read_bytes().splitlines(keepends=True)
    assert len(lines) == whole.stats.requests > 7

    by_count = export_batch(str(src), None, config(), folder, limits=BatchLimits(3, 10**9))
    files = request_files(folder)
    assert [f.requests for f in by_count.files] == [3] * (len(lines) // 3) + (
        [len(lines) % 3] if len(lines) % 3 else [])
    assert b"".join(f.read_bytes() for f in files) == b"".join(lines)  # same lines, in order
    assert [f.name for f in files] == [f"requests-{i:05d}.jsonl" for i in range(1, len(files) + 1)]

    sizes = [len(x) for x in lines]
    limit = max(sizes) + min(sizes) - 1  # never two of the largest, sometimes two lines
    by_bytes = export_batch(str(src), None, config(), folder, limits=BatchLimits(1000, limit))
    files = request_files(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["manifest.json", *(f.name for f in files)])  # the previous export's extra files gone
    assert all(f.stat().st_size <= limit for f in files)
    assert [f.bytes for f in by_bytes.files] == [f.stat().st_size for f in files]
    assert b"".join(f.read_bytes() for f in files) == b"".join(lines)
    for this, following in itertools.pairwise(files):  # each file was full
        first = following.read_bytes().splitlines(keepends=True)[0]
        assert this.stat().st_size + len(first) > limit

    kept = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(ConfigError, match="over the limit of 100 bytes per file"):
        export_batch(str(src), None, config(), folder, limits=BatchLimits(1000, 100))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == kept  # untouched


def test_phase_2_refuses_results_exported_for_other_settings(tmp_path):
    src = corpus(tmp_path / "in.jsonl")
    folder = tmp_path / "batch"
    export_batch(str(src), None, config(), folder)
    (folder / "r.jsonl").write_text("")
    other = config().replace(target_max_tokens=1200)
    with pytest.raises(ConfigError, match=r"the setting compression\.target_max_tokens is 1200 "
                                          r"but was 1000 when the requests"):
        finish_batch(str(src), None, other, folder, [str(folder / "r.jsonl")])
    with pytest.raises(ConfigError, match="--sample-percent/--seed differ"):
        finish_batch(str(src), None, config(), folder, [str(folder / "r.jsonl")],
                     sample_percent=50)
    with pytest.raises(ConfigError, match="batch results file not found"):
        finish_batch(str(src), None, config(), folder, [str(folder / "nothing-*.jsonl")])
    assert not (tmp_path / "in_compressed.jsonl").exists()


def test_the_batch_flags_need_each_other(tmp_path, sample_jsonl):
    proc = run_cli("compress", str(sample_jsonl), "-o", str(tmp_path / "o.jsonl"), *BATCH)
    assert proc.returncode == 2 and "--summarizer batch needs --batch-dir" in proc.stderr
    proc = run_cli("compress", str(sample_jsonl), "-o", str(tmp_path / "o.jsonl"),
                   "--batch-dir", str(tmp_path / "b"))
    assert proc.returncode == 2 and "go with --summarizer batch" in proc.stderr
    proc = run_cli("compress", str(sample_jsonl), "-o", str(tmp_path / "o.jsonl"), *BATCH,
                   "--batch-dir", str(tmp_path / "b"), "--engine", "ray")
    assert proc.returncode == 2 and "runs on the local engine" in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert not list(tmp_path.iterdir())
