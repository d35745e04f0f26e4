"""Round 6 of the mutation kills for `engine.compressor` (issue 26, item 5): the fallback's
error kinds, the deferred cache write, the repair request's contents, the ranking of a
repair against the first summary (§15, issue 23), and the usage of a row that grew.

The rows are `tests.test_summary_fidelity.fact_row` (eight hand-written facts in the
region, turns 4-11; the tail names three of them again) and `fixtures_runs.HAND_*`; the
backend is a scripted `Summarizer` that answers each request with the next text.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.fixtures_runs import HAND_CONFIG, row, words
from tests.test_summary_fidelity import fact_row
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.summary import (
    Summarizer,
    Summary,
    SummaryFailed,
    SummaryRequest,
    SummaryUsage,
)
from trajectory_compressor.engine.compressor import RowResult, TrajectoryCompressor

FACTS_CONFIG = {"target_max_tokens": 150, "summary_target_tokens": 60,
                "add_summary_notice": False, "summary_references": "off"}


class Scripted(Summarizer):
    """Answers the n-th request with the n-th reply: a text (an LLM summary costing one
    call) or an exception to raise; records every request and every commit."""

    def __init__(self, *replies: str | BaseException) -> None:
        self.replies = list(replies)
        self.requests: list[SummaryRequest] = []
        self.committed: list[Summary] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        request.usage.api_calls += 1
        return Summary(reply, "llm", SummaryUsage(api_calls=1), commit=self.committed.append)


def compress(counter: Any, summarizer: Summarizer, the_row: dict, **settings: Any
             ) -> RowResult:
    config = CompressionConfig(summarizer="extractive", **settings)
    compressor = TrajectoryCompressor(config, summarizer=summarizer, counter=counter)
    return asyncio.run(compressor.compress_row(the_row))


def facts(counter: Any, summarizer: Summarizer, **settings: Any) -> RowResult:
    return compress(counter, summarizer, fact_row(), **{**FACTS_CONFIG, **settings})


def summary_text(result: RowResult) -> str:
    [text] = [t["value"] for t in result.turns if t["value"].startswith("[CONTEXT SUMMARY]")]
    return text


# -- the fallback names the failure ---------------------------------------------------------

def test_a_backend_failing_without_saying_how_counts_one_other_error(counter):
    """A backend that raised with no error counted: one error of kind "other"."""
    result = facts(counter, Scripted(SummaryFailed("down", SummaryUsage(api_calls=1))))
    m = result.metrics
    assert m.summary_source == "fallback"
    assert (m.summarization_errors, m.errors_by_kind) == (1, {"other": 1})


def test_errors_a_backend_counted_without_a_kind_are_of_kind_other(counter):
    result = facts(counter, Scripted(SummaryFailed("down", SummaryUsage(api_calls=1, errors=1))))
    m = result.metrics
    assert (m.summarization_errors, m.errors_by_kind) == (1, {"other": 1})


def test_a_backend_failing_with_a_named_error_counts_it_once(counter):
    usage = SummaryUsage(api_calls=1)
    usage.failed("timeout")
    result = facts(counter, Scripted(SummaryFailed("slow", usage)))
    m = result.metrics
    assert (m.summarization_errors, m.errors_by_kind) == (1, {"timeout": 1})


def test_a_summary_that_cannot_be_cut_to_size_is_a_too_long_error(counter):
    """One endless sentence (no boundary to cut at) far over the 60-token budget."""
    result = facts(counter, Scripted(" ".join(["word"] * 400)))
    m = result.metrics
    assert m.summary_source == "fallback"
    assert m.summarization_api_calls == 1
    assert (m.summarization_errors, m.errors_by_kind) == (1, {"too_long": 1})


# -- the deferred cache write ---------------------------------------------------------------

def test_a_model_summary_through_the_bars_is_committed_as_it_is(counter):
    """No bar set: the first LLM summary is accepted, and its backend's deferred write
    gets it (Summary.commit)."""
    backend = Scripted("Checked src/app/main.py and config.yaml.")
    result = facts(counter, backend)
    assert result.metrics.summary_source == "llm"
    [committed] = backend.committed
    assert committed.text == summary_text(result)
    assert committed.source == "llm"


# -- the repair request ---------------------------------------------------------------------

HALF = "Checked src/app/main.py and config.yaml and req_8f2k91 and KeyError."  # 4 of 8
MADE_UP = " Wrote /data/shards/x.bin too."


def test_a_summary_exactly_at_the_bar_asks_for_no_missing_items(counter):
    """Kept 4 of 8 facts (0.5) against min_fidelity 0.5: through that bar; its one made-up
    path fails max_invented 0, so the repair names the invented path and no missing one."""
    backend = Scripted(HALF + MADE_UP, HALF)
    result = facts(counter, backend, min_fidelity=0.5, max_invented=0)
    assert len(backend.requests) == 2
    repair = backend.requests[1].repair
    assert repair is not None
    assert repair.missing == ()
    assert repair.invented == ("/data/shards/x.bin",)
    assert result.metrics.fidelity_repair and not result.metrics.low_fidelity


def test_the_invented_cap_reason_names_the_first_three_items(counter):
    made_up = ("Wrote /data/shards/a9.bin /data/shards/b7.bin /data/shards/c3.bin "
               "/data/shards/d1.bin today.")
    backend = Scripted(made_up, made_up)
    result = facts(counter, backend, max_invented=0, on_low_fidelity="uncompressed")
    m = result.metrics
    assert m.low_fidelity and not m.was_compressed
    assert m.low_fidelity_reason == (
        "4 invented item(s) (/data/shards/a9.bin, /data/shards/b7.bin, "
        "/data/shards/c3.bin), over max_invented 0")


# -- ranking the repair against the first summary (both under the bars: kept as is) ---------

def test_fewer_invented_items_over_the_cap_outrank_more_facts(counter):
    """Cap 1, bar 0.9 (both fail it): the first keeps 4 of 8 facts but invents 2 (one over
    the cap), the repair keeps 1 and invents none: the repair ranks higher."""
    first = ("Checked config.yaml KeyError user_id 512 MB. Wrote /data/shards/x.bin and "
             "/data/shards/y.bin.")
    second = "Checked config.yaml."
    backend = Scripted(first, second)
    result = facts(counter, backend, min_fidelity=0.9, max_invented=1)
    assert result.metrics.low_fidelity
    assert summary_text(result).endswith(second)
    assert result.metrics.fidelity.invented == 0


def test_under_the_cap_more_facts_outrank_fewer_invented_items(counter):
    """Cap 2, bar 0.9: the first keeps 1 fact and invents none, the repair keeps 4 and
    invents 1, both within the cap: the one with more facts ranks higher."""
    first = "Checked config.yaml."
    second = "Checked config.yaml KeyError user_id 512 MB. Wrote /data/shards/x.bin."
    backend = Scripted(first, second)
    result = facts(counter, backend, min_fidelity=0.9, max_invented=2)
    assert result.metrics.low_fidelity
    assert summary_text(result).endswith(second)
    assert result.metrics.fidelity.invented == 1


# -- a row the summary would make longer ----------------------------------------------------

# fixtures_runs: 205 tokens; its region (20 tokens) plus a 30-token notice grows the row.
NOTICE = {"add_summary_notice": True, "summary_notice_text": " " + words(30),
          "summary_target_tokens": 10}
GROWS = row("grows", "SHGTGTGTGT", [10, 5, 5, 5, 10, 10, 40, 40, 40, 40])


def test_a_row_that_grew_reports_the_calls_its_summary_cost(counter):
    """The failed row still reports what its summary cost: one call (and its answer, over
    the 10-token budget once prefixed, counted as a too-long error)."""
    result = compress(counter, Scripted("Short one."), GROWS, **{**HAND_CONFIG, **NOTICE})
    m = result.metrics
    assert m.failed and "longer than the original" in m.error
    assert (m.summarization_api_calls, m.summarization_errors) == (1, 1)


# -- distill rewrites tool turns only (§18) -------------------------------------------------

PRETTY = ('{\n    "name": "build",\n    "status": "ok",\n    "files": [\n        "a.py",\n'
          '        "b.py"\n    ]\n}')


def test_distill_rewrites_the_tool_turn_and_leaves_the_same_text_elsewhere(counter):
    """SPEC §18: "rewrites tool/observation turns only": the same pretty JSON is compacted
    in the tool turn and left as written in the assistant's."""
    the_row = {"conversations": [{"from": "system", "value": "sys"},
                                 {"from": "human", "value": "go"},
                                 {"from": "gpt", "value": PRETTY},
                                 {"from": "tool", "value": PRETTY}]}
    result = compress(counter, Scripted(), the_row, distill="safe")
    values = [t["value"] for t in result.turns]
    # Lossless (§18): the compact JSON under a header that says how to indent it again.
    assert values == ["sys", "go", PRETTY,
                      '⟪json indent 4⟫\n{"name":"build","status":"ok","files":["a.py","b.py"]}']
    assert result.metrics.distill is not None and result.metrics.distill.turns == 1


# -- the deadline cuts the repair -----------------------------------------------------------

class SlowRepair(Scripted):
    """Answers the first request; the repair costs one call, then outlasts the deadline."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        if request.repair is None:
            return await super().summarize(request)
        self.requests.append(request)
        request.usage.api_calls += 1
        await asyncio.sleep(5)
        raise AssertionError("the deadline should have cut this")


def test_a_row_cut_during_its_repair_reports_both_requests(counter):
    backend = SlowRepair("Checked config.yaml.")
    result = facts(counter, backend, min_fidelity=0.9, per_trajectory_timeout=0.5)
    m = result.metrics
    assert m.failed and not m.was_compressed
    assert len(backend.requests) == 2
    assert m.summarization_api_calls == 2


# -- the configured secret never reaches a fallback or extractive summary -------------------

SECRET = "hunter2secretdir"


def secret_row() -> dict:
    the_row = fact_row()
    turn = the_row["conversations"][4]
    turn["value"] = f"Opened /srv/{SECRET}/app.py first. " + turn["value"]
    return the_row


def test_the_fallback_summary_carries_no_configured_secret(counter, monkeypatch):
    monkeypatch.setenv("KILLS6_KEY", SECRET)
    result = compress(counter, Scripted(SummaryFailed("down", SummaryUsage())), secret_row(),
                      **{**FACTS_CONFIG, "summary_target_tokens": 120}, api_key_env="KILLS6_KEY")
    assert result.metrics.summary_source == "fallback"
    text = summary_text(result)
    assert "/srv/" in text and SECRET not in text


def test_the_extractive_summary_after_a_low_fidelity_one_carries_no_secret(counter,
                                                                          monkeypatch):
    monkeypatch.setenv("KILLS6_KEY", SECRET)
    backend = Scripted("Checked config.yaml.", "Checked config.yaml.")
    settings = {**FACTS_CONFIG, "summary_target_tokens": 120}
    result = compress(counter, backend, secret_row(), **settings, api_key_env="KILLS6_KEY",
                      min_fidelity=0.9, on_low_fidelity="extractive")
    assert result.metrics.low_fidelity and result.metrics.summary_source == "extractive"
    text = summary_text(result)
    assert "/srv/" in text and SECRET not in text


# -- metrics of a row whose dialect joins the summary to the turn before it -----------------

def test_metrics_describe_an_alternating_row_as_written(counter):
    """LLaMA-Factory ShareGPT rows alternate: the summary joins the observation before the
    region, so the written row has one turn fewer than the assembled one; its metrics
    count the row as written (per turn: the sum of its turns' counts)."""
    from trajectory_compressor.dialects import detect

    conv = [{"from": "human", "value": "Fix it."}]
    for i in range(6):
        conv += [{"from": "function_call",
                  "value": '{"name": "run", "arguments": {"i": ' + str(i) + "}}"},
                 {"from": "observation", "value": words(60)}]
    conv += [{"from": "gpt", "value": "Done."}]
    the_row = {"conversations": conv, "system": "You are an agent."}
    config = CompressionConfig(summarizer="extractive", target_max_tokens=300,
                               summary_target_tokens=40, add_summary_notice=False)
    dialect = detect([the_row], config)
    compressor = TrajectoryCompressor(config, counter=counter, dialect=dialect)
    result = asyncio.run(compressor.compress_row(the_row))
    m = result.metrics
    before = ["You are an agent."] + [t["value"] for t in conv]
    original = sum(counter.count_many(before))
    written = [t["value"] for t in dialect.turns(result.row)]
    joined = [v for v in written if "\n\n[CONTEXT SUMMARY]" in v]
    assert len(joined) == 1
    compressed = sum(counter.count_many(written))
    assert (m.original_turns, m.original_tokens) == (15, original)
    assert m.compressed_turns == len(written) == len(result.row["conversations"]) + 1
    assert m.turns_removed == 15 - len(written)
    assert m.compressed_tokens == compressed
    assert m.tokens_saved == original - compressed
    assert m.compression_ratio == compressed / original
    assert not m.still_over_limit and compressed <= 300


# -- usage, truncation, the references line -------------------------------------------------

def test_the_fallback_reports_the_backends_retries(counter):
    usage = SummaryUsage(api_calls=3, retries=2)
    usage.failed("timeout")
    result = facts(counter, Scripted(SummaryFailed("slow", usage)))
    assert (result.metrics.summarization_api_calls, result.metrics.retries) == (3, 2)


def test_a_summary_over_its_budget_is_cut_at_a_sentence_and_marked_truncated(counter):
    """Forty short sentences, far over 60 tokens x the tolerance: cut at a sentence end
    that fits the 60 tokens, and the row says its summary was truncated."""
    sentences = [f"Step {i} checked config.yaml." for i in range(40)]
    result = facts(counter, Scripted(" ".join(sentences)))
    m = result.metrics
    assert m.summary_source == "llm" and m.summary_truncated
    text = summary_text(result)
    assert text.startswith("[CONTEXT SUMMARY]: Step 0 checked config.yaml.")
    assert text.endswith(".") and "Step 39" not in text
    assert counter.count(text) <= 60


class Cached(Scripted):
    async def summarize(self, request: SummaryRequest) -> Summary:
        summary = await super().summarize(request)
        summary.source = "cache"
        return summary


def test_a_cached_summary_is_not_written_to_the_cache_again(counter):
    backend = Cached("Checked src/app/main.py and config.yaml.")
    result = facts(counter, backend)
    assert result.metrics.summary_source == "cache"
    assert backend.committed == []


def test_the_tail_references_line_names_only_the_tail_items_the_summary_lacks(counter):
    """summary_references "tail": the summary keeps one of the three facts the tail names
    again (src/app/main.py); the line adds the other two, and none of the region-only
    facts (config.yaml, KeyError, ...)."""
    result = facts(counter, Scripted("Checked src/app/main.py."), summary_references="tail")
    text = summary_text(result)
    assert "req_8f2k91" in text and "localhost:8080" in text
    assert "config.yaml" not in text and "KeyError" not in text


def test_failed_and_unchanged_default_to_the_compressors_dialect(counter):
    compressor = TrajectoryCompressor(CompressionConfig(summarizer="extractive"),
                                      counter=counter)
    the_row = fact_row()
    turns = the_row["conversations"]
    plan = compressor.plan(turns)
    result = compressor.failed(the_row, turns, plan, "boom")
    assert result.metrics.error == "boom"
    assert result.row["conversations"] == turns


CHATML = ("{%- for m in messages -%}"
          "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{%- endfor -%}")


def test_a_row_is_planned_on_its_chat_template_count(tmp_path, counter):
    """token_counting chat_template: the row's count includes the template's markup (a
    role line and two markers per turn), more than its turns' plain counts."""
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    config = CompressionConfig(summarizer="extractive", token_counting="chat_template",
                               chat_template=str(template))
    compressor = TrajectoryCompressor(config, counter=counter)
    the_row = fact_row()
    result = asyncio.run(compressor.compress_row(the_row))
    plain = sum(counter.count_many([t["value"] for t in the_row["conversations"]]))
    original = result.metrics.original_tokens
    assert original > plain + 2 * len(the_row["conversations"])
    assert original == compressor.rows.total(compressor.dialect, the_row)


def test_over_the_limit_is_judged_on_the_template_count_of_the_row_as_written(tmp_path,
                                                                            counter):
    """Target 220 with the chat template: the planner's estimate (the summary's plain
    count) fits, but the written row, the summary turn's markup included, does not: it is
    still over the limit, judged on the row as written."""
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    config = CompressionConfig(summarizer="extractive", token_counting="chat_template",
                               chat_template=str(template), target_max_tokens=220,
                               summary_target_tokens=60, add_summary_notice=False)
    compressor = TrajectoryCompressor(config, counter=counter)
    result = asyncio.run(compressor.compress_row(fact_row()))
    m = result.metrics
    assert m.was_compressed
    assert m.compressed_tokens == compressor.rows.total(compressor.dialect, result.row)
    assert m.compressed_tokens > 220 and m.still_over_limit


def test_a_summary_exactly_as_long_as_its_region_is_kept(counter):
    """The row fails only when the summary and notice make it LONGER than it was
    (README: summary_grew): a 10-token notice and a summary that together weigh exactly
    the region's 20 tokens give a compressed row of the original 205 tokens."""
    settings = {**HAND_CONFIG, **NOTICE, "summary_notice_text": " " + words(10)}
    result = compress(counter, Scripted("Ran ok ok ok."), GROWS, **settings)
    m = result.metrics
    system = GROWS["conversations"][0]["value"]
    delta = counter.count(system + " " + words(10)) - counter.count(system)
    assert result.plan.region_tokens == 20
    assert counter.count(summary_text(result)) + delta == 20
    assert not m.failed and m.was_compressed and m.summary_source == "llm"
    assert (m.original_tokens, m.compressed_tokens, m.tokens_saved) == (205, 205, 0)


def test_a_summary_cut_to_make_room_for_its_references_is_marked_truncated(counter):
    """Eight sentences, 53 of the 60 tokens: too little room for the references line, so
    the summary is cut at a sentence end to leave a quarter of the budget for it
    (`add_references`); the row says its summary was truncated."""
    text = " ".join(f"Step {i} went fine." for i in range(8))
    result = facts(counter, Scripted(text), summary_references="tail")
    written = summary_text(result)
    assert "Step 7" not in written and written.endswith("src/app/main.py; req_8f2k91")
    assert result.metrics.summary_truncated
