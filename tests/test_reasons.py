"""Why a row stays over the limit or failed: each reason on a row built for it, with the
numbers behind it worked out by hand (§16).

Every row is made of ``words(n)`` texts (exactly n tokens each with the bundled
tokenizer); the config is the hand config of `fixtures_runs`: target 100, summary target
20, the last 4 turns and the first turn of each role protected, no notice. With n turns,
protected indices below ``n // 2`` are the head and the others the tail; the middle is
what lies between.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.cli_helpers import read_jsonl
from tests.fixtures_runs import HAND_CONFIG, compress_run, row, write_jsonl
from trajectory_compressor.app.report import format_report, load_report
from trajectory_compressor.core import reasons
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.explain import RowReason, explain
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.metrics import (
    AggregateMetrics,
    TrajectoryMetrics,
    aggregate_from_state,
    aggregate_state,
)
from trajectory_compressor.core.summary import Summarizer, Summary, SummaryRequest
from trajectory_compressor.engine.compressor import RowResult, TrajectoryCompressor


class FixedSummarizer(Summarizer):
    """Returns the same text for every region (to make a summary too long on purpose)."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def summarize(self, request: SummaryRequest) -> Summary:
        return Summary(self.text, source="llm")


class Slow(Summarizer):
    async def summarize(self, request: SummaryRequest) -> Summary:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")


def config(**extra) -> CompressionConfig:
    return CompressionConfig(summarizer="extractive", **{**HAND_CONFIG, **extra})


def run(counter, the_row, summarizer: Summarizer | None = None, **extra) -> RowResult:
    comp = TrajectoryCompressor(config(**extra), counter=counter,
                                summarizer=summarizer or ExtractiveSummarizer(counter.count))

    async def once() -> RowResult:
        async with comp:
            return await comp.compress_row(the_row)

    return asyncio.run(once())


def numbers(before, after, head, tail, middle, region, **more) -> dict[str, int]:
    return {"tokens_before": before, "tokens_after": after, "target": 100,
            "summary_target": 20, "head_tokens": head, "tail_tokens": tail,
            "middle_tokens": middle, "region_tokens": region, **more}


def check(result: RowResult, code: str, expected: dict[str, int]) -> RowReason:
    why = result.why
    assert why is not None and why.code == code
    assert why.numbers == expected
    assert why.text == result.reason  # one answer, whichever way it is asked
    assert reasons.reason_of(why.code) == reasons.reason_of(why.text)
    return why


def test_nothing_compressible(counter):
    # 4 turns, all protected (first of each role, and the last 4): head 0-1 (< 4 // 2),
    # tail 2-3, middle [2, 2) empty.
    result = run(counter, row("r", "SHGT", [50, 50, 10, 10]))
    check(result, "nothing_compressible", numbers(120, 120, 100, 20, 0, 0))


def test_protected_tail_over_target(counter):
    # 12 turns: head 0-3 (25), tail 8-11 (4 x 30 = 120), middle 4-7 (120) all summarized;
    # 25 + 120 + 20 = 165 > 100, and the tail is the larger side.
    result = run(counter, row("r", "SHGTGTGTGTGT", [10, 5, 5, 5] + [30] * 8))
    after = result.metrics.compressed_tokens
    check(result, "protected_tail_over_target",
          numbers(265, after, 25, 120, 120, 120, summary_tokens=after - 145))
    assert 145 < after <= 165


def test_protected_head_over_target(counter):
    # Head 0-3 holds 60 + 5 + 5 + 5 = 75 tokens, tail 8-11 holds 20, the middle 40 (all
    # summarized): 75 + 20 + 20 = 115 > 100, and the head is the larger side.
    result = run(counter, row("r", "SHGTGTGTGTGT", [60, 5, 5, 5, 10, 10, 10, 10, 5, 5, 5, 5]))
    after = result.metrics.compressed_tokens
    check(result, "protected_head_over_target",
          numbers(135, after, 75, 20, 40, 40, summary_tokens=after - 95))


def test_protected_head_alone_over_target(counter):
    # 4 turns, all protected: head 0-1 holds 60 + 50 = 110 tokens, over the target of 100
    # on its own; there is no middle either, but the head is the reason (issue 25).
    result = run(counter, row("r", "SHGT", [60, 50, 10, 10]))
    check(result, "protected_head_alone_over_target", numbers(130, 130, 110, 20, 0, 0))
    # A middle that is summarized does not change it: head 0-3 (105) + summary > 100
    # (165 tokens: 105 + middle 40 + tail 20).
    result = run(counter, row("r", "SHGTGTGTGTGT", [90, 5, 5, 5, 10, 10, 10, 10, 5, 5, 5, 5]))
    after = result.metrics.compressed_tokens
    check(result, "protected_head_alone_over_target",
          numbers(165, after, 105, 20, 40, 40, summary_tokens=after - 125))
    assert result.metrics.was_compressed and 125 < after <= 145


def test_budget_not_reached(counter):
    # Middle 4-7 is G G T T and the tail starts with a tool turn (8): the region's end
    # snaps back from 7 to 5, so only turn 4 (30) can go. 25 + 20 + 20 = 65 would fit,
    # but 165 - 30 + 20 = 155 does not.
    result = run(counter, row("r", "SHGTGGTTTGHG", [10, 5, 5, 5, 30, 30, 30, 30, 5, 5, 5, 5]))
    after = result.metrics.compressed_tokens
    check(result, "budget_not_reached",
          numbers(165, after, 25, 20, 120, 30, summary_tokens=after - 135))


def test_no_clean_cut(counter):
    # Middle 4-6 is T T G: the start snaps forward to 6; the end (7, a tool turn) cannot
    # move forward and snaps back to 6: an empty region.
    result = run(counter, row("r", "SHGTTTGTGTG", [10, 5, 5, 5, 40, 40, 10, 5, 5, 5, 5]))
    check(result, "no_clean_cut", numbers(135, 135, 25, 20, 90, 0))


def test_region_too_small(counter):
    # Middle 4-5 holds 5 + 5 = 10 tokens: not more than a 20-token summary.
    result = run(counter, row("r", "SHGTGTGTGT", [10, 5, 5, 5, 5, 5, 40, 40, 40, 40]))
    check(result, "region_too_small", numbers(195, 195, 25, 160, 10, 10))


def test_summary_too_long(counter):
    # Head 25, tail 20, region 4-7 (160): planned 45 + 20 = 65, but the summary is longer.
    long = "The assistant did the work. " * 12
    result = run(counter, row("r", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5]),
                 FixedSummarizer(long), summary_tolerance=20.0)
    after = result.metrics.compressed_tokens
    assert 100 < after < 205 and result.metrics.summary_source == "llm"
    check(result, "summary_too_long",
          numbers(205, after, 25, 20, 160, 160, summary_tokens=after - 45))


def test_summary_grew_fails_the_row(counter):
    # The same row with a summary longer than the 160 tokens it replaces: left unchanged.
    huge = "The assistant did the work. " * 60
    result = run(counter, row("r", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5]),
                 FixedSummarizer(huge), summary_tolerance=20.0)
    assert result.metrics.failed and not result.metrics.was_compressed
    why = check(result, "summary_grew", numbers(205, 205, 25, 20, 160, 160))
    assert why.failed and why.text.startswith(reasons.SUMMARY_GREW.text)


def test_deadline_exceeded_fails_the_row(counter):
    result = run(counter, row("r", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5]),
                 Slow(), per_trajectory_timeout=0.2)
    why = check(result, "deadline_exceeded", numbers(205, 205, 25, 20, 160, 160))
    assert why.failed


def test_other_failures_and_unknown_texts_still_get_a_code():
    from trajectory_compressor.core.plan import Plan, Region

    plan = Plan("compress", 205, Region(4, 8), Region(4, 8), 160, head_tokens=25,
                tail_tokens=20, target=100, summary_target=20)
    failed = TrajectoryMetrics(original_tokens=205, compressed_tokens=205,
                               still_over_limit=True,
                               error="compression failed: ValueError: boom")
    assert explain(plan, failed) == RowReason(
        "summary_failed", "compression failed: ValueError: boom",
        numbers(205, 205, 25, 20, 160, 160))
    failed.error = "something else entirely"
    assert explain(plan, failed).code == "failed"  # type: ignore[union-attr]
    fits = TrajectoryMetrics(original_tokens=205, compressed_tokens=65)
    assert explain(plan, fits) is None
    # Codes and sentences (today's and those older runs wrote) name the same reason.
    assert reasons.reason_of("the protected head and tail alone exceed the target") \
        is reasons.PROTECTED_TOO_BIG
    for reason in reasons.ALL:
        assert reasons.reason_of(reason.code) is reason


def test_counts_per_reason_survive_resume_and_merge():
    a = AggregateMetrics()
    a.add(TrajectoryMetrics(still_over_limit=True), "budget_not_reached")
    a.add(TrajectoryMetrics(still_over_limit=True), "budget_not_reached")
    a.add(TrajectoryMetrics(still_over_limit=True, error="x"), "deadline_exceeded")
    a.add(TrajectoryMetrics(was_compressed=True, elisions=[
        {"turn": 5, "tokens_before": 900, "tokens_after": 100},
        {"turn": 7, "tokens_before": 300, "tokens_after": 250}]))
    restored = aggregate_from_state(json.loads(json.dumps(aggregate_state(a))))
    assert restored.to_dict() == a.to_dict()
    b = AggregateMetrics()
    b.add(TrajectoryMetrics(still_over_limit=True), "nothing_compressible")
    b.add(TrajectoryMetrics(still_over_limit=True), "budget_not_reached")
    restored.merge(b)
    assert restored.to_dict()["over_limit"] == {
        "reasons": {"budget_not_reached": 3, "deadline_exceeded": 1,
                    "nothing_compressible": 1},
        "rows_elided": 1, "tool_outputs_elided": 2, "tokens_elided": 850}


@pytest.fixture
def reasons_run(tmp_path, counter):
    rows = [
        row("fits", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5]),
        row("no-middle", "SHGT", [50, 50, 10, 10]),
        row("tail", "SHGTGTGTGTGT", [10, 5, 5, 5] + [30] * 8),
        row("head", "SHGTGTGTGTGT", [60, 5, 5, 5, 10, 10, 10, 10, 5, 5, 5, 5]),
        row("cut", "SHGTTTGTGTG", [10, 5, 5, 5, 40, 40, 10, 5, 5, 5, 5]),
    ]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    compress_run(src, out, config(), counter)
    return out


def test_the_over_limit_file_the_metrics_file_and_report_carry_the_reasons(reasons_run):
    entries = {e["id"]: e for e in read_jsonl(reasons_run.with_name("out_over_limit.jsonl"))}
    assert {k: e["reason"] for k, e in entries.items()} == {
        "no-middle": "nothing_compressible", "tail": "protected_tail_over_target",
        "head": "protected_head_over_target", "cut": "no_clean_cut"}
    assert entries["no-middle"]["reason_text"] == reasons.NO_MIDDLE.text
    assert entries["no-middle"]["reason_numbers"] == numbers(120, 120, 100, 20, 0, 0)
    assert entries["cut"]["reason_numbers"] == numbers(135, 135, 25, 20, 90, 0)
    metrics = json.loads(reasons_run.with_name("out_metrics.json").read_text())
    assert metrics["over_limit"]["reasons"] == {
        "no_clean_cut": 1, "nothing_compressible": 1, "protected_head_over_target": 1,
        "protected_tail_over_target": 1}
    report = load_report(reasons_run)
    assert report.figures()["reasons"] == metrics["over_limit"]["reasons"]
    assert {r.id: (r.code, r.numbers) for r in report.rows}["cut"] == \
        ("no_clean_cut", numbers(135, 135, 25, 20, 90, 0))
    data = report.to_dict()
    assert data["figures"]["over_limit"] == 4 and data["figures"]["failed"] == 0
    assert {r["id"]: r["reason"] for r in data["rows"]} == \
        {k: e["reason"] for k, e in entries.items()}
    text = format_report(report)
    why = text[text.index("Why, by reason"):text.index("Still over")].splitlines()
    assert [line.split()[-2:] for line in why[2:-1]] == [
        ["nothing_compressible", "1"], ["no_clean_cut", "1"],
        ["protected_head_over_target", "1"], ["protected_tail_over_target", "1"]]


def test_an_over_limit_file_of_an_older_run_still_reads(tmp_path):
    out = tmp_path / "old.jsonl"
    write_jsonl(out, [])
    entry = {"location": "in.jsonl:3", "file": "in.jsonl", "line": 3, "id": "x",
             "reason": "the protected head and tail alone exceed the target",
             "metrics": {"original_tokens": 265, "compressed_tokens": 160,
                         "still_over_limit": True}}
    write_jsonl(tmp_path / "old_over_limit.jsonl", [entry])
    [flagged] = load_report(out).rows
    assert flagged.code == "protected_over_target" and flagged.numbers == {}
    assert flagged.reason == entry["reason"]


def test_a_row_cut_by_its_deadline_reports_the_calls_it_made(tmp_path):
    """Through the CLI and a real loopback server that never answers in time."""
    from tests.cli_helpers import run_cli
    from tests.fake_llm_server import FakeLLMServer

    src = write_jsonl(tmp_path / "in.jsonl", [
        row("late", "SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])])
    (tmp_path / "c.yaml").write_text(
        "compression: {target_max_tokens: 100, summary_target_tokens: 20}\n"
        "output: {add_summary_notice: false}\n"
        "summarization: {request_timeout: 20, max_retries: 1}\n"
        "processing: {per_trajectory_timeout: 3}\n")  # time to send it on a busy machine
    out = tmp_path / "out.jsonl"
    with FakeLLMServer(faults={"stall": 1.0}, stall_seconds=30).in_thread() as server:
        proc = run_cli("compress", str(src), "-o", str(out), "-c", str(tmp_path / "c.yaml"),
                       "--base-url", server.url, "--model", "fake-model", "--quiet",
                       "--no-cache")
        sent = server.requests
    assert proc.returncode == 1, proc.stderr  # one failed row
    assert sent == 1
    [entry] = read_jsonl(tmp_path / "out_over_limit.jsonl")
    assert entry["reason"] == "deadline_exceeded"
    assert entry["reason_text"].startswith(reasons.DEADLINE.text)
    assert entry["reason_numbers"] == numbers(205, 205, 25, 20, 160, 160)
    assert entry["metrics"]["summarization_api_calls"] == 1
    [written] = read_jsonl(out)
    assert written["compression_metrics"]["summarization_api_calls"] == 1
    metrics = json.loads((tmp_path / "out_metrics.json").read_text())
    assert metrics["summarization"]["total_api_calls"] == 1
    assert metrics["over_limit"]["reasons"] == {"deadline_exceeded": 1}
