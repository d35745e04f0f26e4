"""A failing summarizer is loud (issue 36, item 4): a run none of whose summaries came
from the LLM exits 2 (everything written), whatever the failure (HTTP 500s, 429s past
their retries, HTML pages, malformed replies); ``--allow-fallback`` accepts it; and
``--max-fallback-share`` (``summarization.max_fallback_share``) gates the share of
fallbacks for CI with exit code 3. Real CLI, loopback fake server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import invoke_cli, read_jsonl
from tests.fake_llm_server import FakeLLMServer
from tests.test_loud_failures import ENV, KEY_ENV, compress, config, metrics_of, three_rows

ADVICE = ("; the outputs are written, each such row marked summary_source \"fallback\"; fix "
          "the endpoint (the warnings above say how it failed), or pass --allow-fallback to "
          "accept a run without LLM summaries")


def sources(out: Path) -> list[str]:
    return [r["compression_metrics"]["summary_source"] for r in read_jsonl(out)]


@pytest.mark.parametrize(("fault", "kind"), [
    ("http500", "http"),
    ("rate_limit", "rate_limited"),
    ("html", "invalid"),
    ("not_json", "invalid"),
])
def test_every_request_failing_exits_2_after_writing_everything(tmp_path, sample_jsonl,
                                                                 fault, kind):
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"
    with FakeLLMServer(faults={fault: 1.0}, retry_after=0).in_thread() as server:
        proc = compress(source, out, config(tmp_path, "  max_retries: 2\n"), server.url,
                        "--model", "m", "--quiet")
        requests = server.requests
    assert requests == 6  # 3 rows x 2 attempts: the run went to its end
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[-1] == ("error: no summary came from the LLM: all 3 summaries asked of it "
                         "fell back to extractive ones, and none of the 6 requests sent "
                         f"succeeded (failures by kind: {kind} 6){ADVICE}")
    # The first failure was said as it happened, with its reason.
    assert lines[0].startswith(f"warning: {server.url}: ")
    assert sources(out) == ["fallback"] * 3  # written: nothing lost
    assert metrics_of(out)["summarization"]["errors_by_kind"] == {kind: 6}


def test_one_row_needing_a_summary_is_enough(tmp_path, sample_jsonl):
    lines = sample_jsonl.read_bytes().splitlines(keepends=True)
    source, out = tmp_path / "one.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(lines[0] + lines[1])  # row 0 fits, row 1 needs a summary
    with FakeLLMServer(faults={"http500": 1.0}).in_thread() as server:
        proc = compress(source, out, config(tmp_path, "  max_retries: 1\n"), server.url,
                        "--model", "m", "--quiet")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "error: no summary came from the LLM: the summary asked of it fell back to "
        "extractive ones, and none of the 1 request sent succeeded (failures by kind: "
        f"http 1){ADVICE}")
    assert len(read_jsonl(out)) == 2


def test_allow_fallback_accepts_the_run(tmp_path, sample_jsonl):
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"
    with FakeLLMServer(faults={"http500": 1.0}).in_thread() as server:
        proc = compress(source, out, config(tmp_path, "  max_retries: 1\n"), server.url,
                        "--model", "m", "--quiet", "--allow-fallback")
    assert proc.returncode == 0, proc.stderr
    assert "no summary came from the LLM" not in proc.stderr
    assert sources(out) == ["fallback"] * 3


def test_a_run_with_one_llm_summary_is_not_all_fallbacks_but_a_gate_can_fail_it(
        tmp_path, sample_jsonl):
    source = three_rows(sample_jsonl, tmp_path)
    # One request at a time: one row's summary comes back, the other two fail both
    # their attempts.
    script = ["ok", "http500", "http500", "http500", "http500"]
    cfg = config(tmp_path, "  max_retries: 2\n")
    runs = {}
    for name, gate in (("plain", ()), ("share", ("--max-fallback-share", "50%"))):
        out = tmp_path / f"{name}.jsonl"
        with FakeLLMServer(faults={"http500": 1.0}, script=script).in_thread() as server:
            runs[name] = compress(source, out, cfg, server.url, "--model", "m", "--quiet",
                                  "--max-concurrent-requests", "1", *gate)
        assert sorted(sources(out)) == ["fallback", "fallback", "llm"]
    assert runs["plain"].returncode == 0, runs["plain"].stderr
    assert "error:" not in runs["plain"].stderr
    assert runs["share"].returncode == 3
    assert runs["share"].stderr.splitlines()[-1] == ("gate failed: fallback summaries 2 "
                                                     "(66.7%) > 50%")
    # report gates a finished run the same way, from its metrics file; N is a count.
    plain = str(tmp_path / "plain.jsonl")
    for limit, code in (("60%", 3), ("70%", 0), ("1", 3), ("2", 0)):
        report = invoke_cli("report", plain, "--max-fallback-share", limit)
        assert report.returncode == code, (limit, report.stderr)
        assert report.stderr.splitlines() == (
            [f"gate failed: fallback summaries 2 (66.7%) > {limit}"] if code else [])
    # validate counts the rows' own metrics.
    check = invoke_cli("validate", plain, "--max-fallback-share", "0")
    assert check.returncode == 3
    assert check.stderr.splitlines() == ["gate failed: fallback summaries 2 (66.7%) > 0"]


def test_the_gate_from_the_config_file_and_the_flag_over_it(tmp_path, sample_jsonl):
    source = three_rows(sample_jsonl, tmp_path)
    script = ["ok", "http500", "http500", "http500", "http500"]
    cfg = config(tmp_path, "  max_retries: 2\n  max_fallback_share: 10%\n")
    out = tmp_path / "yaml.jsonl"
    with FakeLLMServer(faults={"http500": 1.0}, script=script).in_thread() as server:
        proc = compress(source, out, cfg, server.url, "--model", "m", "--quiet",
                        "--max-concurrent-requests", "1")
    assert proc.returncode == 3
    assert proc.stderr.splitlines()[-1] == "gate failed: fallback summaries 2 (66.7%) > 10%"
    out = tmp_path / "flag.jsonl"
    with FakeLLMServer(faults={"http500": 1.0}, script=script).in_thread() as server:
        proc = compress(source, out, cfg, server.url, "--model", "m", "--quiet",
                        "--max-concurrent-requests", "1", "--max-fallback-share", "70%")
    assert proc.returncode == 0, proc.stderr


def test_all_fallbacks_exit_2_even_past_a_gate_that_fails(tmp_path, sample_jsonl):
    source, out = three_rows(sample_jsonl, tmp_path), tmp_path / "out.jsonl"
    with FakeLLMServer(faults={"http500": 1.0}).in_thread() as server:
        proc = compress(source, out, config(tmp_path, "  max_retries: 1\n"), server.url,
                        "--model", "m", "--quiet", "--max-fallback-share", "0")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert "gate failed: fallback summaries 3 (100.0%) > 0" in lines
    assert lines[-1].startswith("error: no summary came from the LLM: all 3 summaries")


@pytest.mark.parametrize("value", ['"150%"', "-1", "1.5", "lots", "[1]"])
def test_a_bad_gate_value_in_the_config_is_a_usage_error(tmp_path, sample_jsonl, value):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(f"summarization:\n  max_fallback_share: {value}\n")
    proc = invoke_cli("compress", str(sample_jsonl), "-o", str(tmp_path / "o.jsonl"),
                   "--config", str(cfg), "--base-url", "http://127.0.0.1:9/v1",
                   "--api-key-env", KEY_ENV, env=ENV)
    assert proc.returncode == 2
    assert "summarization.max_fallback_share must be a" in proc.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_the_extractive_summarizer_never_counts_as_a_failing_llm(tmp_path, sample_jsonl):
    out = tmp_path / "out.jsonl"
    proc = invoke_cli("compress", str(three_rows(sample_jsonl, tmp_path)), "-o", str(out),
                      "--summarizer", "extractive", "--quiet", "--max-fallback-share", "0")
    assert proc.returncode in (0, 1), proc.stderr
    assert "no summary came from the LLM" not in proc.stderr
    assert "gate failed" not in proc.stderr
