"""Tests written to kill mutants left by the seventeenth coverage-guided pass (issue 40,
item 8) over the modules no run had reached on their current code: the extractive
summary's terminal view of prose; a windowed row's summaries, metrics, deadline, masks
and limits; the writer's windows, summarizer rows and lock checks; distill_row's pieces
and counts; the notation's runs, ranges, JSON layout and errors; config rules, endpoint
flags, origins, gates and types; the metrics file's sections by hand. All in process, on
hand-made rows (a windowed row through `TrajectoryCompressor.compress_row`, with
summarizers written for the test).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_kills5_engine import template_file
from tests.test_writer_routing import TURNS, Clock, finish, make_writer, record, result
from trajectory_compressor.core import reasons
from trajectory_compressor.core.config import (
    DEFAULT_KEY_ENV,
    CompressionConfig,
    _key_env_for,
    _origin,
    _type_name,
    _type_ok,
    gate_value_ok,
)
from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.core.distill_notation import (
    NotationError,
    expand,
    layout_json,
    numbered_range,
    run,
)
from trajectory_compressor.core.distill_row import (
    _reads_as_itself,
    distill_turns,
    outputs_of,
    verify_turns,
    with_outputs,
)
from trajectory_compressor.core.errors import ConfigError, FatalSummaryError
from trajectory_compressor.core.extractive import extractive_text
from trajectory_compressor.core.fidelity import Fidelity
from trajectory_compressor.core.metrics import (
    METRICS_KEY,
    AggregateMetrics,
    Distribution,
    TrajectoryMetrics,
)
from trajectory_compressor.core.plan import Plan, Region
from trajectory_compressor.core.reasons import deadline_error
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
    summary_body,
)
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.dialects.sharegpt import SHAREGPT
from trajectory_compressor.dialects.training import is_marked
from trajectory_compressor.engine import writer as writer_module
from trajectory_compressor.engine.checkpoint import Checkpoint
from trajectory_compressor.engine.compressor import RowResult, TrajectoryCompressor
from trajectory_compressor.engine.layout import OutputLayout
from trajectory_compressor.engine.lock import LockLost, output_lock
from trajectory_compressor.engine.progress import Progress
from trajectory_compressor.engine.windowing import WindowMasks, window_limits
from trajectory_compressor.engine.writer import RunWriter
from trajectory_compressor.formats.base import InputFile, temp_path

# -- core/extractive: prose is read as a terminal shows it ---------------------------------

def test_the_extractive_summary_reads_an_assistant_message_as_a_terminal_shows_it(
        counter: TokenCounter) -> None:
    turns = [{"from": "gpt", "value": "ran build 00A\x1f0 then \x1b[1mdone\x1b[0m"},
             {"from": "human", "value": "id 7\x1fB9 please"}]
    text = extractive_text(SummaryRequest(turns, 3, 300), counter.count)
    assert "turn 3 (assistant): ran build 00A0 then done" in text
    assert "turn 4 (user): id 7B9 please" in text
    assert "00A 0" not in text and "7 B9" not in text and "1m" not in text


# -- engine/windowing: limits, masks, a windowed row's metrics -----------------------------

class Costly(Summarizer):
    """Answers every request with a short text of the request's first index, reporting a
    cost of its own per request (calls, errors by kind, retries, tokens), truncated for
    every other request."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        n = len(self.requests) + 1
        self.requests.append(request)
        usage = SummaryUsage(api_calls=n, errors=n, retries=10 * n, prompt_tokens=100 * n,
                             completion_tokens=1000 * n,
                             errors_by_kind={"timeout": n, f"kind{n}": 1})
        end = request.first_index + len(request.turns)
        return Summary(f"[CONTEXT SUMMARY]: the work before turn {end}.",
                       "llm", usage, truncated=n % 2 == 0)


def windows_row(pairs: int = 14) -> dict[str, Any]:
    filler = " ".join(f"w{i}" for i in range(30))
    turns = [{"from": "system", "value": "You are a careful agent."},
             {"from": "human", "value": "Fix the build, please."}]
    for i in range(pairs):
        turns.append({"from": "gpt", "value": f"Step {i}: look at part {i}. {filler}"})
        turns.append({"from": "tool", "value": f"part {i} says {filler}"})
    turns.append({"from": "gpt", "value": "All done."})
    return {"id": "win", "conversations": turns}


def windowed(counter: TokenCounter, summarizer: Summarizer, **settings: Any
             ) -> tuple[TrajectoryCompressor, RowResult]:
    config = CompressionConfig(**{"summarizer": "extractive", "output_mode": "windows",
                                  "target_max_tokens": 400, "summary_target_tokens": 60,
                                  "metrics_per_trajectory": True, **settings})
    compressor = TrajectoryCompressor(config, summarizer=summarizer, counter=counter)
    return compressor, asyncio.run(compressor.compress_row(windows_row()))


def test_a_windowed_rows_metrics_add_up_each_windows_and_each_summarys(counter) -> None:
    summarizer = Costly()
    _, result = windowed(counter, summarizer, add_summary_notice=False)
    source = windows_row()["conversations"]
    windows = result.plan.windows
    assert windows is not None and len(windows) >= 3
    assert result.windows is not None and result.window_metrics is not None
    assert result.row is result.windows[0] and result.changed
    assert len(summarizer.requests) == len(windows) - 1
    total = result.plan.total_tokens
    for window, written, m in zip(windows, result.windows, result.window_metrics,
                                  strict=True):
        turns = SHAREGPT.turns(written)
        tokens = sum(counter.count_many([t["value"] for t in turns]))
        assert (m.original_tokens, m.compressed_tokens, m.tokens_saved) == (
            total, tokens, total - tokens)
        assert m.compression_ratio == pytest.approx(tokens / total)
        assert (m.original_turns, m.compressed_turns, m.turns_removed) == (
            len(source), len(turns), len(source) - len(turns))
        assert not m.still_over_limit and "window_over" not in m.windowed
        assert m.windowed["window"] == window.number
        assert m.windowed["windows"] == len(windows)
        assert m.windowed["trained_turns"] == {"start_idx": window.train.start,
                                               "end_idx": window.train.end}
        assert written[METRICS_KEY] == m.to_dict()
        assert written["id"] == f"win#w{window.number}" and m.windowed["source_id"] == "win"
        # Assistant turns are trained in their own window only: marked everywhere else.
        held = window.source_turns
        assistant = [(i, t) for i, t in zip(
            [*held[:window.head], *([None] if window.summarized else []), *held[window.head:]],
            turns, strict=True) if i is not None and t["from"] == "gpt"]
        assert assistant
        for i, turn in assistant:
            assert is_marked(SHAREGPT, turn) == (not window.train.start <= i < window.train.end)
        if window.summarized is None:
            assert not m.was_compressed and m.summarization_api_calls == 0
            continue
        n = [(r.first_index, r.first_index + len(r.turns)) for r in summarizer.requests
             ].index((window.summarized.start, window.summarized.end)) + 1
        assert m.was_compressed and m.summary_source == "llm"
        assert (m.turns_compressed_start_idx, m.turns_compressed_end_idx,
                m.turns_in_compressed_region) == (window.summarized.start,
                                                  window.summarized.end,
                                                  window.summarized.turns)
        assert m.summary_truncated == (n % 2 == 0)
        assert (m.summarization_api_calls, m.summarization_errors, m.retries,
                m.prompt_tokens, m.completion_tokens) == (n, n, 10 * n, 100 * n, 1000 * n)
        assert m.fidelity is not None
    k = len(summarizer.requests)
    row = result.metrics
    calls = k * (k + 1) // 2
    assert (row.summarization_api_calls, row.summarization_errors, row.retries,
            row.prompt_tokens, row.completion_tokens) == (
        calls, calls, 10 * calls, 100 * calls, 1000 * calls)
    assert row.errors_by_kind == {"timeout": calls, **{f"kind{n}": 1 for n in range(1, k + 1)}}
    assert row.summary_truncated and row.was_compressed and row.summary_source == "llm"
    largest = max(m.compressed_tokens for m in result.window_metrics)
    assert (row.compressed_tokens, row.tokens_saved) == (largest, total - largest)
    assert row.compression_ratio == pytest.approx(largest / total)
    widest = max(m.compressed_turns for m in result.window_metrics)
    assert (row.compressed_turns, row.turns_removed) == (widest, len(source) - widest)
    summarized = [w.summarized for w in windows if w.summarized is not None]
    assert (row.turns_compressed_start_idx, row.turns_compressed_end_idx,
            row.turns_in_compressed_region) == (
        summarized[0].start, summarized[-1].end, summarized[-1].end - summarized[0].start)
    assistant = sum(counter.count_many([t["value"] for t in source if t["from"] == "gpt"]))
    assert row.windowed["assistant_tokens"] == assistant
    assert row.windowed["trained_assistant_tokens"] == assistant
    assert row.windowed == {**row.windowed, "windows": len(windows), "summaries": k,
                            "summaries_by_source": {"llm": k}, "windows_over": 0,
                            "trained_within_target": assistant}


def test_each_windows_summary_request_names_the_row_and_the_window(counter) -> None:
    summarizer = Costly()
    compressor, result = windowed(counter, summarizer)
    k = len(summarizer.requests)
    assert [r.origin for r in summarizer.requests] == [None] * k
    turns = SHAREGPT.turns(windows_row())
    asyncio.run(compressor.compress_planned(windows_row(), turns, result.plan,
                                            origin="in.jsonl:7"))
    assert sorted((r.origin for r in summarizer.requests[k:]),
                  key=lambda o: int(o.rsplit("#w", 1)[1])) == [
        f"in.jsonl:7 #w{n}" for n in range(2, k + 2)]


class Stalled(Summarizer):
    """Counts one call for every request, then never answers."""

    def __init__(self) -> None:
        self.asked = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.asked += 1
        request.usage.api_calls += 1
        request.usage.prompt_tokens += 5
        await asyncio.sleep(30)
        raise AssertionError("the deadline should have cut this request")


def test_a_windowed_row_past_its_deadline_is_written_unchanged_with_what_it_asked(
        counter) -> None:
    stalled = Stalled()
    _, result = windowed(counter, stalled, per_trajectory_timeout=0.3)
    k = stalled.asked
    assert k >= 2
    assert result.windows is None and result.metrics.error == deadline_error(0.3)
    assert SHAREGPT.turns(result.row) == SHAREGPT.turns(windows_row())
    assert (result.metrics.summarization_api_calls, result.metrics.prompt_tokens) == (k, 5 * k)
    assert result.metrics.compressed_tokens == result.plan.total_tokens


def test_a_window_whose_summary_misses_the_bar_gets_the_extractive_one_and_its_cost(
        counter) -> None:
    """`on_low_fidelity: uncompressed` leaves a one-row result unchanged; a window needs
    a summary, so it takes the extractive one, and keeps the cost of the model's tries."""
    summarizer = Costly()
    _, result = windowed(counter, summarizer, min_fidelity=1.0,
                         on_low_fidelity="uncompressed", add_summary_notice=False)
    windows = result.plan.windows
    k = len(windows) - 1
    assert len(summarizer.requests) == 2 * k  # each window: one request, one repair
    calls = sum(range(1, 2 * k + 1))
    assert result.metrics.summarization_api_calls == calls
    row = result.metrics
    assert row.low_fidelity and row.fidelity_repair
    weakest = min((m.fidelity for m in result.window_metrics[1:]), key=lambda f: f.ratio)
    assert row.fidelity == weakest
    for window, written, m in zip(windows[1:], result.windows[1:], result.window_metrics[1:],
                                  strict=True):
        assert m.summary_source == "extractive" and m.low_fidelity
        summary = [t["value"] for t in SHAREGPT.turns(written)
                   if t["value"].startswith(SUMMARY_PREFIX)]
        assert len(summary) == 1
        assert "condensed; what they did:" in summary[0]
        assert summary[0].startswith(SUMMARY_PREFIX + " Turns "
                                     f"{window.summarized.start}-{window.summarized.end - 1}")
        assert m.summarization_api_calls >= 3  # the request's and its repair's


class Wordy(Summarizer):
    """Answers with about one and a half times the tokens asked for."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter

    async def summarize(self, request: SummaryRequest) -> Summary:
        sentences, text = 0, ""
        while self.counter.count(text) < 1.5 * request.target_tokens:
            sentences += 1
            text += f"Sentence {sentences} says what the agent did in this part here. "
        return Summary(f"{SUMMARY_PREFIX} {text.strip()}", "llm", SummaryUsage(api_calls=1))


def test_a_windows_summary_is_held_to_its_budget_not_the_configured_tolerance(
        counter) -> None:
    """summary_tolerance 2.0 lets a one-row summary run to twice its budget; a window was
    planned for its summary's budget, so a summary of 1.5 times it is cut to it."""
    _, result = windowed(counter, Wordy(counter), summary_tolerance=2.0,
                         add_summary_notice=False)
    for window, written, m in zip(result.plan.windows[1:], result.windows[1:],
                                  result.window_metrics[1:], strict=True):
        [summary] = [t["value"] for t in SHAREGPT.turns(written)
                     if t["value"].startswith(SUMMARY_PREFIX)]
        assert m.summary_truncated
        assert counter.count(summary_body(summary)) <= window.requested_tokens
        assert not m.still_over_limit


def test_summarizer_rows_come_with_windows_only_when_asked(counter) -> None:
    summarizer = Costly()
    compressor, result = windowed(counter, summarizer)
    assert result.summarizer_rows is None
    compressor.emit_summarizer_rows = True
    asked = asyncio.run(compressor.compress_row(windows_row()))
    k = len(asked.plan.windows) - 1
    assert asked.summarizer_rows is not None and len(asked.summarizer_rows) == k
    for trainer in asked.summarizer_rows:
        [*_, answer] = SHAREGPT.turns(trainer)
        assert answer["value"].startswith("the work before turn")


def test_window_limits_add_the_notice_once_and_the_template_markers(
        counter, tmp_path) -> None:
    turns = SHAREGPT.turns(windows_row())
    system = turns[0]["value"]
    notice = " Earlier turns were condensed."
    base = {"target_max_tokens": 400, "summary_target_tokens": 60,
            "summary_notice_text": notice}
    plain = TrajectoryCompressor(CompressionConfig(**base), Costly(), counter)
    delta = counter.count(system + notice) - counter.count(system)
    limits = window_limits(plain, turns)
    assert (limits.target, limits.summary, limits.min_summary) == (400, 60, 15)
    assert limits.extra == delta > 0
    # Without a system turn there is no notice to add; with the notice off, none either.
    assert window_limits(plain, turns[1:]).extra == 0
    quiet = TrajectoryCompressor(CompressionConfig(**base, add_summary_notice=False),
                                 Costly(), counter)
    assert window_limits(quiet, turns).extra == 0
    # A notice the system turn's count does not grow by adds nothing (never less).
    empty = TrajectoryCompressor(CompressionConfig(**{**base, "summary_notice_text": ""}),
                                 Costly(), counter)
    assert window_limits(empty, turns).extra == 0
    # The first system turn is the one the notice goes on, wherever it is.
    late = [turns[1], {"from": "system", "value": "x"}, *turns[2:]]
    assert window_limits(plain, late).extra == (counter.count("x" + notice)
                                                - counter.count("x"))
    template = template_file(tmp_path)  # ChatML blocks
    templated = TrajectoryCompressor(CompressionConfig(
        **base, token_counting="chat_template", chat_template=str(template)),
        Costly(), counter)
    assert window_limits(templated, turns).extra == delta + 8
    small = TrajectoryCompressor(CompressionConfig(
        **{**base, "summary_target_tokens": 7}), Costly(), counter)
    assert window_limits(small, turns).min_summary == 1


class FirstFatal(Summarizer):
    """The first request stops the run (a rejected key); the others wait for an answer
    that never comes, and note when they are cancelled."""

    def __init__(self) -> None:
        self.asked = 0
        self.cancelled = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.asked += 1
        if self.asked == 1:
            await asyncio.sleep(0.05)
            raise FatalSummaryError("the endpoint refused the key")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("never answered")


def test_a_window_that_stops_the_run_stops_the_rows_other_requests(counter) -> None:
    """A fatal error in one window's summary ends the row's other requests before it
    reaches the run: none goes on calling the endpoint."""
    summarizer = FirstFatal()
    config = CompressionConfig(summarizer="extractive", output_mode="windows",
                               target_max_tokens=400, summary_target_tokens=60)
    compressor = TrajectoryCompressor(config, summarizer=summarizer, counter=counter)

    async def run() -> None:
        with pytest.raises(FatalSummaryError):
            await compressor.compress_row(windows_row())
        assert summarizer.asked >= 3
        assert summarizer.cancelled == summarizer.asked - 1

    asyncio.run(run())


def test_a_window_over_the_target_says_why_and_trains_outside_the_share_within(
        counter) -> None:
    row = windows_row()
    turns = row["conversations"]
    big = " ".join(f"token{n}" for n in range(400))
    turns[9] = {"from": "gpt", "value": f"A long plan: {big}"}
    config = CompressionConfig(summarizer="extractive", output_mode="windows",
                               target_max_tokens=400, summary_target_tokens=60)
    compressor = TrajectoryCompressor(config, summarizer=Costly(), counter=counter)
    result = asyncio.run(compressor.compress_row(row))
    over = [(w, m) for w, m in zip(result.plan.windows, result.window_metrics, strict=True)
            if m.still_over_limit]
    assert len(over) == 1
    window, m = over[0]
    assert window.train.start <= 9 < window.train.end
    assert m.compressed_tokens > 400 and m.windowed["window_over"] == window.over != ""
    fits = [m for m in result.window_metrics if not m.still_over_limit]
    assert all("window_over" not in m.windowed for m in fits)
    row_metrics = result.metrics
    assert row_metrics.still_over_limit and not row_metrics.skipped_under_target
    assert row_metrics.windowed["windows_over"] == 1
    assert row_metrics.windowed["trained_within_target"] == sum(
        m.windowed["trained_assistant_tokens"] for m in fits)
    assert row_metrics.windowed["trained_within_target"] < (
        row_metrics.windowed["trained_assistant_tokens"])


def test_a_windowed_rows_assistant_tokens_are_counted_apart_from_its_windows(
        counter) -> None:
    """Counted from the row, not summed from the plan: windows that missed a turn would
    show as a trained share under 1 (here the last window is left out by hand)."""
    compressor, result = windowed(counter, Costly())
    turns = SHAREGPT.turns(windows_row())
    short = dataclasses.replace(result.plan, windows=result.plan.windows[:-1])
    made = asyncio.run(compressor.compress_planned(windows_row(), turns, short))
    assistant = sum(counter.count_many([t["value"] for t in turns if t["from"] == "gpt"]))
    trained = sum(w.trained_assistant_tokens for w in short.windows)
    assert made.metrics.windowed["assistant_tokens"] == assistant > trained
    assert made.metrics.windowed["trained_assistant_tokens"] == trained


def test_under_a_chat_template_a_windowed_rows_assistant_tokens_are_the_plans(
        counter, tmp_path) -> None:
    """Under a template a turn's count holds its share of the markers: the plan's sums are
    the figures in the same counting, a count of the texts alone would not be."""
    template = template_file(tmp_path)  # ChatML blocks
    _, result = windowed(counter, Costly(), token_counting="chat_template",
                         chat_template=str(template))
    turns = SHAREGPT.turns(windows_row())
    trained = sum(w.trained_assistant_tokens for w in result.plan.windows)
    texts_alone = sum(counter.count_many([t["value"] for t in turns if t["from"] == "gpt"]))
    assert result.metrics.windowed["assistant_tokens"] == trained != texts_alone


def masked_row() -> dict[str, Any]:
    row = windows_row()
    for i in (5, 11, 17):
        row["conversations"][i] = {
            "from": "tool", "value": "out " + " ".join(f"line{n}" for n in range(150))}
    return row


def test_windows_that_end_on_a_long_output_hold_it_masked_and_count_what_that_saved(
        counter) -> None:
    compressor, _ = windowed(counter, Costly(), add_summary_notice=False)
    row = masked_row()
    made = asyncio.run(compressor.compress_row(row))
    masked = [(w, written, m) for w, written, m in zip(
        made.plan.windows, made.windows, made.window_metrics, strict=True) if w.masked]
    assert [w.masked for w, _, _ in masked] == [(5,), (11,), (17,)]
    masks = WindowMasks(compressor, SHAREGPT.turns(row))
    for window, written, m in masked:
        texts = [t["value"] for t in SHAREGPT.turns(written)]
        placeholder = masks.text(window.masked[0])
        assert placeholder is not None and placeholder.startswith("[tool output masked:")
        assert texts[-1] == placeholder and row["conversations"][window.masked[0]][
            "value"] not in texts
        assert (m.masked_turns, m.masked_tokens) == (1, window.masked_saving)
        assert not m.still_over_limit
    assert (made.metrics.masked_turns, made.metrics.masked_tokens) == (
        3, sum(w.masked_saving for w, _, _ in masked))


def test_window_masks_count_a_masked_turn_as_the_plan_counts_turns(counter, tmp_path) -> None:
    row = masked_row()
    turns = SHAREGPT.turns(row)
    compressor = TrajectoryCompressor(CompressionConfig(), Costly(), counter)
    counts = [counter.count(t["value"]) + 3 for t in turns]  # 3: as if a template's share
    masks = WindowMasks(compressor, turns, counts)
    placeholder = masks.text(5)
    assert placeholder is not None and masks.text(5) is placeholder  # made once
    assert masks.tokens(5) == counts[5] - counts[5] + counter.count(placeholder)
    assert WindowMasks(compressor, turns).tokens(5) is None  # no planned counts
    template = template_file(tmp_path)  # ChatML blocks
    templated = TrajectoryCompressor(CompressionConfig(
        token_counting="chat_template", chat_template=str(template)), Costly(), counter)
    under = WindowMasks(templated, turns, counts)
    # The template's share stays: the text alone is counted apart from the plan's count.
    assert under.tokens(5) == counts[5] - counter.count(turns[5]["value"]) + counter.count(
        placeholder)


class FailsLast(Costly):
    """As `Costly`, but the request for the region that ends last fails."""

    def __init__(self, last_end: int) -> None:
        super().__init__()
        self.last_end = last_end

    async def summarize(self, request: SummaryRequest) -> Summary:
        if request.first_index + len(request.turns) == self.last_end:
            raise SummaryFailed("down", SummaryUsage(api_calls=1))
        return await super().summarize(request)


def test_a_windowed_rows_summary_source_is_its_last_windows(counter) -> None:
    _, first = windowed(counter, Costly())
    last_end = first.plan.windows[-1].summarized.end
    _, result = windowed(counter, FailsLast(last_end))
    sources = [m.summary_source for m in result.window_metrics[1:]]
    assert sources[-1] == "fallback" and set(sources[:-1]) == {"llm"}
    assert result.metrics.summary_source == "fallback"
    assert result.metrics.windowed["summaries_by_source"] == {
        "llm": len(sources) - 1, "fallback": 1}


# -- engine/writer: windows in the over-limit file, summarizer rows, the lock --------------

def windows_result(over: tuple[bool, ...], reasons_over: tuple[str, ...]) -> RowResult:
    rows = [{"id": f"r#w{n}", "conversations": TURNS} for n in range(1, len(over) + 1)]
    per = [TrajectoryMetrics(compressed_tokens=100 + n, still_over_limit=o,
                             windowed={"window": n, "source_id": "r",
                                       **({"window_over": why} if why else {})})
           for n, (o, why) in enumerate(zip(over, reasons_over, strict=True), 1)]
    row_metrics = TrajectoryMetrics(original_tokens=900, compressed_tokens=103,
                                    still_over_limit=any(over))
    plan = Plan("compress", 900, Region(0, 2))
    return RowResult(rows[0], row_metrics, plan, True, TURNS, windows=rows,
                     window_metrics=per, summarizer_rows=[{"id": "s1"}, {"id": "s2"}])


@pytest.mark.parametrize("save_over_limit", [True, False])
def test_a_windowed_row_over_the_target_names_each_window_over_and_why(
        tmp_path, save_over_limit) -> None:
    writer = make_writer(tmp_path, save_over_limit=save_over_limit)
    made = windows_result((False, True, True), ("", "window 2 holds a turn over", ""))
    writer.write(record(1, {"id": "r"}), made, draws=0)
    files = finish(writer, tmp_path)
    [entry] = files["out_over_limit.jsonl"]
    assert entry["id"] == "r"
    assert entry["windows_over"] == [
        {"window": 2, "tokens": 102, "why": "window 2 holds a turn over"},
        {"window": 3, "tokens": 103, "why": reasons.SUMMARY_OVERRAN.text}]
    if save_over_limit:
        assert files["out.jsonl"] == made.windows and "windows" not in entry
    else:
        assert files["out.jsonl"] == [] and entry["windows"] == made.windows
        assert entry["trajectory"] == made.row


def test_a_windowed_row_within_the_target_writes_every_window_and_no_entry(tmp_path) -> None:
    writer = make_writer(tmp_path)
    made = windows_result((False, False), ("", ""))
    writer.write(record(1, {"id": "r"}), made, draws=0)
    files = finish(writer, tmp_path)
    assert files["out.jsonl"] == made.windows and files["out_over_limit.jsonl"] == []


def test_summarizer_rows_go_to_their_file_only_when_it_is_open(tmp_path) -> None:
    writer = make_writer(tmp_path)
    writer.write(record(1, {"id": "r"}), windows_result((False,), ("",)), draws=0)
    finish(writer, tmp_path)
    assert not (tmp_path / "rows.jsonl").exists()
    other = tmp_path / "second"
    other.mkdir()
    writer = make_writer(other)
    writer.open_summarizer_rows(other / "rows.jsonl", None)
    writer.write(record(1, {"id": "r"}), windows_result((False,), ("",)), draws=0)
    writer.checkpoint()
    assert Checkpoint.load(writer.layout.checkpoint).summarizer_rows > 0
    finish(writer, other)
    assert [json.loads(x) for x in (other / "rows.jsonl").read_text().splitlines()] == [
        {"id": "s1"}, {"id": "s2"}]


def test_a_checkpoint_without_a_summarizer_rows_file_records_none(tmp_path) -> None:
    writer = make_writer(tmp_path)
    writer.write(record(1, {"id": "r"}), windows_result((False,), ("",)), draws=0)
    writer.checkpoint()
    assert Checkpoint.load(writer.layout.checkpoint).summarizer_rows == 0


def test_a_row_that_cannot_be_written_is_a_reject_and_the_cut_moves_past_it(tmp_path) -> None:
    """After the reject the writer is at a cut again: an interrupted run checkpoints it."""
    writer = make_writer(tmp_path)
    bad = {"id": "b", "conversations": TURNS, "extra": {1, 2}}  # a set: not JSON
    writer.write(record(1, bad), result(bad, changed=True), draws=2)
    assert writer.metrics.rows_rejected == 1
    assert writer.stop() is True
    saved = Checkpoint.load(writer.layout.checkpoint)
    assert (saved.skip, saved.draws) == (1, 2)


def locked_writer(tmp_path: Path, monkeypatch) -> tuple[RunWriter, Clock, Any]:
    clock = Clock()
    monkeypatch.setattr(writer_module, "time", types.SimpleNamespace(monotonic=clock))
    writer = make_writer(tmp_path)
    held = output_lock(writer.layout.lock, tmp_path / "out.jsonl")
    held.__enter__()
    return writer, clock, held


def test_a_row_is_written_after_a_lock_check_at_most_half_a_second_old(
        tmp_path, monkeypatch) -> None:
    writer, clock, held = locked_writer(tmp_path, monkeypatch)
    try:
        row = {"id": "a", "conversations": TURNS}
        writer.layout.lock.unlink()
        clock.now += 0.49  # checked 0.49 s ago (at the start): not again yet
        writer.write(record(1, row), result(row), draws=0)
        clock.now += 0.01  # half a second since the last check: checked before writing
        with pytest.raises(LockLost):
            writer.write(record(2, row), result(row), draws=0)
        assert writer.skip == 1
        clock.now += 0.5
        with pytest.raises(LockLost):
            writer.reject(record(2, None, b"{"), "not JSON", draws=0)
        assert writer.metrics.rows_rejected == 0
    finally:
        held.__exit__(None, None, None)


def test_a_run_that_lost_its_lock_keeps_its_files_and_writes_no_checkpoint(
        tmp_path, monkeypatch) -> None:
    for end in ("stop", "abandon"):
        folder = tmp_path / end
        folder.mkdir()
        writer, _, held = locked_writer(folder, monkeypatch)
        try:
            row = {"id": "a", "conversations": TURNS}
            writer.write(record(1, row), result(row), draws=0)
            temp = temp_path(folder / "out.jsonl")
            writer.layout.lock.unlink()
            kept = getattr(writer, end)()
            assert kept is (True if end == "stop" else None)
            assert temp.exists() and not writer.layout.checkpoint.exists()
            with pytest.raises(LockLost):
                writer.checkpoint()
            with pytest.raises(LockLost):
                writer.commit()
            assert not (folder / "out.jsonl").exists()
        finally:
            held.__exit__(None, None, None)


def test_a_windows_run_writes_training_marks_into_a_parquet_output(tmp_path) -> None:
    """The input's schema has no field for the marks; a windows run's output gets one."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "r", "conversations": TURNS}]), src)
    out = tmp_path / "out.parquet"
    layout = OutputLayout({src: out}, {src: "parquet"}, tmp_path / "out")
    config = CompressionConfig(output_mode="windows", checkpoint_rows=10_000,
                               checkpoint_seconds=3600.0)
    writer = RunWriter(layout, config, Progress(quiet=True), ([], {}))
    writer.open_file(0, InputFile(src, "parquet"))
    marked = {"id": "r#w2", "conversations": [{**TURNS[0], "train": False}, TURNS[1]]}
    writer.write(record(1, marked), result(marked, changed=True), draws=0)
    writer.finish_file(0)
    writer.commit()
    [turns] = pq.read_table(out).column("conversations").to_pylist()
    assert turns == [{**TURNS[0], "train": False}, {**TURNS[1], "train": None}]


# -- core/distill_row: pieces, read-back, and the counts behind a turn's saving -------------

def test_an_unclosed_tool_response_is_text_not_an_output() -> None:
    text = ('<tool_response>\n{"content": "x"}\n</tool_response> then '
            "<tool_response>\nabc and more")
    assert outputs_of(text) == ["x"]
    assert with_outputs(text, ["y"]) == text.replace('"x"', '"y"')


def test_outputs_are_replaced_one_for_one() -> None:
    with pytest.raises(ValueError):
        with_outputs("abc", ["x", "y"])
    with pytest.raises(ValueError):
        with_outputs('<tool_response>\n{"content": "a"}\n</tool_response>', [])


def test_a_turn_reads_as_itself_unless_a_line_of_it_looks_like_notation() -> None:
    assert _reads_as_itself("x ⟪ y")  # a bracket inside a line is text
    assert _reads_as_itself('<tool_response>\n{"content": "a ⟪ b"}\n</tool_response>')
    assert not _reads_as_itself("⟪×2⟫ a")  # notation: it would read back as two lines
    assert not _reads_as_itself("A\n⟪odd\nC")  # not notation, and not text either
    assert not _reads_as_itself(
        'ok\n<tool_response>\n{"content": "⟪×2⟫ a"}\n</tool_response>')


def test_verify_turns_names_a_row_whose_outputs_changed_in_number() -> None:
    assert verify_turns(["a", None, "b"], ["a", None, None]) == (
        "1 tool outputs where there were 2")
    assert verify_turns(["a", "b"], ["a", "b"]) is None


def test_a_turns_saving_is_counted_from_its_original_text(counter) -> None:
    log = "".join(f"step {n}: ok\n" for n in range(40)) + "done\n"
    texts = [None, log, None, "short"]
    out, stats = distill_turns(texts, "safe", counter.count_many)
    assert out[0] is None and out[3] == "short" and out[1] != log
    assert stats.turns == 1
    assert (stats.tokens_before, stats.tokens_after) == (counter.count(log),
                                                       counter.count(out[1]))
    assert sum(r.tokens_before - r.tokens_after for r in stats.rules.values()) == (
        stats.tokens_before - stats.tokens_after)


def test_a_turn_that_grows_only_by_escaping_a_notation_line_is_still_escaped(counter) -> None:
    """Left as it was, "⟪odd" would not read back as itself: the escape is kept though
    the turn grows by a token."""
    out, stats = distill_turns(["⟪odd\nabc"], "safe", counter.count_many)
    assert out == ["\\⟪odd\nabc"]
    assert (stats.turns, stats.tokens_before, stats.tokens_after) == (
        1, counter.count("⟪odd\nabc"), counter.count("\\⟪odd\nabc"))
    assert stats.tokens_after > stats.tokens_before


# -- core/distill_notation: runs, escapes, file views, JSON layout, errors ------------------

def test_a_run_writes_each_number_slot_once_or_as_its_values() -> None:
    assert run(["a 1 b 5", "a 2 b 5"]) == "⟪×2⟫ a {1,2} b 5"
    assert run(["7 x", "7 x", "7 x"]) == "⟪×3⟫ 7 x"
    assert expand(run(["a 1 b 5", "a 2 b 5"])) == "a 1 b 5\na 2 b 5"


@pytest.mark.parametrize(("line", "written"), [
    ("x{y 1", "x\\{y"), ("k} 1", "k\\}"), ("p\\q 1", "p\\\\q"), ("plain 1", "plain")])
def test_a_runs_text_escapes_each_template_character_alone(line, written) -> None:
    lines = [line, line.replace("1", "2")]
    assert run(lines) == f"⟪×2⟫ {written} {{1,2}}"
    assert expand(run(lines)).split("\n") == lines


def test_numbered_ranges_need_every_line_in_order() -> None:
    lines = ["1:a", "2:b", "3:c"]
    assert numbered_range(lines, 1, 3) == (0, 3)
    assert numbered_range(lines, 2, 2) == (1, 2)
    assert numbered_range(lines, 2, 3) == (1, 3)
    assert numbered_range(lines, 2, 4) is None  # runs past the end
    assert numbered_range(["1:a", "3:c", "4:d"], 1, 3) is None  # a gap
    assert numbered_range(["1:a", "2:b", "9:c"], 1, 3) is None


def test_json_layout_keeps_empty_containers_on_one_line() -> None:
    for data in ({"a": [], "b": {}, "c": [1, {}]}, {}, [], [[]], {"k": [[], {}]}):
        compact = json.dumps(data, separators=(",", ":"))
        assert layout_json(compact, 2) == json.dumps(data, indent=2)
        assert layout_json(compact, 4) == json.dumps(data, indent=4)


def test_notation_that_does_not_read_back_says_why() -> None:
    with pytest.raises(NotationError, match="a column note over a notation line"):
        expand('⟪next 2 lines have "x" at column 0⟫\n⟪×2⟫ a')
    with pytest.raises(NotationError, match="a column note for 2 more lines than there are"):
        expand('⟪next 3 lines have "x" at column 0⟫\na')
    with pytest.raises(NotationError, match="tool output #1 has no file lines 4-5"):
        expand("⟪file lines 4-5 as in tool output #1⟫", ["1:a\n2:b"])
    long = "⟪nope " + "z" * 100 + "⟫"
    with pytest.raises(NotationError) as caught:
        expand(long)
    assert str(caught.value) == f"not a notation line: {long[:80]!r}"
    assert expand("⟪lines 2-2 of tool output #1⟫", ["a\nb\nc"]) == "b"
    assert expand("⟪file lines 2-2 as in tool output #1⟫", ["1:a\n2:b\n3:c"]) == "2:b"


@pytest.mark.parametrize("body", ["[", '{"a":[', '{"a":{', "[1,", "]", "{}}"])
def test_a_json_header_over_text_that_is_no_json_reads_back_without_a_crash(body) -> None:
    """A raw output may hold the header's text (the extractive summary reads every
    output through `expand`, catching `NotationError` only)."""
    try:
        shown = expand(f"⟪json indent 2⟫\n{body}")
    except NotationError:
        return
    assert isinstance(shown, str) and shown.replace(" ", "").replace("\n", "") == body


# -- core/config: bounds, key names, endpoint flags, origins, gates, types -----------------

def endpoints_config(endpoints: list[dict[str, Any]]) -> CompressionConfig:
    return CompressionConfig.from_dict({"summarization": {"endpoints": endpoints}})


@pytest.mark.parametrize(("settings", "message"), [
    ({"target_max_tokens": 0}, "compression.target_max_tokens must be positive"),
    ({"summary_target_tokens": 0}, "compression.summary_target_tokens must be positive"),
    ({"mask_keep_last": -1}, "compression.mask_keep_last must be >= 0"),
])
def test_config_bounds_refuse_zero_and_below(settings, message) -> None:
    with pytest.raises(ConfigError, match=message):
        CompressionConfig().replace(**settings)


def test_config_bounds_take_the_least_allowed_value() -> None:
    assert CompressionConfig().replace(mask_keep_last=0).mask_keep_last == 0
    assert CompressionConfig().replace(target_max_tokens=2,
                                       summary_target_tokens=1).target_max_tokens == 2


def test_a_key_written_where_an_endpoints_variable_name_goes_is_refused() -> None:
    secret = "sk-" + "a1b2c3d4" * 5
    with pytest.raises(ConfigError, match=r"summarization\.endpoints\[1\]\.api_key_env") as caught:
        endpoints_config([
            {"base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key_env": "GOOD_KEY"},
            {"base_url": "http://127.0.0.1:2/v1", "model": "m", "api_key_env": secret}])
    assert secret not in str(caught.value)


def test_model_or_key_flags_alone_override_every_configured_endpoint() -> None:
    config = endpoints_config([
        {"base_url": "http://127.0.0.1:1/v1", "model": "a", "api_key_env": "KEY_A"},
        {"base_url": "http://127.0.0.1:2/v1", "model": "b"}])
    assert config.with_endpoint_flags() is config
    modelled = config.with_endpoint_flags(model="m2")
    assert modelled.summarization_model == "m2"
    assert [(e.model, e.api_key_env) for e in modelled.endpoints] == [
        ("m2", "KEY_A"), ("m2", None)]
    keyed = config.with_endpoint_flags(api_key_env="KEY_Z")
    assert keyed.api_key_env == "KEY_Z"
    assert [(e.model, e.api_key_env) for e in keyed.endpoints] == [
        ("a", "KEY_Z"), ("b", "KEY_Z")]


def test_the_default_providers_key_goes_to_its_origin_however_the_port_is_written() -> None:
    assert _key_env_for("https://openrouter.ai:443/api/v1", DEFAULT_KEY_ENV) == DEFAULT_KEY_ENV
    assert _key_env_for("HTTPS://OpenRouter.ai/other", DEFAULT_KEY_ENV) == DEFAULT_KEY_ENV
    assert _key_env_for("https://openrouter.ai:8443/api/v1", DEFAULT_KEY_ENV) is None
    assert _key_env_for("http://openrouter.ai/api/v1", DEFAULT_KEY_ENV) is None
    assert _key_env_for("http://127.0.0.1:80/v1", "MY_KEY") == "MY_KEY"
    assert _key_env_for("http://127.0.0.1/v1", "") is None
    assert _key_env_for("http://127.0.0.1/v1", None) is None


@pytest.mark.parametrize(("value", "ok"), [
    (None, True), (0, True), (5, True), (-1, False), ("0", True), ("100%", True),
    ("100.0%", True), ("100.5%", False), ("101%", False), ("0.5%", True), ("2.5", False),
    ("ten", False)])
def test_gate_values_are_row_counts_or_percentages_up_to_100(value, ok) -> None:
    assert gate_value_ok(value) is ok


@pytest.mark.parametrize(("value", "expected", "ok"), [
    (True, "number", False), (1.5, "number", True), ("1", "number", False),
    (3, "gate", True), ("5%", "gate", True), (True, "gate", False), (1.5, "gate", False),
    (None, "int?", True), ([1], "list", True)])
def test_config_value_types(value, expected, ok) -> None:
    assert _type_ok(value, expected) is ok


def test_config_type_names_say_or_null_for_optional_values() -> None:
    assert _type_name("int?") == "a whole number or null"
    assert _type_name("gate") == "a number of rows (e.g. 10) or a percentage (e.g. '1%')"


def test_an_endpoints_value_of_the_wrong_type_is_named_with_its_value() -> None:
    with pytest.raises(ConfigError) as caught:
        endpoints_config([{"base_url": "http://127.0.0.1:1/v1", "model": "m",
                           "weight": "heavy"}])
    assert str(caught.value).endswith(
        "summarization.endpoints[0].weight must be a number, got 'heavy'")


def test_a_config_file_is_read_from_a_path_given_as_text(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("compression:\n  target_max_tokens: 1234\n", encoding="utf-8")
    assert CompressionConfig.from_yaml(str(path)).target_max_tokens == 1234


@pytest.mark.parametrize(("settings", "message"), [
    ({"target_max_tokens": 1}, "compression.summary_target_tokens must be smaller than "
                               "compression.target_max_tokens (750 >= 1)"),
    ({"mask_exclude_tools": ["  "]}, "compression.mask_exclude_tools must be a list of tool "
                                     "names (non-empty strings)"),
    ({"output_mode": "windows", "strategy": "mask"},
     "output.mode windows works with compression.strategy summarize only, got 'mask'"),
])
def test_config_settings_refused_with_the_first_rule_they_break(settings, message) -> None:
    with pytest.raises(ConfigError) as caught:
        CompressionConfig().replace(**settings)
    assert message in str(caught.value)


def test_an_endpoints_variable_name_of_the_wrong_type_is_never_shown() -> None:
    with pytest.raises(ConfigError) as caught:
        endpoints_config([{"base_url": "http://127.0.0.1:1/v1", "model": "m",
                           "api_key_env": 123456789}])
    assert "123456789" not in str(caught.value)
    assert "api_key_env must be a string or null, got a value of 9 characters" in str(
        caught.value)


def test_an_origin_names_the_schemes_default_port() -> None:
    assert _origin("http://Example.org/v1") == ("http", "example.org", 80)
    assert _origin("HTTPS://example.org") == ("https", "example.org", 443)
    assert _origin("https://example.org:8443/") == ("https", "example.org", 8443)
    assert _origin("ftp://example.org/") == ("ftp", "example.org", None)


# -- core/metrics by hand: rates, the strategy and windows sections, rows read back ---------

def test_the_strategy_section_adds_up_rows_over_the_target_only() -> None:
    aggregate = AggregateMetrics()
    aggregate.add(TrajectoryMetrics(strategy_used="mask", masked_turns=2, masked_tokens=50,
                                    assistant_tokens=100, assistant_tokens_kept=1.0))
    aggregate.add(TrajectoryMetrics(strategy_used="summarize", masked_turns=0,
                                    assistant_tokens=300, assistant_tokens_kept=0.5))
    aggregate.add(TrajectoryMetrics(strategy_used="mask", masked_turns=1, masked_tokens=70,
                                    assistant_tokens=40, assistant_tokens_kept=0.25))
    aggregate.add(TrajectoryMetrics(skipped_under_target=True, strategy_used="none",
                                    masked_turns=9, masked_tokens=900, assistant_tokens=999))
    assert aggregate.strategy_summary() == {
        "rows_by_strategy": {"mask": 2, "summarize": 1},
        "masked_rows": 2, "masked_turns": 3, "masked_tokens": 120,
        "assistant_tokens_before": 440, "assistant_tokens_after": 100 + 150 + 10,
        "assistant_tokens_kept": round(260 / 440, 4)}


@pytest.mark.parametrize(("value", "share"), [
    (0, 0.0), (0.25, 0.25), (1, 1.0), (True, 1.0), (False, 1.0), (1.5, 1.0), (-0.1, 1.0),
    ("0.5", 1.0), (None, 1.0)])
def test_a_rows_assistant_share_reads_back_only_when_it_is_a_share(value, share) -> None:
    assert TrajectoryMetrics.from_dict({"assistant_tokens_kept": value}
                                       ).assistant_tokens_kept == share


def test_only_a_windows_metrics_carry_the_window_keys() -> None:
    source = TrajectoryMetrics(windowed={"windows": 3, "summaries": 2}).to_dict()
    assert "windows" not in source and "summaries" not in source
    window = TrajectoryMetrics(windowed={"window": 2, "windows": 3, "source_id": "r"}).to_dict()
    assert (window["window"], window["windows"], window["source_id"]) == (2, 3, "r")


def aggregate_of(*rows: TrajectoryMetrics) -> dict[str, Any]:
    aggregate = AggregateMetrics()
    for m in rows:
        aggregate.add(m)
    return aggregate.to_dict()


def test_one_row_runs_rates_are_of_that_row() -> None:
    d = aggregate_of(TrajectoryMetrics(original_tokens=3, compressed_tokens=1, tokens_saved=2,
                                       was_compressed=True, compression_ratio=1 / 3,
                                       summarization_api_calls=1, summarization_errors=1))
    assert d["summary"]["compression_rate"] == 1.0
    assert d["tokens"]["overall_compression_ratio"] == 0.3333
    assert d["averages"]["avg_compression_ratio"] == 0.3333
    assert d["summarization"]["success_rate"] == 0.0


def test_rates_are_rounded_to_four_places() -> None:
    rows = [TrajectoryMetrics(original_tokens=3, compressed_tokens=3, summarization_api_calls=1)
            for _ in range(2)]
    rows.append(TrajectoryMetrics(original_tokens=3, compressed_tokens=2, was_compressed=True,
                                  summarization_api_calls=1, summarization_errors=1))
    d = aggregate_of(*rows)
    assert d["summary"]["compression_rate"] == 0.3333
    assert d["tokens"]["overall_compression_ratio"] == 0.8889
    assert d["summarization"]["success_rate"] == 0.6667


def test_the_windows_section_shares_and_what_a_row_leaves_unsaid() -> None:
    one = aggregate_of(TrajectoryMetrics(windowed={
        "windows": 2, "summaries": 1, "summaries_by_source": {"llm": 1, "custom": 1},
        "assistant_tokens": 1, "trained_assistant_tokens": 1}))
    windows = one["windows"]
    assert (windows["trained_share"], windows["trained_within_target_share"]) == (1.0, 1.0)
    assert windows["windows_over"] == 0 and windows["trained_within_target"] == 1
    assert one["summarization"]["summaries_by_source"]["custom"] == 1
    assert one["summarization"]["summaries_by_source"]["llm"] == 1
    thirds = aggregate_of(TrajectoryMetrics(windowed={
        "windows": 3, "summaries": 2, "summaries_by_source": {"llm": 2},
        "assistant_tokens": 3, "trained_assistant_tokens": 2, "windows_over": 1,
        "trained_within_target": 1}))["windows"]
    assert (thirds["trained_share"], thirds["trained_within_target_share"]) == (
        0.6667, 0.3333)


def test_a_summary_from_turn_zero_counts_in_the_fidelity_section() -> None:
    f = Fidelity(3, 1, 3, 1, ())
    d = aggregate_of(TrajectoryMetrics(was_compressed=True, turns_compressed_start_idx=0,
                                       fidelity=f))
    assert d["fidelity"]["count"] == 1
    assert d["fidelity"]["mean_tail_ratio"] == 0.3333
    assert d["fidelity"]["median_ratio"] == 0.3333


def test_a_rows_metrics_round_its_assistant_share_and_read_old_rows() -> None:
    assert TrajectoryMetrics(assistant_tokens_kept=1 / 3).to_dict()[
        "assistant_tokens_kept"] == 0.3333
    assert TrajectoryMetrics.from_dict({"masked_turns": True, "masked_tokens": 7}
                                       ).masked_turns == 0
    old = {"was_compressed": True, "compression_region": {"start_idx": 0, "end_idx": 2}}
    assert TrajectoryMetrics.from_dict(old).strategy_used == "summarize"
    assert TrajectoryMetrics.from_dict({**old, "was_compressed": False}
                                       ).strategy_used == "none"
    assert TrajectoryMetrics.from_dict({"was_compressed": True, "compression_region": {
        "start_idx": -1}}).strategy_used == "none"


def test_a_distribution_past_its_exact_cap_keeps_its_quantiles_within_a_percent() -> None:
    d = Distribution()
    n = Distribution.EXACT_CAP + 1
    for value in range(1, n + 1):
        d.add(value)
    assert d.count == n and (d.min, d.max) == (1, n)
    median = d.quantile(0.5)
    assert median is not None and abs(median - n / 2) <= 0.01 * n / 2


def test_averages_over_compressed_rows_and_a_one_token_run() -> None:
    saved = [TrajectoryMetrics(original_tokens=5, compressed_tokens=5 - n, tokens_saved=n,
                               was_compressed=True) for n in (1, 0, 0)]
    assert aggregate_of(*saved)["averages"]["avg_tokens_saved_per_compressed"] == 0.3
    tiny = aggregate_of(TrajectoryMetrics(original_tokens=1, compressed_tokens=1))
    assert tiny["tokens"]["overall_compression_ratio"] == 1.0
