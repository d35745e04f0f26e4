"""`inspect.analyze` (round 6 of issue 26, item 5): the histogram, the summarizer `auto`
resolves to, prices, the counting gap's boundaries, the checks of the timing flags, what
`--distill` does to the counts and its preview, and the time estimate's measured parts.

Rows are made of "word" texts: ``words(n)`` is exactly ``n`` tokens with the bundled
tokenizer, and the default counting (``turns``) sums the turns' counts. A row fits when
its count is at most the target (over: more than it).

The measured parts of the estimate (README "How long compress would take") are checked
against what they measure: each stage of the work gets a known delay (the real stage runs
after it), and the seconds the estimate gives each part must hold it, never exceed the
wall time of the whole call, and add up as the README says: ``read_and_count_seconds`` is
reading and counting, a target's ``local_seconds`` adds planning every row and building
(and serializing) the summarized ones, and for an LLM summarizer leaves out the extractive
summaries' own time.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.fixtures_runs import row, words, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.engine.count import RowCounter
from trajectory_compressor.formats import jsonio
from trajectory_compressor.inspect.analyze import CountingGap, Prices, analyze

# target 100, 20-token summaries, no notice (the figures below are worked out for these).
HAND = {"target_max_tokens": 100, "summary_target_tokens": 20, "add_summary_notice": False}
# 35 tokens: under the target, left as it is.
SHORT = row("short", "SHGTHG", [10, 5, 5, 5, 5, 5])
# 140 tokens: first system/human/gpt/tool (25) and the last 4 turns (35) protected, the
# middle 4-7 (80) summarized in 20: 80 tokens, under the target.
LONG = row("long", "SHGTGTGTGTGT", [10, 5, 5, 5, 20, 20, 20, 20, 10, 10, 10, 5])


def extractive(**more: object) -> CompressionConfig:
    return CompressionConfig(summarizer="extractive", **{**HAND, **more})  # type: ignore[arg-type]


# --- the report's figures ---------------------------------------------------------------


def test_the_histogram_has_at_most_ten_round_bins_each_from_one_edge_to_the_next(
        tmp_path, counter):
    """Totals 35 and 140: ten bins would need a step of 10.5, so the round step is 20
    (1, 2, 2.5, 5, 10, 20 ...), from 20 (35 rounded down) to 140; 140 is in the last bin
    (closed)."""
    src = write_jsonl(tmp_path / "rows.jsonl", [SHORT, LONG])
    data = analyze(str(src), extractive(), counter=counter).to_dict()
    assert data["rows"] == 2 and data["summarizer"] == "extractive"
    assert data["histogram"] == [
        {"from": 20, "to": 40, "rows": 1}, {"from": 40, "to": 60, "rows": 0},
        {"from": 60, "to": 80, "rows": 0}, {"from": 80, "to": 100, "rows": 0},
        {"from": 100, "to": 120, "rows": 0}, {"from": 120, "to": 140, "rows": 1}]


def test_auto_is_resolved_to_the_summarizer_compress_would_run(tmp_path, counter):
    """`auto` with an endpoint named is `openai` (summarizers.choice): the analysis is a
    projection and its time is assumed per call, as compress --summarizer openai."""
    src = write_jsonl(tmp_path / "rows.jsonl", [SHORT, LONG])
    config = CompressionConfig(summarizer="auto", **HAND).with_endpoint_flags(  # type: ignore[arg-type]
        ["http://127.0.0.1:9/v1"], "m")
    a = analyze(str(src), config, counter=counter)
    assert a.summarizer == "openai"
    data = a.to_dict()
    assert data["summarizer"] == "openai"
    (target,) = data["targets"]
    assert (target["summarizer"], target["exact"]) == ("openai", False)
    assert target["llm"]["summarization_calls"] == 1  # LONG alone is compressed
    assert data["time_estimate"]["basis"] == "assumed"
    assert data["time_estimate"]["seconds_per_call"] == 10.0  # README: 10 s for openai


def test_prices_are_usd_per_million_tokens_and_a_value():
    prices = Prices(input=0.5, output=1.5)
    # 2 M input tokens at $0.5/M and 1 M output tokens at $1.5/M.
    assert prices.cost(2_000_000, 1_000_000) == 2.5
    assert prices.cost(1_000_000, 0) == 0.5
    assert Prices(input=3.0).cost(500_000, 10**9) == 1.5
    assert hash(prices) == hash(Prices(0.5, 1.5))  # a frozen value
    with pytest.raises(dataclasses.FrozenInstanceError):
        prices.input = 1.0  # type: ignore[misc]


def test_the_cost_is_given_to_a_hundredth_of_a_cent(tmp_path, counter):
    """``cost_usd`` is rounded to 4 decimals (to_dict's docstring): at $1,001.7 per
    million input tokens and $3,333.3 per million output tokens the exact figure has more."""
    src = write_jsonl(tmp_path / "rows.jsonl", [SHORT, LONG])
    a = analyze(str(src), extractive(), counter=counter)
    prices = Prices(input=1001.7, output=3333.3)
    llm = a.to_dict(prices)["targets"][0]["llm"]
    assert llm["output_tokens"] == 20  # one projected call of a 20-token summary
    exact = (llm["input_tokens"] * 1001.7 + llm["output_tokens"] * 3333.3) / 1_000_000
    assert round(exact, 5) != round(exact, 4)  # the case tells 4 decimals from more
    assert llm["cost_usd"] == round(exact, 4)
    assert a.to_dict(prices)["prices_usd_per_million"] == {"input": 1001.7, "output": 3333.3}


def test_the_counting_gap_counts_rows_on_the_wrong_side_of_each_target():
    """A row fits at the target when its count is at most the target: a row of exactly
    the target fits by that count."""
    gap = CountingGap([100])
    gap.add(100, 101)  # fits by its turns, over by the template
    gap.add(101, 100)  # over by its turns, fits by the template
    gap.add(50, 100)  # fits by both
    gap.add(100, 50)  # fits by both
    gap.add(101, 150)  # over by both
    data = gap.to_dict()
    assert data["rows"] == 5
    assert data["targets"] == [{"target": 100, "under_by_turns_over_by_template": 1,
                                "over_by_turns_under_by_template": 1}]


# --- the timing flags -------------------------------------------------------------------


def test_one_probe_request_and_a_fraction_of_a_second_per_call_are_valid(tmp_path, counter):
    """``--probe`` takes 1 or more requests and ``--seconds-per-call`` any figure above 0:
    1 and 0.5 pass those checks and meet the next ones."""
    src = write_jsonl(tmp_path / "rows.jsonl", [SHORT])
    with pytest.raises(ConfigError, match="--probe times LLM summary requests"):
        analyze(str(src), extractive(), counter=counter, probe_requests=1)
    with pytest.raises(ConfigError, match="--seconds-per-call times LLM summary requests"):
        analyze(str(src), extractive(), counter=counter, seconds_per_call=0.5)
    openai = CompressionConfig(summarizer="openai", **HAND).with_endpoint_flags(  # type: ignore[arg-type]
        ["http://127.0.0.1:9/v1"], "m")
    with pytest.raises(ConfigError, match="not both"):
        analyze(str(src), openai, counter=counter, probe_requests=1, seconds_per_call=0.5)
    a = analyze(str(src), openai, counter=counter, seconds_per_call=0.5)
    assert a.time is not None and a.time.seconds_per_call == 0.5


# --- distill ----------------------------------------------------------------------------


def escaped(n: int) -> str:
    """``words(n)`` in a terminal's colour codes: `control` (distill safe) leaves the
    ``n`` tokens."""
    return "\x1b[31m" + words(n) + "\x1b[0m"


def coloured_row(row_id: str, n: int) -> dict:
    """A row of 20 tokens and a tool output of ``n`` tokens once distilled."""
    return {"id": row_id, "conversations": [
        {"from": "system", "value": words(10)}, {"from": "human", "value": words(5)},
        {"from": "gpt", "value": words(5)}, {"from": "tool", "value": escaped(n)}]}


def test_analyze_counts_and_plans_the_distilled_rows(tmp_path, counter):
    """With --distill safe the planner sees the distilled row (README "Distill"): 100
    tokens, at the target, so it fits; the preview is measured on the row as read, which
    is over the target and would fit once distilled."""
    colours = counter.count(escaped(80)) - 80
    assert colours > 0
    src = write_jsonl(tmp_path / "rows.jsonl", [coloured_row("c", 80)])
    data = analyze(str(src), extractive(distill="safe"), counter=counter).to_dict()
    assert (data["tokens"]["min"], data["tokens"]["max"]) == (100, 100)
    (target,) = data["targets"]
    assert target["metrics"]["summary"]["trajectories_skipped_under_target"] == 1
    assert target["extractive"]["trajectories_still_over_limit"] == 0
    preview = data["distill"]
    assert preview["tool_tokens"] == 80 + colours
    assert preview["rows_over"] == 1  # 100 + colours as read
    assert preview["safe"]["tokens_saved"] == colours
    assert preview["safe"]["rows_no_longer_over"] == 1


def test_without_distill_the_preview_takes_each_row_at_its_count(tmp_path, counter):
    """Without --distill a row is over when its count is above the target: the plain row
    of exactly 100 tokens is not; the coloured one (100 + colours) is."""
    plain = row("plain", "SHGT", [10, 5, 5, 80])
    src = write_jsonl(tmp_path / "rows.jsonl", [plain, coloured_row("c", 80)])
    data = analyze(str(src), extractive(), counter=counter).to_dict()
    preview = data["distill"]
    assert preview["rows_over"] == 1
    assert preview["safe"]["rows_no_longer_over"] == 1
    assert data["tokens"]["max"] == counter.count(escaped(80)) + 20


# --- the time estimate's measured parts --------------------------------------------------

DELAY = 0.05  # seconds added to one stage: some 50 times what a stage of these rows takes


def delayed(function, seconds: float = DELAY):
    """``function`` after a pause of ``seconds``."""
    def slow(*args, **kwargs):
        time.sleep(seconds)
        return function(*args, **kwargs)
    return slow


def test_each_part_of_the_work_is_timed_where_the_estimate_says(tmp_path, counter,
                                                                monkeypatch):
    """Counting a batch (one here), planning each row (2 rows, each target) and
    serializing a summarized row (LONG, at 100 only) each take DELAY more: reading and
    counting hold the one, each target's local work the rest, and nothing exceeds the wall
    time of the call."""
    monkeypatch.setattr(RowCounter, "count", delayed(RowCounter.count))
    monkeypatch.setattr(TrajectoryCompressor, "plan", delayed(TrajectoryCompressor.plan))
    monkeypatch.setattr(jsonio, "dumps", delayed(jsonio.dumps))
    src = write_jsonl(tmp_path / "rows.jsonl", [SHORT, LONG])
    start = time.perf_counter()
    a = analyze(str(src), extractive(), targets=[100, 200], counter=counter)
    wall = time.perf_counter() - start
    estimate = a.time
    assert estimate is not None and estimate.basis == "measured"
    assert [t.summarized for t in estimate.targets] == [1, 0]
    read_and_count = estimate.read_seconds
    assert DELAY <= read_and_count <= wall
    at_100, at_200 = (t.local_seconds - read_and_count for t in estimate.targets)
    # Two plans and one serialized row; two plans.
    assert at_100 >= 3 * DELAY and at_200 >= 2 * DELAY
    assert read_and_count + at_100 + at_200 <= wall
    for t in estimate.targets:
        assert t.seconds == t.local_seconds <= wall


def test_a_sample_is_read_whole_and_its_estimate_scaled_to_the_input(tmp_path, counter):
    """README: on a sample every record is read (each is drawn), and the estimate also
    gives the whole input, with its record count; without --sample-percent there is no
    whole input apart from the rows timed."""
    rows = [row(f"r{i}", "SHGTHG", [10, 5, 5, 5, 5, 5]) for i in range(12)]
    src = write_jsonl(tmp_path / "rows.jsonl", rows)
    sampled = analyze(str(src), extractive(), counter=counter, sample_percent=50)
    assert 0 < sampled.rows < 12
    estimate = sampled.time
    assert estimate is not None and estimate.whole_input_records == 12
    (t,) = estimate.targets
    assert t.whole_input_seconds is not None and t.whole_input_seconds > t.local_seconds
    whole = analyze(str(src), extractive(), counter=counter).time
    assert whole is not None and whole.whole_input_records is None
    assert whole.targets[0].whole_input_seconds is None


def test_an_unchanged_rows_planning_is_timed_and_bounded_by_the_wall(tmp_path, counter):
    """No row to summarize: the local work is reading, counting and planning, all of it
    within the call."""
    src = write_jsonl(tmp_path / "rows.jsonl", [SHORT])
    start = time.perf_counter()
    estimate = analyze(str(src), extractive(), counter=counter).time
    wall = time.perf_counter() - start
    assert estimate is not None
    (t,) = estimate.targets
    assert 0 < estimate.read_seconds < t.local_seconds <= wall


def test_an_llms_local_work_leaves_out_the_extractive_summaries(tmp_path, counter,
                                                                monkeypatch):
    """Each extractive summary takes half a second more: an LLM's estimate replaces them
    with the model's wait, so the local work besides reading and counting (planning two
    rows, assembling one: a millisecond or so) stays well under that, even on a loaded
    machine."""
    real = ExtractiveSummarizer.summarize

    async def slow(self, request):
        time.sleep(0.5)
        return await real(self, request)

    monkeypatch.setattr(ExtractiveSummarizer, "summarize", slow)
    src = write_jsonl(tmp_path / "rows.jsonl", [SHORT, LONG])
    openai = CompressionConfig(summarizer="openai", **HAND).with_endpoint_flags(  # type: ignore[arg-type]
        ["http://127.0.0.1:9/v1"], "m")
    start = time.perf_counter()
    estimate = analyze(str(src), openai, counter=counter, seconds_per_call=2.0).time
    wall = time.perf_counter() - start
    assert estimate is not None
    (t,) = estimate.targets
    assert (t.summarized, t.calls) == (1, 1)
    assert 0 <= t.local_seconds - estimate.read_seconds < 0.5
    assert wall >= 0.5  # the summary was built
    assert t.wait_seconds == 1 / 50 * 2.0  # 1 call, 50 at once (the default), 2 s each
