"""`analyze`'s distill preview (§18) and `--probe`'s sample, pinned on hand-made rows.

The preview's figures are worked out by hand: the tool outputs below distill to texts
README "Distill" states (`control` strips the escape sequences, `json` lays a pretty-printed
object out on one line, every key and number as written), and the savings are the real
tokenizer's counts of the texts before and after.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time

import pytest

from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import generated_rows
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import FatalSummaryError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.dialects import detect
from trajectory_compressor.engine.compressor import TrajectoryCompressor
from trajectory_compressor.engine.options import RunOptions
from trajectory_compressor.inspect.distill_preview import DistillPreview
from trajectory_compressor.inspect.probe import ProbeRow, ProbeSample, probe

COLOURED = "\x1b[31mERROR\x1b[0m: disk /dev/sda1 full"
PLAIN = "ERROR: disk /dev/sda1 full"  # `control`: the escape sequences removed
PRETTY = '{\n  "name": "build",\n  "status": "ok",\n  "steps": [\n    1,\n    2\n  ]\n}'
COMPACT = '{"name":"build","status":"ok","steps":[1,2]}'  # `json` of `all`: one line
# `json` of `safe` (lossless, §18): the same line under a header that says how to lay it out
SAFE_JSON = "⟪json indent 2⟫\n" + COMPACT
UNTOUCHED = "plain output"  # nothing to distill
TARGET = 1000


def tool(text: str) -> dict:
    return {"from": "tool", "value": text}


def talk(role: str, text: str) -> dict:
    return {"from": role, "value": text}


def hand_preview(counter: TokenCounter) -> tuple[DistillPreview, dict[str, int]]:
    """Four rows: one over the target by less than `control` saves on it (it would need
    no summary), one far over, one over without tool turns, one under."""
    count = counter.count
    figures = {"control": count(COLOURED) - count(PLAIN),
               "json": count(PRETTY) - count(COMPACT),
               "json_safe": count(PRETTY) - count(SAFE_JSON),
               "tool": count(COLOURED) + count(PRETTY) + count(UNTOUCHED)}
    assert figures["control"] > 0 and figures["json"] > figures["json_safe"] > 0
    preview = DistillPreview(TARGET)
    preview.add([talk("human", "check the disk"), talk("gpt", "df -h"), tool(COLOURED),
                 talk("gpt", "it is full")], TARGET + figures["control"], counter.count_many)
    preview.add([talk("human", "build"), tool(PRETTY)], 5 * TARGET, counter.count_many)
    preview.add([talk("human", "no tools"), talk("gpt", "none")], 2 * TARGET,
                counter.count_many)
    preview.add([talk("human", "echo"), tool(UNTOUCHED)], TARGET // 2, counter.count_many)
    return preview, figures


def test_the_preview_figures_of_each_level(counter):
    preview, f = hand_preview(counter)

    def level(json_saved: int) -> dict:
        saved = f["control"] + json_saved
        return {"tokens_saved": saved, "share_of_tool_tokens": round(saved / f["tool"], 4),
                "turns": 2, "rows_no_longer_over": 1,
                "saved_by_rule": {"control": f["control"], "json": json_saved}}

    # `safe` keeps the layout in a header line; `all` drops it.
    assert preview.to_dict() == {"target_max_tokens": TARGET, "tool_tokens": f["tool"],
                                 "rows_over": 3, "safe": level(f["json_safe"]),
                                 "all": level(f["json"])}
    saved = f["control"] + f["json"]
    # The share is rounded to 4 places, not more (it is a fraction of thirds and sevenths
    # here, with more places to cut).
    assert round(saved / f["tool"], 4) != round(saved / f["tool"], 5)


def test_the_preview_text_block(counter):
    preview, f = hand_preview(counter)
    saved = f["control"] + f["json"]
    lines = preview.lines()
    assert lines[0] == (f"Distill: tool outputs hold {f['tool']:,} tokens; 3 rows are over "
                        f"{TARGET:,}")
    rows = {line.split()[1]: line.split()[2:] for line in lines
            if line.startswith("  --distill ")}
    safe = f["control"] + f["json_safe"]
    assert rows == {"safe": [f"{safe:,}", f"{safe / f['tool']:.1%}", "1"],
                    "all": [f"{saved:,}", f"{saved / f['tool']:.1%}", "1"]}
    by_rule = [line for line in lines if "by rule:" in line]
    assert by_rule == [f"  safe by rule: control {f['control']:,}, json {f['json_safe']:,}",
                       f"  all by rule: control {f['control']:,}, json {f['json']:,}"]
    assert all(len(line) <= 80 for line in lines)


def test_a_level_that_saves_nothing_has_no_by_rule_line(counter):
    preview = DistillPreview(TARGET)
    preview.add([talk("human", "echo"), tool(UNTOUCHED)], 2 * TARGET, counter.count_many)
    assert preview.rows_over == 1
    assert not [line for line in preview.lines() if "by rule" in line]
    assert preview.to_dict()["safe"] == {"tokens_saved": 0, "share_of_tool_tokens": 0.0,
                                         "turns": 0, "rows_no_longer_over": 0,
                                         "saved_by_rule": {}}


def test_a_one_token_output_distilled_away_is_all_of_the_tool_tokens(counter):
    """A bell alone is one token, and `control` removes it: 100% of the tool tokens (the
    share divides by the tool tokens, never by less than 1)."""
    assert counter.count("\x07") == 1
    preview = DistillPreview(10)
    preview.add([talk("human", "ring"), tool("\x07")], 11, counter.count_many)
    data = preview.to_dict()
    assert data["tool_tokens"] == 1
    assert data["safe"]["tokens_saved"] == 1 and data["safe"]["share_of_tool_tokens"] == 1.0
    assert data["safe"]["rows_no_longer_over"] == 1  # 11 - 1 <= 10
    (safe,) = [line for line in preview.lines() if line.startswith("  --distill safe")]
    assert safe.split()[2:] == ["1", "100.0%", "1"]


def test_the_probe_sample_counts_what_it_was_offered():
    sample = ProbeSample(2)
    for i in range(7):
        sample.offer(i)  # type: ignore[arg-type] - any object stands for a row
    assert sample.offered == 7 and len(sample.rows) == 2


def test_the_probe_sample_keeps_each_row_equally_likely():
    """A reservoir of one over four rows: each row is the one kept a quarter of the time
    (over 4,000 seeds; a sampler that favoured the first rows keeps row 0 40% of them)."""
    kept = [0, 0, 0, 0]
    for seed in range(4000):
        sample = ProbeSample(1, seed=seed)
        for i in range(4):
            sample.offer(i)  # type: ignore[arg-type]
        kept[sample.rows[0]] += 1  # type: ignore[index]
    for n in kept:
        assert 850 <= n <= 1150, kept  # 1,000 expected; 5 standard deviations is 137


def test_the_probe_sample_defaults_to_the_runs_seed():
    """Without a seed the sample is the one a run with the default ``--seed`` draws."""
    default_seed = RunOptions().seed
    rows = list(range(50))
    a, b = ProbeSample(3), ProbeSample(3, seed=default_seed)
    for row in rows:
        a.offer(row)  # type: ignore[arg-type]
        b.offer(row)  # type: ignore[arg-type]
    assert a.rows == b.rows
    other = ProbeSample(3, seed=default_seed + 1)
    for row in rows:
        other.offer(row)  # type: ignore[arg-type]
    assert other.rows != a.rows  # the seed decides the draw (else the check says nothing)


@pytest.mark.parametrize("size", [1, 3])
def test_a_probe_sample_never_keeps_a_row_twice(size):
    sample = ProbeSample(size, seed=random.Random(size).randrange(1000))
    for i in range(100):
        sample.offer(i)  # type: ignore[arg-type]
    assert len(set(sample.rows)) == size


# -- the probe's requests (`inspect.probe.probe`), against the loopback fake server --------

def probe_config(url: str, **more: object) -> CompressionConfig:
    return CompressionConfig(summarizer="openai", target_max_tokens=600,
                             summary_target_tokens=120, max_concurrent_requests=4,
                             max_retries=1, retry_delay=0.0,
                             **more).with_endpoint_flags([url], "m")  # type: ignore[arg-type]


def rows_to_probe(config: CompressionConfig, counter: TokenCounter, n: int) -> list[ProbeRow]:
    """The first ``n`` generated rows the planner would summarize, each with its plan."""
    rows = generated_rows(1)
    dialect = detect(rows, config)
    planner = TrajectoryCompressor(config, summarizer=ExtractiveSummarizer(counter.count),
                                   counter=counter)
    out = []
    for row in rows:
        turns = dialect.turns(row)
        plan = planner.plan(turns, None, dialect)
        if plan.action == "compress":
            out.append(ProbeRow(row, turns, plan, dialect))
    assert len(out) >= n
    return out[:n]


def test_a_probe_neither_reads_nor_writes_the_summary_cache(tmp_path, counter):
    """A cache configured for the run is left alone: the probe creates no cache file, and
    a second probe of the same regions sends its requests again (a cache would answer)."""
    cache = tmp_path / "cache" / "summaries.sqlite"
    with FakeLLMServer().in_thread() as server:
        config = probe_config(server.url, cache_enabled=True, cache_path=str(cache))
        rows = rows_to_probe(config, counter, 2)
        start = time.perf_counter()
        first = asyncio.run(probe(config, counter, rows))
        wall = time.perf_counter() - start
        second = asyncio.run(probe(config, counter, rows))
        assert server.requests == 4
    # Starting the summarizer (an HTTP session here) is part of the probe's own time.
    assert 0 <= first.startup_seconds <= wall
    assert (first.rows, len(first.seconds), second.rows, len(second.seconds)) == (2, 2, 2, 2)
    assert not first.failures and not second.failures
    assert not cache.exists() and not cache.parent.exists()


def test_a_rejected_request_stops_the_probes_other_requests(counter):
    """The first request is refused (HTTP 401, a fatal error); the three others would
    stall for 60 s. The probe raises the refusal at once, and the others are stopped and
    done by then (none left pending on the loop)."""
    with FakeLLMServer(script=["unauthorized"], faults={"stall": 1.0},
                       stall_seconds=60).in_thread() as server:
        config = probe_config(server.url)
        rows = rows_to_probe(config, counter, 4)

        async def run() -> tuple[BaseException, list[asyncio.Task], float]:
            start = time.perf_counter()
            try:
                await probe(config, counter, rows)
            except BaseException as exc:  # what it raises is the check
                others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                return exc, others, time.perf_counter() - start
            raise AssertionError("the probe did not raise")

        error, pending, seconds = asyncio.run(run())
        assert server.outcomes["unauthorized"] == 1
    assert isinstance(error, FatalSummaryError) and "HTTP 401" in str(error)
    assert pending == []
    # Not the 60 s the stalled requests would take (a wide margin for a loaded machine:
    # the refusal takes a fraction of a second).
    assert seconds < 30


def test_a_probe_row_is_a_value(counter):
    """Rows kept in the sample are handed to the probe as they were drawn."""
    with FakeLLMServer().in_thread() as server:
        (row,) = rows_to_probe(probe_config(server.url), counter, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.plan = None  # type: ignore[misc]


def test_a_row_at_the_target_is_not_over_it(counter):
    """Over means more than the target: a row of exactly the target's tokens is not
    counted (and a distilled output cannot make it "no longer over")."""
    preview = DistillPreview(TARGET)
    preview.add([talk("human", "check"), tool(COLOURED)], TARGET, counter.count_many)
    preview.add([talk("human", "check"), tool(COLOURED)], TARGET + 1, counter.count_many)
    data = preview.to_dict()
    assert data["rows_over"] == 1
    assert data["safe"]["rows_no_longer_over"] == data["all"]["rows_no_longer_over"] == 1
