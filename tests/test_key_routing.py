"""Keys (§12): scrubbed from everything written, sent only where configured, never over
plain http to another machine unless allowed, never to a redirect's target. Real CLI,
loopback servers."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.cli_helpers import read_jsonl, run_cli
from tests.fake_llm_server import FakeLLMServer

KEY = "rt5e2b8d1f4a7c9e3b6d0aSECRET"  # no key-like pattern: only the literal scrub
KEY_ENV = "TC_TEST_ROUTE_KEY"
FIX = ("; check its URL and model, or pass --allow-fallback to use extractive summaries "
       "instead")


def write_input(sample: Path, folder: Path) -> Path:
    """Rows 0 (under the target), 1 and 7 (compressed), 19 (over the limit), a bad line."""
    lines = sample.read_bytes().splitlines(keepends=True)
    source = folder / "in.jsonl"
    source.write_bytes(lines[0] + lines[1] + lines[7] + lines[19] + b"{broken\n")
    return source


def files_holding(folder: Path, secret: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_the_key_never_reaches_a_file_even_when_the_server_echoes_it(tmp_path, sample_jsonl):
    source = write_input(sample_jsonl, tmp_path)
    done, stopped = tmp_path / "done", tmp_path / "stopped"
    env = {KEY_ENV: KEY}

    def reply(data: dict) -> str:
        return f"Used the key {KEY} and the header Authorization: Bearer {KEY} to call it."

    args = ["--model", "m", "--api-key-env", KEY_ENV, "--max-concurrent-requests", "1",
            "--summary-references", "off"]
    with FakeLLMServer(api_key=KEY, reply=reply, echo_authorization=True).in_thread() as s:
        full = run_cli("compress", str(source), "-o", str(done / "out.jsonl"),
                       "--base-url", s.url, *args, env=env)
    # A run stopped by a revoked key keeps its checkpoint, partial outputs and cache.
    server = FakeLLMServer(api_key=KEY, reply=reply, echo_authorization=True,
                           script=["ok", "unauthorized"])
    with server.in_thread():
        cut = run_cli("compress", str(source), "-o", str(stopped / "out.jsonl"),
                      "--base-url", server.url, "--checkpoint-every", "1", *args, env=env)
    assert full.returncode == 1, full.stderr  # the bad line is rejected
    assert cut.returncode == 2, cut.stderr
    written = sorted(p.name for p in done.iterdir())
    assert written == ["out.jsonl", "out_metrics.json", "out_over_limit.jsonl",
                       "out_rejects.jsonl", "out_summary_cache.sqlite"]
    assert (stopped / ".out.checkpoint.json").exists()
    assert any(p.name.endswith(".sqlite") for p in stopped.iterdir())
    assert files_holding(tmp_path, KEY) == []
    for proc in (full, cut):
        assert KEY not in proc.stdout and KEY not in proc.stderr
    summaries = [t["value"] for r in read_jsonl(done / "out.jsonl")[:3]
                 for t in r["conversations"] if t["value"].startswith("[CONTEXT SUMMARY]")]
    assert summaries and all(
        s == "[CONTEXT SUMMARY]: Used the key [REDACTED] and the header Authorization: "
        "Bearer [REDACTED] to call it. The request carried Bearer [REDACTED]."
        for s in summaries)


def test_url_credentials_are_not_stored(tmp_path, sample_jsonl):
    source = write_input(sample_jsonl, tmp_path)
    password = "pa55-w0rd-7f3e"
    server = FakeLLMServer(script=["ok", "unauthorized"])
    with server.in_thread():
        url = server.url.replace("http://", f"http://someone:{password}@")
        proc = run_cli("compress", str(source), "-o", str(tmp_path / "out.jsonl"),
                       "--base-url", url, "--model", "m", "--max-concurrent-requests", "1",
                       "--checkpoint-every", "1")
    assert proc.returncode == 2, proc.stderr
    checkpoint = json.loads((tmp_path / ".out.checkpoint.json").read_text())
    assert checkpoint["settings"]["config"]["base_url"] == server.url
    assert files_holding(tmp_path, password) == []
    assert password not in proc.stderr and "someone:" not in proc.stderr


def test_the_default_key_goes_only_to_the_default_provider(tmp_path, sample_jsonl):
    source = write_input(sample_jsonl, tmp_path)
    env = {"OPENROUTER_API_KEY": KEY}
    # The built-in defaults name OPENROUTER_API_KEY for openrouter.ai.
    with FakeLLMServer().in_thread() as server:
        other = run_cli("compress", str(source), "-o", str(tmp_path / "a.jsonl"),
                        "--base-url", server.url, "--model", "m", "--quiet", env=env)
        unkeyed = Counter(server.authorizations)
        named = run_cli("compress", str(source), "-o", str(tmp_path / "b.jsonl"),
                        "--base-url", server.url, "--model", "m", "--quiet",
                        "--api-key-env", "OPENROUTER_API_KEY", env=env)
        keyed = server.authorizations - unkeyed
    assert other.returncode == named.returncode == 1  # the bad line
    assert unkeyed == Counter({None: 2})
    assert keyed == Counter({f"Bearer {KEY}": 2})


def test_a_key_over_plain_http_to_another_machine_is_refused_before_any_connection(
        tmp_path, sample_jsonl):
    source = write_input(sample_jsonl, tmp_path)
    # 10.255.255.1 does not answer: a connection attempt would hang for the request
    # timeout (120 s), so an exit within the 100 s timeout shows none was made (with room
    # for a cold start on a loaded machine).
    proc = run_cli("compress", str(source), "-o", str(tmp_path / "out.jsonl"),
                   "--base-url", "http://10.255.255.1/v1", "--model", "m",
                   "--api-key-env", KEY_ENV, env={KEY_ENV: KEY}, timeout=100)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: the endpoint http://10.255.255.1/v1 uses plain http, so the API key from "
        f"${KEY_ENV} would cross the network unencrypted; use https, or pass "
        "--allow-insecure-http (summarization.allow_insecure_http) for a network you trust"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_a_redirect_to_another_origin_is_not_followed(tmp_path, sample_jsonl):
    source = write_input(sample_jsonl, tmp_path)
    env = {KEY_ENV: KEY}
    config = tmp_path / "run.yaml"
    config.write_text("summarization:\n  retry_delay: 0.01\n")
    args = ["--config", str(config), "--model", "m", "--api-key-env", KEY_ENV]
    with FakeLLMServer().in_thread() as elsewhere:
        target = elsewhere.url + "/chat/completions"
        with FakeLLMServer(redirect_to=target).in_thread() as server:
            stopped = run_cli("compress", str(source), "-o", str(tmp_path / "a.jsonl"),
                              "--base-url", server.url, "--max-concurrent-requests", "1",
                              *args, env=env)
            fallback = run_cli("compress", str(source), "-o", str(tmp_path / "b.jsonl"),
                               "--base-url", server.url, "--allow-fallback", "--quiet",
                               *args, env=env)
            redirected = server.requests
        contacted = elsewhere.requests
    assert stopped.returncode == 2
    assert stopped.stderr.splitlines() == [
        f"error: the endpoint {server.url} failed its first 3 requests (last: HTTP 307 "
        f"redirect to {target} (not followed)){FIX}"]
    assert fallback.returncode == 1, fallback.stderr  # the bad line
    metrics = json.loads((tmp_path / "b_metrics.json").read_text())
    assert metrics["summarization"]["errors_by_kind"] == {"redirect": 6}
    assert redirected == 3 + 6 and contacted == 0
