"""Invented facts (issue 23): what a summary states that its row does not, by hand."""

from __future__ import annotations

import asyncio
import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.fidelity import Fidelity
from trajectory_compressor.core.invented import InventedCheck, SummaryCheck
from trajectory_compressor.core.summary import SummaryRequest, summary_body
from trajectory_compressor.summarizers.prompt import INSTRUCTIONS

ROW = [
    "Ran pytest on src/app/loader.py: 12 passed, 1 failed in 2.35s.",
    "<tool_response>\n" + json.dumps({"output": "worker-3 RSS 1536 MB after 2500 ms; "
                                                "wrote /srv/caf\u00e9/out.log",
                                      "exit_code": 1}) + "\n</tool_response>",
    "Commit a3f9c2e1d4b5 broke parse_header (KeyError: 'content_length').",
]


def invented(summary: str) -> list[str]:
    return InventedCheck(ROW).invented(summary)


def test_facts_the_row_states_are_not_invented() -> None:
    assert invented("Tests in loader.py: 12 passed, 1 failed; parse_header raised KeyError "
                    "on content_length; commit a3f9c2e1d4b5; /srv/café/out.log") == []


def test_made_up_facts_are_listed_in_order() -> None:
    summary = ("It loaded /data/shards/train-00017.parquet (4016 samples, 900 batches), "
               "hit ShardIndexError in load_batch and used 2.5 GB.")
    assert invented(summary) == ["/data/shards/train-00017.parquet", "4016 samples",
                                 "900 batches", "ShardIndexError", "load_batch", "2.5 GB"]


def test_a_quantity_in_another_unit_or_spelling_is_stated() -> None:
    # 1536 MB = 1.536 GB = 1.5 GiB; 2500 ms = 2.5 s; 2.35 s = 2350 ms.
    for said in ("1.5 GB", "1.50 GiB", "1,536 MB", "1536MB", "2.5s", "2500ms", "2350 ms",
                 "2.4s", "13 tests", "12 tests", "1 failures"):
        if said == "13 tests":
            assert invented(f"ran {said}") == [said]  # 13 is nowhere in the row
        else:
            assert invented(f"it took {said} here") == [], said


def test_a_quantity_must_hold_to_the_precision_written() -> None:
    # 1.6 GB means 1.55-1.65 GB: 1.536 GB (decimal) is outside, 1.61 GB (1.5 GiB) inside.
    assert invented("used 1.6 GB") == []
    assert invented("used 1.7 GB") == ["1.7 GB"]
    assert invented("waited 4s") == ["4s"]  # 2.5 s and 2.35 s round to 3 s and 2 s
    assert invented("waited 3s") == []  # 3 s stands for 2.5-3.5 s: 2500 ms is in
    assert invented("waited 2s") == []  # 2.35 s, to the second
    assert invented("waited 2.50s") == []
    assert invented("waited 2.51s") == ["2.51s"]


def test_clipped_quotations_and_abbreviated_hashes_are_prefixes() -> None:
    assert invented("the path src/app/loa… was read") == []
    assert invented("commit a3f9c2e broke it") == []  # 7 hex digits of a3f9c2e1d4b5
    assert invented("commit a3f9c2f broke it") == ["a3f9c2f"]
    assert invented("it read src/app/loa") == []  # the last claim: a text cut at its end
    assert invented("it read src/app/loa and stopped") == ["src/app/loa"]


def test_a_url_cut_by_an_ellipsis_is_a_prefix_too() -> None:
    # The ellipsis right after a URL was once blanked with the URL and so never seen.
    check = InventedCheck(["docs at https://example.org/docs/api/v2 (mirror: ftp)"])
    assert check.invented("read https://example.org/docs/a… first") == []
    assert check.invented("read https://example.org/docs/b… first") == [
        "https://example.org/docs/b"]
    assert check.invented("read https://example.org/docs/a first") == [
        "https://example.org/docs/a"]


def test_words_bare_numbers_and_quotes_are_not_claims() -> None:
    assert invented('The "retry budget" was 7 and HTTP failed twice in 2024.') == []


def test_bad_summaries_are_scored_without_error() -> None:
    check = SummaryCheck(ROW[:1], ROW[1:], ["then: src/app/loader.py"])
    empty = check.measure("")
    assert (empty.invented, empty.kept, empty.model_ratio) == (0, 0, 0.0)
    numbers = check.measure("1 2 3 4.5 6,000 7 8 9 10 100 1000 99999999999999999999")
    assert numbers.invented == 0  # bare numbers state nothing
    units = check.measure("1s 2s 4s 4 GB 5 ms 6%")
    assert units.invented_items == ("1s", "4s", "4 GB", "5 ms", "6%")  # 2s: 2.35s
    # A model that copies its prompt back: "about 100 tokens" is a count the row never
    # states; whatever else is flagged occurs nowhere in the row.
    prompt = check.measure(INSTRUCTIONS.format(target_tokens=100, target_words=75,
                                               fence="0a1b2c3d"))
    assert prompt.kept == 0 and "100 tokens" in prompt.invented_items
    row = " ".join(ROW).casefold()
    assert not [i for i in prompt.invented_items if i.casefold() in row]
    assert Fidelity.from_dict(prompt.to_dict()) == prompt


def test_model_ratio_leaves_the_references_line_out() -> None:
    check = SummaryCheck([], ["Edited src/app/loader.py and config.yaml"], [])
    with_line = check.measure("Edited files.\nReferences: src/app/loader.py; config.yaml",
                              own="Edited files.")
    assert (with_line.ratio, with_line.model_ratio) == (1.0, 0.0)
    assert with_line.to_dict()["model_ratio"] == 0.0
    assert Fidelity.from_dict(with_line.to_dict()) == with_line


# -- the extractive summarizer invents nothing, by construction ------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)
FACTY = st.sampled_from([
    "/srv/app/src/very_long_module_name_for_clipping.py", "KeyError: 'user_id'",
    "1536 MB", "2.35s", "12 passed", "a3f9c2e1d4b5", "https://example.com/a/b?c=1",
    "--max-retries", "$HOME", "C:\\dir\\x.txt", "\u00e9t\u00e9.json", "localhost:8080",
    "x" * 200, "line\nbreak", "ok\nstep 2\nstep 3\nFAILED: KeyError: x\n", "\u2026", "...",
    "42 lines", "<1234 chars>",
])
PIECE = st.one_of(TEXT, FACTY, st.builds(" ".join, st.lists(FACTY, max_size=6)))


@st.composite
def turn(draw: st.DrawFn) -> dict[str, str]:
    kind = draw(st.sampled_from(["human", "gpt", "tool", "call"]))
    text = draw(PIECE)
    if kind == "call":
        args = {draw(st.sampled_from(["path", "command", "query", "content", "x"])): text}
        return {"from": "gpt", "value": draw(PIECE) + "\n<tool_call>\n" + json.dumps(
            {"name": draw(st.sampled_from(["terminal", "read_file"])), "arguments": args},
            ensure_ascii=draw(st.booleans())) + "\n</tool_call>"}
    if kind == "tool":
        body = draw(st.sampled_from([
            json.dumps({"output": text, "exit_code": draw(st.integers(-3, 300))}),
            json.dumps({"stdout": text, "stderr": draw(PIECE)}), text]))
        return {"from": "tool", "value": f"<tool_response>\n{body}\n</tool_response>"}
    return {"from": kind, "value": text}


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(head=st.lists(turn(), max_size=2), region=st.lists(turn(), min_size=1, max_size=8),
       tail=st.lists(PIECE, max_size=3), budget=st.integers(20, 400))
# Found by this test: a unit separator reads as a space to `str.split` but as nothing
# to a terminal, so "00A\x1f0" was summarized "00A 0" and "00A" read as invented.
@example(head=[], region=[{"from": "gpt", "value": "00A\x1f0\n<tool_call>\n"
                           '{"name": "terminal", "arguments": {"path": ""}}\n</tool_call>'}],
         tail=[], budget=51)
def test_fuzz_the_extractive_summary_invents_nothing(counter, head, region, tail, budget):
    texts = [t["value"] for t in head + region]
    check = SummaryCheck(texts[:len(head)], texts[len(head):], tail)
    # As the compressor asks: the region's items the tail mentions go first, verbatim.
    request = SummaryRequest(region, len(head), budget, tail_items=tuple(check.tail_items))
    summary = asyncio.run(ExtractiveSummarizer(counter.count).summarize(request))
    assert check.measure(summary_body(summary.text)).invented_items == ()


def test_the_invented_rows_and_own_text_ratio_fold_into_the_aggregate_by_hand() -> None:
    from trajectory_compressor.core.metrics import (
        AggregateMetrics,
        TrajectoryMetrics,
        aggregate_from_state,
        aggregate_state,
    )

    rows = [Fidelity(10, 8, 4, 2, (), ("/x/y.py", "3 GB"), 2, model_kept=5),
            Fidelity(5, 5, 0, 0, ()),
            Fidelity(4, 1, 0, 0, (), ("KeyError",), 1)]
    whole, first, second = AggregateMetrics(), AggregateMetrics(), AggregateMetrics()
    for i, f in enumerate(rows):
        m = TrajectoryMetrics(was_compressed=True, turns_compressed_start_idx=1, fidelity=f)
        whole.add(m)
        (first if i < 2 else second).add(m)
    # Own-text ratios 5/10, 5/5 (as `kept`), 1/4: mean 0.5833; 2 of 3 rows invent, 3 items.
    section = whole.to_dict()["fidelity"]
    assert (section["mean_model_ratio"], section["invented_rows"], section["invented_share"],
            section["invented_items"]) == (0.5833, 2, 0.6667, 3)
    restored = aggregate_from_state(json.loads(json.dumps(aggregate_state(first))))
    restored.merge(second)
    assert restored.to_dict()["fidelity"] == section
    # The row keeps the first 10 items and the reason; read back the same.
    row = TrajectoryMetrics(was_compressed=True, fidelity=rows[0], low_fidelity=True,
                            low_fidelity_reason="2 invented item(s) (/x/y.py, 3 GB), over "
                            "max_invented 1")
    back = TrajectoryMetrics.from_dict(json.loads(json.dumps(row.to_dict())))
    assert back.fidelity == rows[0]
    assert back.low_fidelity_reason == row.low_fidelity_reason
