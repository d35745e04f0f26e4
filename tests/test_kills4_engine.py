"""Round 4 of the mutation kills (issue 26, item 5) in `engine/`: the second pass's
metrics and bounds (`engine/second_pass.py`), the local engine's run loop
(`engine/local.py`) and `RunOptions` (`engine/options.py`), in runs in this process.

Expected values come from the README ("A second pass", the per-row `compression_metrics`
keys, "Library use") or are worked out by hand on "word" rows (``words(n)`` is ``n``
tokens with the bundled tokenizer; per-turn counting, so a row's tokens are its turns').
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_runs import row, words, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import FatalSummaryError, ResumeError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.summary import Summary, SummaryRequest
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.dialects.base import plain_messages
from trajectory_compressor.engine.count import RowCounter
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.engine.options import RunKeywords, RunOptions, run_options

# No protected head, the last 2 turns protected, no notice: the region starts at turn 0.
OPEN_HEAD = {"summary_target_tokens": 100, "protect_last_n_turns": 2,
             "add_summary_notice": False, "protect_first_system": False,
             "protect_first_human": False, "protect_first_gpt": False,
             "protect_first_tool": False}
ELIDE = {"over_limit_strategy": "elide_tool_outputs"}


def extractive(counter: TokenCounter, **settings: Any) -> tuple[CompressionConfig,
                                                                ExtractiveSummarizer]:
    return (CompressionConfig(summarizer="extractive", **settings),
            ExtractiveSummarizer(counter.count))


def run_one(tmp_path: Path, data: dict, counter: TokenCounter,
            **settings: Any) -> tuple[dict, dict]:
    """``data`` compressed alone: (the row written, the run's metrics file)."""
    src = write_jsonl(tmp_path / "in.jsonl", [data])
    out = tmp_path / "out.jsonl"
    config, summarizer = extractive(counter, **settings)
    compress_dataset(str(src), str(out), config, summarizer=summarizer)
    (written,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return written, json.loads((tmp_path / "out_metrics.json").read_text(encoding="utf-8"))


def counts(counter: TokenCounter, data: dict) -> list[int]:
    return [counter.count(t["value"]) for t in data["conversations"]]


# -- engine/second_pass.py: the metrics of a row the second pass brought under -----------

def test_a_row_the_second_pass_brought_under_says_so_in_every_metric(tmp_path, counter):
    """G(50) T(300) G(20) T(2,000) | T(400) G(20): 2,790 tokens over 1,500. The summary
    takes turns 0-1 only (the region the planner picks here), so the row is still over,
    and the second pass cuts the 2,000-token output (turn 2 once the summary is in).
    Every figure of the row and of the metrics file is the row as written: its tokens
    are its turns' (per-turn counting), saved = before - after, ratio = after / before."""
    data = row("r", "GTGTTG", [50, 300, 20, 2000, 400, 20])
    written, metrics = run_one(tmp_path, data, counter, target_max_tokens=1500,
                               **OPEN_HEAD, **ELIDE)
    m = written["compression_metrics"]
    after = counts(counter, written)
    total = sum(after)
    assert m["compression_region"] == {"start_idx": 0, "end_idx": 2, "turns_count": 2}
    assert m["elisions"] == [{"turn": 2, "tokens_before": 2000, "tokens_after": after[2]}]
    assert after[2] < 2000 and total <= 1500
    assert m["original_tokens"] == 2790
    assert m["compressed_tokens"] == total
    assert m["tokens_saved"] == 2790 - total
    assert m["compression_ratio"] == round(total / 2790, 4)
    assert m["was_compressed"] is True and m["still_over_limit"] is False
    # The metrics file adds up the rows as written.
    assert metrics["tokens"] == {"total_before": 2790, "total_after": total,
                                 "total_saved": 2790 - total,
                                 "overall_compression_ratio": round(total / 2790, 4)}
    assert metrics["averages"]["avg_compression_ratio"] == round(total / 2790, 4)
    assert metrics["averages"]["avg_tokens_saved_per_compressed"] == 2790 - total
    assert metrics["summary"]["trajectories_still_over_limit"] == 0
    assert metrics["over_limit"] == {"reasons": {}, "rows_elided": 1,
                                     "tool_outputs_elided": 1,
                                     "tokens_elided": 2000 - after[2]}


def test_a_row_shortened_by_the_second_pass_alone_counts_as_compressed(tmp_path, counter):
    """README: a row the second pass brought under "counts as compressed", also one whose
    summary was refused: `on_low_fidelity: uncompressed` under a bar of 1.0 leaves turns
    4-5 (a tool output of 25 failures with paths) as they were; the 2,000-token output
    (turn 7) is cut instead."""
    facts = "\n".join(f"FAIL /repo/src/module_{i}.py:{100 + i * 7} exit {i}" for i in range(25))
    data = row("r", "SHGTGTGTTG", [10, 10, 10, 10, 300, 1, 20, 2000, 20, 20])
    data["conversations"][5]["value"] = facts
    written, metrics = run_one(tmp_path, data, counter, target_max_tokens=1500,
                               summary_target_tokens=100, protect_last_n_turns=2,
                               add_summary_notice=False, min_fidelity=1.0,
                               on_low_fidelity="uncompressed", **ELIDE)
    m = written["compression_metrics"]
    before = 10 * 4 + 300 + counter.count(facts) + 20 + 2000 + 20 + 20
    after = counts(counter, written)
    assert m["low_fidelity"] is True and m["compression_region"]["start_idx"] == -1
    assert written["conversations"][:7] == data["conversations"][:7]  # no summary
    assert m["elisions"] == [{"turn": 7, "tokens_before": 2000, "tokens_after": after[7]}]
    assert m["was_compressed"] is True and m["still_over_limit"] is False
    assert (m["original_tokens"], m["compressed_tokens"]) == (before, sum(after))
    assert m["tokens_saved"] == 2000 - after[7]
    assert metrics["summary"]["trajectories_compressed"] == 1
    assert metrics["averages"]["avg_tokens_saved_per_compressed"] == 2000 - after[7]
    # The refused summary is not in the row: the fidelity of the summaries written has
    # none to pool (the row's own `fidelity` still says why it was refused).
    assert m["fidelity"]["ratio"] < 1.0
    assert metrics["fidelity"]["count"] == 0
    assert metrics["fidelity"]["low_fidelity_rows"] == 1


def test_without_a_template_a_json_output_loses_at_most_64_strings(tmp_path, counter):
    """README: a JSON output's longest strings are shortened, "each step at most 64
    cuts"; a row the pass cannot bring under is "left exactly as the summary left it".
    The output is an object of 100 strings of 30 tokens each; after the summary the row
    (G(50) T(300) G(20) T(json) | T(400) G(20), the region turns 0-1) is over 2,100 by
    more than 64 x 30 = 1,920 tokens: even 64 strings cut to nothing cannot give it, so
    the row stays over with no elision. Over 2,900 instead, fewer strings are enough."""
    data = row("r", "GTGTTG", [50, 300, 20, 1, 400, 20])
    output = json.dumps({f"k{i}": words(30) for i in range(100)})
    data["conversations"][3]["value"] = output
    over, _ = run_one(tmp_path, data, counter, target_max_tokens=2100, **OPEN_HEAD, **ELIDE)
    m = over["compression_metrics"]
    after = counts(counter, over)
    assert m["compression_region"]["end_idx"] == 2 and after[2] == counter.count(output)
    assert sum(after) - 2100 > 64 * 30
    assert m["still_over_limit"] is True and "elisions" not in m
    assert over["conversations"][2]["value"] == output
    again = tmp_path / "again"
    again.mkdir()
    fits, _ = run_one(again, data, counter, target_max_tokens=2900, **OPEN_HEAD, **ELIDE)
    shortened = json.loads(fits["conversations"][2]["value"])
    cut = [k for k, v in shortened.items() if v != words(30)]
    assert fits["compression_metrics"]["still_over_limit"] is False
    assert 0 < len(cut) <= 64


def test_a_row_the_cuts_bring_to_exactly_the_target_fits(tmp_path, counter):
    """Over the target means more than `target_max_tokens` (README: a row at or under the
    target fits). A 300-line output ("line i word", 1,499 tokens) whose cut, with this
    target, leaves the row at exactly 1,614 tokens: the row is written elided, not
    over the limit."""
    data = row("r", "GTGTTG", [50, 300, 20, 1, 400, 20])
    data["conversations"][3]["value"] = "\n".join(f"line {i} word" for i in range(300))
    assert counter.count(data["conversations"][3]["value"]) == 1499
    written, metrics = run_one(tmp_path, data, counter, target_max_tokens=1614, **OPEN_HEAD,
                               **ELIDE)
    m = written["compression_metrics"]
    assert sum(counts(counter, written)) == 1614  # the premise: exactly the target
    assert m["elisions"] and m["still_over_limit"] is False
    assert m["compressed_tokens"] == 1614
    assert metrics["summary"]["trajectories_still_over_limit"] == 0


# -- counted with a chat template: the row is rendered again after the cuts -------------

@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Path]:
    """"chatml": tests/template_tokenizer.py's; "escaped": the same with each tool result
    written as a JSON string (`tojson`, as some templates do): its quotes come out
    escaped, so a cut saves more rendered tokens than the bare text has."""
    from tests.template_tokenizer import CHATML

    folder = tmp_path_factory.mktemp("templates")
    escaped = CHATML.replace("{{ render_content(message.content) }}\n</tool_response>",
                             "{{ message.content | tojson }}\n</tool_response>")
    assert escaped != CHATML
    paths = {"chatml": folder / "chatml.jinja", "escaped": folder / "escaped.jinja"}
    paths["chatml"].write_text(CHATML, encoding="utf-8")
    paths["escaped"].write_text(escaped, encoding="utf-8")
    return paths


def rendered_total(rows: RowCounter, data: dict) -> int:
    """The row's tokens as the template renders it (README: with chat_template counting
    a row's count is its rendering's)."""
    assert rows.template is not None
    turns = [{"from": t["from"], "value": t["value"]} for t in data["conversations"]]
    return int(rows.template.count_total(plain_messages(turns)))


def test_with_a_template_the_elided_row_is_counted_as_rendered(tmp_path, counter,
                                                               templates):
    """README: after the cuts the row "is counted again (with --token-counting
    chat_template, rendered again)". With a template that escapes tool results, the
    rendered row loses more than the cut outputs' own counts say: the metrics hold the
    count of the row as rendered, not the first count minus the cuts."""
    data = row("r", "GTGTTG", [50, 300, 20, 1, 400, 20])
    data["conversations"][3]["value"] = "\n".join(f'"key{i}": "value {i}"'
                                                  for i in range(200))
    settings = {**OPEN_HEAD, **ELIDE, "target_max_tokens": 1500,
                "token_counting": "chat_template", "chat_template": str(templates["escaped"])}
    written, _ = run_one(tmp_path, data, counter, **settings)
    m = written["compression_metrics"]
    config, _ = extractive(counter, **settings)
    rows = RowCounter(config, counter)
    total = rendered_total(rows, written)
    (elision,) = m["elisions"]
    cut = elision["tokens_before"] - elision["tokens_after"]
    assert m["compressed_tokens"] == total <= 1500 and not m["still_over_limit"]
    assert m["tokens_saved"] == m["original_tokens"] - total
    # The premise: the escaping made the rendered row lose more than the cut's own count.
    uncut = {"conversations": [*written["conversations"][:2], data["conversations"][3],
                               *written["conversations"][3:]]}
    assert rendered_total(rows, uncut) - total > cut


def test_with_a_template_the_cuts_go_on_for_three_rounds_at_most(tmp_path, counter,
                                                                 templates):
    """README: with a template the row is rendered again after each round of cuts, at
    most 3 rounds, and each step of a JSON output makes at most 64 cuts a round. An
    object of 300 strings of 30 tokens each: 3 rounds shorten at most 192 of them, which
    cannot give more than 192 x 30 = 5,760 tokens; the row is over by 5,800 after its
    summary, so it stays over, as the summary left it."""
    data = row("r", "GTGTTG", [50, 300, 20, 1, 400, 20])
    output = json.dumps({f"k{i}": words(30) for i in range(300)})
    data["conversations"][3]["value"] = output
    settings = {**OPEN_HEAD, "token_counting": "chat_template",
                "chat_template": str(templates["chatml"])}
    # The row as the summary leaves it (turns 0-1 summarized: the region the planner
    # picks), counted as rendered, without the second pass.
    first, _ = run_one(tmp_path, data, counter, target_max_tokens=5000, **settings)
    assert first["compression_metrics"]["compression_region"]["end_idx"] == 2
    target = first["compression_metrics"]["compressed_tokens"] - 5800
    again = tmp_path / "again"
    again.mkdir()
    over, _ = run_one(again, data, counter, target_max_tokens=target, **settings, **ELIDE)
    m = over["compression_metrics"]
    assert m["compression_region"]["end_idx"] == 2
    assert m["still_over_limit"] is True and "elisions" not in m
    assert over["conversations"][2]["value"] == output


# -- engine/local.py: a run that stops with rows in flight, a resume missing a file --------

class RevokedWhileOthersWait(ExtractiveSummarizer):
    """The first request fails as a revoked key does (fatal: the run stops); the others
    are still waiting for their summaries then, and are cancelled."""

    def __init__(self, counter: TokenCounter) -> None:
        super().__init__(counter.count)
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(0.05)  # the other rows' requests are in flight by then
            raise FatalSummaryError("the API key was revoked")
        await asyncio.sleep(30)
        return await super().summarize(request)


FITS = ("SHGTGTGTGTGT", [10, 5, 5, 5, 40, 40, 40, 40, 5, 5, 5, 5])  # 205 tokens, over 100


def test_a_run_stopped_with_rows_in_flight_reports_only_its_error(tmp_path, counter,
                                                                  caplog):
    """SPEC §7: a fatal summarizer error stops the run, with one clear sentence. The rows
    still being summarized are cancelled on the way out, and that is no error of its
    own: nothing is logged (asyncio logs an exception raised in a done-callback)."""
    src = write_jsonl(tmp_path / "in.jsonl", [row(f"r{i}", *FITS) for i in range(3)])
    config = CompressionConfig(summarizer="extractive", target_max_tokens=100,
                               summary_target_tokens=20, add_summary_notice=False)
    summarizer = RevokedWhileOthersWait(counter)
    with caplog.at_level(logging.DEBUG, logger="asyncio"), \
            pytest.raises(FatalSummaryError, match="the API key was revoked"):
        compress_dataset(str(src), str(tmp_path / "out.jsonl"), config,
                         summarizer=summarizer)
    assert summarizer.calls == 3  # all three were in flight
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_resume_whose_finished_output_is_gone_says_so(tmp_path, counter):
    """README (resuming): a resume that finds the partial output of an interrupted run
    gone is refused with one sentence naming it, as a resume error (not an output that
    cannot be written); here the output of the first of two inputs, which the
    interrupted run had finished (under its temporary name) before it stopped."""
    from tests.test_kills_engine3_local import CONFIG, RevokedAfter, folder

    data = folder(tmp_path)  # a.jsonl (3 rows) and b.jsonl (4 rows)
    out = tmp_path / "out"
    with pytest.raises(FatalSummaryError):  # stopped in b.jsonl, a.jsonl finished
        compress_dataset(str(data), str(out), CONFIG, summarizer=RevokedAfter(counter, 5))
    finished = out / ".a.jsonl.partial"
    finished.unlink()
    with pytest.raises(ResumeError) as info:
        compress_dataset(str(data), str(out), CONFIG, resume=True,
                         summarizer=ExtractiveSummarizer(counter.count))
    assert str(info.value) == (f"cannot resume: the partial output {finished} is missing or "
                               "damaged; run without --resume to start over")


# -- engine/options.py: RunOptions ------------------------------------------------------

def test_run_options_default_as_the_readme_says():
    # README "Library use": the RunOptions table (quiet: True for the library).
    assert dataclasses.asdict(RunOptions()) == {
        "sample_percent": None, "seed": 42, "strict": False, "quiet": True,
        "resume": False, "overwrite": False, "split": None, "data_files": None,
        "gates": (), "summarizer_rows": None}
    assert run_options() == RunOptions()


def test_run_options_are_a_value():
    # One value carries them from the command line to the engine: changed by replacing.
    options = RunOptions(seed=7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 8  # type: ignore[misc]
    assert run_options(options, quiet=False) == RunOptions(seed=7, quiet=False)
    assert options.quiet is True


@pytest.mark.parametrize("share", [0.5, 1, 100])
def test_any_share_in_0_to_100_is_a_sample(share):
    # README: --sample-percent P keeps each row with probability P%; P in (0, 100].
    assert RunOptions(sample_percent=share).sample_percent == share


def test_every_run_keyword_may_be_left_out():
    # `compress_dataset(path, seed=7)`: the keywords are RunOptions' fields, each with its
    # default, so a type checker must take any subset of them (none is required).
    assert RunKeywords.__required_keys__ == frozenset()
    assert RunKeywords.__optional_keys__ == {f.name for f in dataclasses.fields(RunOptions)}


class Watching(ExtractiveSummarizer):
    """The extractive summarizer, taking a moment per summary and noting how many rows
    were being summarized at once."""

    def __init__(self, counter: TokenCounter) -> None:
        super().__init__(counter.count)
        self.active = self.peak = 0
        self.at_calls: list[int] = []  # rows being summarized as each request starts

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.at_calls.append(self.active)
        try:
            await asyncio.sleep(0.02)
            return await super().summarize(request)
        finally:
            self.active -= 1


@pytest.mark.parametrize("rows_of_window", [2, 3])
def test_the_window_takes_rows_until_they_reach_window_mb(tmp_path, counter, rows_of_window):
    """README: the window takes rows until it holds `window_rows` rows or `window_mb` MiB
    of them (a JSONL row counts its line's bytes), then waits for its first row. Rows of
    s bytes under a window of 2s + 1 bytes (or of exactly 3s): two rows stay under it,
    the third reaches it, so three rows are summarized at once, never more; rows written
    leave it, so the last rows too are summarized together, not one at a time."""
    src = write_jsonl(tmp_path / "in.jsonl", [row(f"r{i}", *FITS) for i in range(6)])
    (size,) = {len(line) for line in src.read_bytes().splitlines()}
    config = CompressionConfig(summarizer="extractive", target_max_tokens=100,
                               summary_target_tokens=20, add_summary_notice=False,
                               window_mb=(2 * size + 1 if rows_of_window == 2
                                          else 3 * size) / 2**20)
    summarizer = Watching(counter)
    compress_dataset(str(src), str(tmp_path / "out.jsonl"), config, summarizer=summarizer)
    assert summarizer.peak == 3
    assert len(summarizer.at_calls) == 6 and summarizer.at_calls[-1] >= 2


# -- engine/local.py: the run loop ------------------------------------------------------

HAND = {"summarizer": "extractive", "target_max_tokens": 100, "summary_target_tokens": 20,
        "add_summary_notice": False}


def test_the_exit_code_says_whether_rows_were_rejected_or_failed(tmp_path, counter):
    # README: exit code 1 means some rows were rejected or failed (`result.exit_code` of
    # a library run, README "Library use").
    from tests.test_kills_engine3_local import Broken

    config = CompressionConfig(**HAND)
    clean = write_jsonl(tmp_path / "clean.jsonl", [row("r0", *FITS)])
    bad = write_jsonl(tmp_path / "bad.jsonl", [row("r0", *FITS)], extra_lines=("{broken",))
    assert compress_dataset(str(clean), str(tmp_path / "o1.jsonl"), config,
                            summarizer=ExtractiveSummarizer(counter.count)).exit_code == 0
    assert compress_dataset(str(bad), str(tmp_path / "o2.jsonl"), config,
                            summarizer=ExtractiveSummarizer(counter.count)).exit_code == 1
    failed = compress_dataset(str(clean), str(tmp_path / "o3.jsonl"), config,
                              summarizer=Broken(counter.count))
    assert failed.metrics.trajectories_failed == 1 and failed.exit_code == 1


def test_an_empty_input_file_is_reported_and_listed_in_the_rejects(tmp_path, counter):
    # README: "an empty file is reported and listed there too" (the rejects file).
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", [row("r0", *FITS)])
    (data / "b.jsonl").write_bytes(b"")
    out = tmp_path / "out"
    result = compress_dataset(str(data), str(out), CompressionConfig(**HAND),
                              summarizer=ExtractiveSummarizer(counter.count))
    empty = data / "b.jsonl"
    assert f"{empty}: file is empty (no rows)" in result.warnings
    rejects = [json.loads(line) for line in
               (tmp_path / "out_rejects.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["file"], r["error"]) for r in rejects] == [(str(empty),
                                                           "file is empty (no rows)")]


def test_every_batch_is_counted_on_the_one_counting_thread(tmp_path, counter):
    """`Pipeline._count`: "Always the same single thread" (one malloc arena, one place for
    the memo's updates): 5 batches of one row each are all counted on one thread."""
    import threading

    from trajectory_compressor.engine.compressor import TrajectoryCompressor
    from trajectory_compressor.engine.layout import plan_layout
    from trajectory_compressor.engine.local import run_pipeline
    from trajectory_compressor.formats.registry import discover_inputs

    src = write_jsonl(tmp_path / "in.jsonl", [row(f"r{i}", *FITS) for i in range(5)])
    config = CompressionConfig(**HAND, batch_rows=1)
    compressor = TrajectoryCompressor(config, summarizer=ExtractiveSummarizer(counter.count),
                                      counter=counter)
    threads: list[threading.Thread] = []
    count = compressor.rows.count

    def watched(items: Any) -> Any:
        threads.append(threading.current_thread())
        return count(items)

    compressor.rows.count = watched  # type: ignore[method-assign]
    inputs = discover_inputs(str(src))
    layout = plan_layout(str(src), inputs, str(tmp_path / "out.jsonl"), config,
                         single_file=True)
    result = run_pipeline(compressor, inputs, layout, RunOptions())
    assert result.metrics.trajectories_compressed == 5
    assert len(threads) == 5 and len(set(threads)) == 1
    # The run's own thread (named "count", as test_kills_engine3_local.py looks for it),
    # not the event loop's shared pool.
    assert threads[0] is not threading.main_thread()
    assert threads[0].name.startswith("count")


class ClosingLate(RevokedWhileOthersWait):
    """Notes when the rows still waiting are cancelled, and when the summarizer closes."""

    def __init__(self, counter: TokenCounter) -> None:
        super().__init__(counter)
        self.events: list[str] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        try:
            return await super().summarize(request)
        except asyncio.CancelledError:
            self.events.append("cancelled")
            raise

    async def aclose(self) -> None:
        self.events.append("closed")
        await super().aclose()


def test_rows_in_flight_are_cancelled_before_the_summarizer_closes(tmp_path, counter):
    """`Pipeline._run`: the rows still being summarized are cancelled, and done, "before
    the summarizer closes its session" (a request must not outlive its session)."""
    src = write_jsonl(tmp_path / "in.jsonl", [row(f"r{i}", *FITS) for i in range(3)])
    summarizer = ClosingLate(counter)
    with pytest.raises(FatalSummaryError):
        compress_dataset(str(src), str(tmp_path / "out.jsonl"), CompressionConfig(**HAND),
                         summarizer=summarizer)
    assert summarizer.events == ["cancelled", "cancelled", "closed"]


class SlowHead(ExtractiveSummarizer):
    """The first row's summary takes 30 s; the second row's request finds the key revoked
    (30 s: a margin no loaded machine closes; a run that stops at once never waits it out)."""

    def __init__(self, counter: TokenCounter) -> None:
        super().__init__(counter.count)
        self.calls = 0
        self.finished: list[int] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.calls += 1
        call = self.calls
        if call == 2:
            raise FatalSummaryError("the API key was revoked")
        await asyncio.sleep(30 if call == 1 else 0)
        self.finished.append(call)
        return await super().summarize(request)


@pytest.mark.parametrize("batch_rows", [256, 1])
def test_a_fatal_error_behind_the_head_row_stops_the_run_at_once(tmp_path, counter,
                                                                 batch_rows):
    """`Pipeline._stop`: the first exception a row task raises (a rejected API key) stops
    the run at once, "instead of when that row reaches the head of the window": the
    first row, still being summarized (30 s), is not waited for. All rows in one batch
    (the stop is seen while waiting for the head), or one a batch (seen while reading);
    a ready row behind them (the cleanup skips rows without a task)."""
    short = row("r2", "SHGT", [10, 5, 5, 5])  # under the target: ready at once
    rows = [row("r0", *FITS), row("r1", *FITS), short] + [row(f"r{i}", *FITS)
                                                         for i in range(3, 6)]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    summarizer = SlowHead(counter)
    with pytest.raises(FatalSummaryError, match="revoked"):
        compress_dataset(str(src), str(tmp_path / "out.jsonl"),
                         CompressionConfig(**HAND, batch_rows=batch_rows),
                         summarizer=summarizer)
    assert summarizer.calls >= 2 and 1 not in summarizer.finished


class CountingResults(ExtractiveSummarizer):
    """Notes, at each request, how many compressed rows (`RowResult`s) are still alive."""

    def __init__(self, counter: TokenCounter) -> None:
        super().__init__(counter.count)
        self.alive: list[int] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        import gc

        from trajectory_compressor.engine.compressor import RowResult

        gc.collect()
        self.alive.append(sum(isinstance(o, RowResult) for o in gc.get_objects()))
        return await super().summarize(request)


def test_rows_written_are_not_kept_in_memory(tmp_path, counter):
    """engine/local.py: memory is "bounded by the window, never by the dataset" (README:
    it depends on `batch_rows`, `window_rows` and `window_mb`). One row at a time
    (batches of one row, a window of one): when the sixth row is summarized, the five
    before it are written and none of their results is held any more."""
    src = write_jsonl(tmp_path / "in.jsonl", [row(f"r{i}", *FITS) for i in range(6)])
    summarizer = CountingResults(counter)
    compress_dataset(str(src), str(tmp_path / "out.jsonl"),
                     CompressionConfig(**HAND, batch_rows=1, window_rows=1),
                     summarizer=summarizer)
    assert len(summarizer.alive) == 6 and max(summarizer.alive) <= 1


def test_a_resume_refuses_a_tokenizer_whose_files_changed(tmp_path, counter):
    """A resume must count with the same tokenizer files (README, resuming: other
    settings are refused): the tokenizer folder's files edited after the interruption,
    the resume is refused in one sentence."""
    from tests.template_tokenizer import make_tokenizer_dir
    from tests.test_kills_engine3_local import CONFIG, RevokedAfter, folder

    tokenizer = make_tokenizer_dir(tmp_path / "tok", chat_template=None)
    config = CONFIG.replace(tokenizer_name=str(tokenizer))
    data = folder(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(FatalSummaryError):
        compress_dataset(str(data), str(out), config, summarizer=RevokedAfter(counter, 5))
    settings = tokenizer / "tokenizer_config.json"
    settings.write_text(settings.read_text(encoding="utf-8").replace(
        "{", '{\n  "comment": "edited",', 1), encoding="utf-8")
    with pytest.raises(ResumeError) as info:
        compress_dataset(str(data), str(out), config, resume=True,
                         summarizer=ExtractiveSummarizer(counter.count))
    assert str(info.value) == (
        "cannot resume: the tokenizer's files, the counting mode or the chat template "
        "differ from the interrupted run's; run without --resume to start over")


def test_each_files_dialect_is_detected(tmp_path, counter):
    # README: without `dataset.format` each file's dialect is detected from its rows: an
    # OpenAI messages file is read as such (none of its rows is rejected as a ShareGPT
    # row without `conversations`).
    from tests.conftest import SAMPLES

    src = SAMPLES / "openai_messages.jsonl"
    lines = src.read_text(encoding="utf-8").splitlines()
    result = compress_dataset(str(src), str(tmp_path / "out.jsonl"),
                              CompressionConfig(summarizer="extractive",
                                                target_max_tokens=2000),
                              summarizer=ExtractiveSummarizer(counter.count))
    assert result.metrics.rows_rejected == 0
    assert result.metrics.total_trajectories == len(lines) == 10
    written = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert all("messages" in json.loads(line) for line in written)


def test_a_stopped_run_leaves_no_input_open(tmp_path, counter):
    """A run stopped in the middle of an input (a revoked key, after a checkpoint in it)
    closes that input, though it was kept open between checkpoints to hash what was
    read: nothing of the run holds it open afterwards (its traceback still holds the run
    itself here)."""
    import os

    from tests.test_kills_engine3_local import CONFIG, RevokedAfter, folder

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("open files are listed in /proc on Linux")
    data = folder(tmp_path)
    with pytest.raises(FatalSummaryError) as info:  # stopped in b.jsonl, b2 refused
        compress_dataset(str(data), str(tmp_path / "out"), CONFIG,
                         summarizer=RevokedAfter(counter, 5))
    opened = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            opened.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    assert info.traceback  # the run's frames are still alive
    assert str(data / "b.jsonl") not in opened and str(data / "a.jsonl") not in opened


def test_a_row_whose_distilling_fails_goes_on_undistilled_with_a_warning(tmp_path, counter):
    """`Entry.distill_with`: a rule's bug costs the row its distilling, never the row:
    the row is compressed as it was, and the run warns with its location and why."""
    from trajectory_compressor.engine.compressor import TrajectoryCompressor
    from trajectory_compressor.engine.layout import plan_layout
    from trajectory_compressor.engine.local import run_pipeline
    from trajectory_compressor.formats.registry import discover_inputs

    class BrokenRule(TrajectoryCompressor):
        def distill(self, row: Any, turns: Any, dialect: Any = None) -> Any:
            raise ValueError("a rule's bug")

    src = write_jsonl(tmp_path / "in.jsonl", [row("r0", *FITS)])
    config = CompressionConfig(**HAND, distill="safe")
    compressor = BrokenRule(config, summarizer=ExtractiveSummarizer(counter.count),
                            counter=counter)
    inputs = discover_inputs(str(src))
    layout = plan_layout(str(src), inputs, str(tmp_path / "out.jsonl"), config,
                         single_file=True)
    result = run_pipeline(compressor, inputs, layout, RunOptions())
    assert result.metrics.trajectories_compressed == 1
    assert [w for w in result.warnings if "distill" in w] == [
        f"{src}:1: distill failed, the row goes on undistilled: ValueError: a rule's bug"]


def test_rows_ready_are_written_at_once_not_when_the_window_fills(tmp_path, counter):
    """`Pipeline._place` moves a batch into the window "writing what is ready": rows
    under the target are written as soon as they are placed, so a run stopped later (the
    fourth row's summary refused, fatal) has already written and checkpointed the first
    three. One row a batch, a window of 1,024 rows, a checkpoint after every row."""
    from tests.test_kills_engine3_local import RevokedAfter

    short = ("SHGT", [10, 5, 5, 5])  # 25 tokens: under the target, no summary
    rows = [row(f"s{i}", *short) for i in range(3)] + [row("f3", *FITS)] + [
        row(f"s{i}", *short) for i in range(4, 10)]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    config = CompressionConfig(**HAND, batch_rows=1, checkpoint_rows=1)
    with pytest.raises(FatalSummaryError):
        compress_dataset(str(src), str(tmp_path / "out.jsonl"), config,
                         summarizer=RevokedAfter(counter, 0))
    checkpoint = json.loads((tmp_path / ".out.checkpoint.json").read_text(encoding="utf-8"))
    assert (checkpoint["file_index"], checkpoint["skip"]) == (0, 3)


def test_an_output_that_cannot_be_opened_is_named_in_one_sentence(tmp_path):
    """`_reopen`: an output that cannot be created is an output error naming it; the same
    file missing on a resume is a resume error (its partial output is gone)."""
    from trajectory_compressor.core.errors import OutputError
    from trajectory_compressor.engine.local import _reopen

    missing = tmp_path / "gone" / "out.jsonl"
    with pytest.raises(OutputError) as info:
        _reopen(lambda: open(missing, "rb"), resuming=False)  # noqa: SIM115
    assert str(info.value) == f"cannot write {missing}: No such file or directory"
    with pytest.raises(ResumeError, match="cannot resume: the partial output"):
        _reopen(lambda: open(missing, "rb"))  # noqa: SIM115
    with pytest.raises(OutputError) as info:  # any other failure, resuming or not
        _reopen(lambda: open(tmp_path, "rb"))  # noqa: SIM115
    assert str(info.value) == f"cannot write {tmp_path}: Is a directory"


def test_a_stopped_run_checkpoints_what_it_wrote(tmp_path, counter):
    """README: after a fatal error the temporary outputs and a checkpoint are kept for
    `--resume`. With no checkpoint due yet (20,000 rows, 30 s), the stop itself writes
    one at the rows written: the three rows before the refused one."""
    from tests.test_kills_engine3_local import RevokedAfter

    short = ("SHGT", [10, 5, 5, 5])
    rows = [row(f"s{i}", *short) for i in range(3)] + [row("f3", *FITS)]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    with pytest.raises(FatalSummaryError):
        compress_dataset(str(src), str(tmp_path / "out.jsonl"), CompressionConfig(**HAND),
                         summarizer=RevokedAfter(counter, 0))
    checkpoint = json.loads((tmp_path / ".out.checkpoint.json").read_text(encoding="utf-8"))
    assert (checkpoint["file_index"], checkpoint["skip"]) == (0, 3)
    partial = (tmp_path / ".out.jsonl.partial").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in partial] == ["s0", "s1", "s2"]


class Looking(ExtractiveSummarizer):
    """Notes whether a file exists when the run asks for its first summary."""

    def __init__(self, counter: TokenCounter, path: Path) -> None:
        super().__init__(counter.count)
        self.path = path
        self.seen: list[bool] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.seen.append(self.path.exists())
        return await super().summarize(request)


def test_a_leftover_checkpoint_is_discarded_when_the_run_starts(tmp_path, counter):
    # The note says it: "an interrupted run's checkpoint ... is discarded; starting over"
    # (without --resume): gone from the start, not only once the run succeeds.
    src = write_jsonl(tmp_path / "in.jsonl", [row("r0", *FITS)])
    leftover = tmp_path / ".out.checkpoint.json"
    leftover.write_text("{}", encoding="utf-8")
    summarizer = Looking(counter, leftover)
    compress_dataset(str(src), str(tmp_path / "out.jsonl"), CompressionConfig(**HAND),
                     summarizer=summarizer)
    assert summarizer.seen == [False] and not leftover.exists()


def test_a_distilled_row_is_written_and_counted_distilled(tmp_path, counter):
    """README "Distill": with `--distill safe` every row's tool outputs are distilled,
    under the target too (written anew with `compression_metrics`); a run of identical
    lines folds to one line with its count (`⟪×40⟫ line`), and the planner and
    `original_tokens` see the distilled row."""
    polling = "\n".join(["waiting for the job"] * 40)
    data = row("r0", "SHGT", [10, 5, 5, 1])
    data["conversations"][3]["value"] = polling
    src = write_jsonl(tmp_path / "in.jsonl", [data])
    compress_dataset(str(src), str(tmp_path / "out.jsonl"), CompressionConfig(
        **HAND, distill="safe"), summarizer=ExtractiveSummarizer(counter.count))
    (written,) = [json.loads(line) for line in
                  (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    output = written["conversations"][3]["value"]
    assert output == "⟪×40⟫ waiting for the job"
    m = written["compression_metrics"]
    assert m["original_tokens"] == sum(counts(counter, written)) < 20 + counter.count(polling)
    assert m["distill"]["level"] == "safe"


def test_a_row_that_cannot_be_planned_is_rejected_and_the_run_goes_on(tmp_path, counter):
    """`Pipeline._start`: a row whose planning raises is rejected (a rejects entry and a
    warning, "cannot plan the row: ..."), and the rows after it are compressed."""
    from trajectory_compressor.engine.compressor import TrajectoryCompressor
    from trajectory_compressor.engine.layout import plan_layout
    from trajectory_compressor.engine.local import run_pipeline
    from trajectory_compressor.formats.registry import discover_inputs

    class Unplannable(TrajectoryCompressor):
        def plan(self, turns: Any, turn_tokens: Any = None, dialect: Any = None,
                 distill: Any = None) -> Any:
            if len(turns) == 4:
                raise ValueError("no plan for four turns")
            return super().plan(turns, turn_tokens, dialect, distill)

    src = write_jsonl(tmp_path / "in.jsonl", [row("four", "SHGT", [10, 5, 5, 5]),
                                              row("r1", *FITS)])
    config = CompressionConfig(**HAND)
    compressor = Unplannable(config, summarizer=ExtractiveSummarizer(counter.count),
                             counter=counter)
    inputs = discover_inputs(str(src))
    layout = plan_layout(str(src), inputs, str(tmp_path / "out.jsonl"), config,
                         single_file=True)
    result = run_pipeline(compressor, inputs, layout, RunOptions())
    reason = "cannot plan the row: ValueError: no plan for four turns"
    assert f"{src}:1: {reason}" in result.warnings
    assert (result.metrics.rows_rejected, result.metrics.trajectories_compressed) == (1, 1)
    rejects = [json.loads(line) for line in
               (tmp_path / "out_rejects.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["line"], r["error"]) for r in rejects] == [(1, reason)]


def test_a_quiet_run_draws_nothing_on_a_terminal(tmp_path, counter):
    # README: the bar is "shown on a terminal, never in a pipe or with --quiet" (a library
    # run is quiet by default).
    from tests.test_kills_engine3_progress import terminal

    src = write_jsonl(tmp_path / "in.jsonl", [row(f"r{i}", *FITS) for i in range(2)])
    with terminal(120) as screen:
        compress_dataset(str(src), str(tmp_path / "out.jsonl"), CompressionConfig(**HAND),
                         summarizer=ExtractiveSummarizer(counter.count))
        drawn = screen.read()
    assert drawn == ""


def interrupted(tmp_path: Path, counter: TokenCounter) -> tuple[Path, Path]:
    """a.jsonl (3 rows) and b.jsonl (4 rows) into out/, stopped at b2 (its summary
    refused): (the input folder, the output folder)."""
    from tests.test_kills_engine3_local import CONFIG, RevokedAfter, folder

    data = folder(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(FatalSummaryError):
        compress_dataset(str(data), str(out), CONFIG, summarizer=RevokedAfter(counter, 5))
    return data, out


def resume(data: Path, out: Path, counter: TokenCounter) -> Any:
    from tests.test_kills_engine3_local import CONFIG

    return compress_dataset(str(data), str(out), CONFIG, resume=True,
                            summarizer=ExtractiveSummarizer(counter.count))


@pytest.mark.parametrize("gone", [".out_rejects.jsonl.partial", "out/.b.jsonl.partial"])
def test_a_resume_missing_a_partial_output_is_a_resume_error(tmp_path, counter, gone):
    """README (resuming): the partial outputs an interrupted run kept are what a resume
    continues; one of them gone (a sidecar, or the output of the input it stopped in),
    the resume is refused, naming it."""
    data, out = interrupted(tmp_path, counter)
    missing = tmp_path / gone
    missing.unlink()
    with pytest.raises(ResumeError) as info:
        resume(data, out, counter)
    assert str(info.value) == (f"cannot resume: the partial output {missing} is missing or "
                               "damaged; run without --resume to start over")


def test_a_checkpoint_counting_fewer_rows_than_it_covers_is_refused(tmp_path, counter):
    """A checkpoint whose metrics count fewer rows than the lines before its cut would
    lose rows (every non-blank line is a row or a reject): the resume is refused as
    damaged. (A sampled run's metrics count only the rows it drew.)"""
    data, out = interrupted(tmp_path, counter)
    path = tmp_path / ".out.checkpoint.json"
    checkpoint = json.loads(path.read_text(encoding="utf-8"))
    assert checkpoint["metrics"]["total_trajectories"] == 5  # a0-a2, b0-b1
    checkpoint["metrics"]["total_trajectories"] = 4
    path.write_text(json.dumps(checkpoint), encoding="utf-8")
    with pytest.raises(ResumeError) as info:
        resume(data, out, counter)
    assert str(info.value) == (
        f"cannot resume: the checkpoint {path} is damaged (its metrics count 4 rows before "
        "the cut, the inputs hold 5 there); run without --resume to start over")
