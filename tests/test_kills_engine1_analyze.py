"""`analyze`'s JSON (its distill preview, a probe with nothing to send, the counting gap),
and the remedies' second-pass check on a projection: on hand-made rows whose figures
are worked out here.

Rows are made of "word" texts: ``words(n)`` is exactly ``n`` tokens with the bundled
tokenizer, and the default counting (``turns``) sums the turns' counts.
"""

from __future__ import annotations

import json

from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import row, words, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.inspect.analyze import CountingGap, analyze

ESCAPED = "\x1b[1mok\x1b[0m"  # `control` (distill safe) strips the two escape sequences


def openai_config(url: str = "http://127.0.0.1:9/v1", **more: object) -> CompressionConfig:
    return CompressionConfig(summarizer="openai", **more).with_endpoint_flags(  # type: ignore[arg-type]
        [url], "m")


def test_analyze_json_carries_the_distill_preview(tmp_path, counter):
    rows = [{"id": "a", "conversations": [
        {"from": "human", "value": words(5)}, {"from": "gpt", "value": words(5)},
        {"from": "tool", "value": ESCAPED}, {"from": "gpt", "value": words(5)}]}]
    src = write_jsonl(tmp_path / "rows.jsonl", rows)
    a = analyze(str(src), CompressionConfig(summarizer="extractive", target_max_tokens=100,
                                            summary_target_tokens=20), counter=counter)
    preview = a.to_dict()["distill"]
    assert preview is not None
    saved = counter.count(ESCAPED) - counter.count("ok")
    assert saved > 0
    assert (preview["target_max_tokens"], preview["tool_tokens"], preview["rows_over"]) == (
        100, counter.count(ESCAPED), 0)
    assert preview["safe"]["tokens_saved"] == preview["all"]["tokens_saved"] == saved
    assert preview["safe"]["saved_by_rule"] == {"control": saved}
    json.dumps(a.to_dict())  # JSON-able as a whole


def test_a_probe_with_no_row_to_summarize_sends_nothing_and_says_zero_rows(tmp_path, counter):
    """Every row under the target: no region to send, so the probe is of 0 rows and 0
    calls (and the estimate still says it was asked for)."""
    src = write_jsonl(tmp_path / "short.jsonl", [row("short", "SHGTHG", [10, 5, 5, 5, 5, 5])])
    with FakeLLMServer().in_thread() as server:
        config = openai_config(server.url, target_max_tokens=100, summary_target_tokens=20)
        a = analyze(str(src), config, counter=counter, probe_requests=2)
        assert server.requests == 0
    assert a.time is not None and a.time.probe is not None
    assert (a.time.probe.rows, a.time.probe.seconds, a.time.probe.failures) == (0, (), ())
    assert a.to_dict()["time_estimate"]["probe"]["rows"] == 0


def test_the_counting_gap_is_template_minus_turns_per_row():
    gap = CountingGap([105, 195])
    gap.add(100, 110)  # under 105 by the turns, over it by the template
    gap.add(200, 190)  # over 195 by the turns, under it by the template
    gap.add(50, 50)
    data = gap.to_dict()
    assert data["rows"] == 3
    assert (data["template_minus_turns"]["min"], data["template_minus_turns"]["median"],
            data["template_minus_turns"]["max"]) == (-10, 0, 10)
    assert data["targets"] == [
        {"target": 105, "under_by_turns_over_by_template": 1,
         "over_by_turns_under_by_template": 0},
        {"target": 195, "under_by_turns_over_by_template": 0,
         "over_by_turns_under_by_template": 1}]


# -- the remedies' check of the second pass on an LLM projection -------------------------

def test_eliding_is_offered_for_a_projection_when_the_kept_middle_holds_the_bulk(tmp_path,
                                                                                   counter):
    """Turns S H G T | G T G T(2,000) | T G, the last 2 protected: the middle is 4-7. At
    2,710 tokens, over 1,500 by 1,210, the region runs from 4 until it covers that plus
    the summary's 100 (at turn 7), and stops before the tool turns at its end: turns 4-5
    (610 tokens). Projected at a
    100-token summary the row is 2,200 tokens, over; the 2,000-token output it kept (turn
    7) can give the 700 missing, so `--over-limit-strategy elide_tool_outputs` brings it
    under. The 300-token output of the region is gone with the summary: it cannot help."""
    sizes = [10, 10, 10, 10, 310, 300, 20, 2000, 20, 20]
    src = write_jsonl(tmp_path / "one.jsonl", [row("r", "SHGTGTGTTG", sizes)])
    settings = {"target_max_tokens": 1500, "summary_target_tokens": 100,
                "protect_last_n_turns": 2, "add_summary_notice": False}
    keep = analyze(str(src), openai_config(**settings), counter=counter)
    (target,) = keep.targets
    assert target.llm.trajectories_still_over_limit == 1
    assert target.llm.total_tokens_after == sum(sizes) - 610 + 100
    assert target.fixes is not None
    alone = {e["flags"]: e["rows_under"] for e in target.fixes.to_dict()["alone"]}
    assert alone["--over-limit-strategy elide_tool_outputs"] == 1
    # What the remedy promises is what a run with it projects.
    elide = analyze(str(src), openai_config(over_limit_strategy="elide_tool_outputs",
                                            **settings), counter=counter)
    assert elide.targets[0].llm.trajectories_still_over_limit == 0
