"""`inspect.run_fixes`: reading a finished run's rows still over the limit back (issue 26,
item 5: the survivors of the mutation pass).

Expected values from the module's documentation (issue 25): a row that got no summary is
read from the run's output (or its over-limit entry) as written, never distilled again;
it is the row whose id and recorded metrics both match; a summarized row is read from the
run's input at its recorded place; a row that cannot be read, or is not found, is listed
as not examined with why; failed rows are counted apart. Token counts are by hand
(`fixtures_runs.words(n)` is n tokens with the bundled tokenizer).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, row, write_jsonl
from tests.test_kills_engine_runs_compressor import COLOURED, PLAIN
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.formats.base import Location
from trajectory_compressor.inspect.run_fixes import Flagged, run_fixes

CONFIG = CompressionConfig(**HAND_CONFIG, summarizer="extractive")
# HAND_ROWS[2], "big-tail": 265 tokens in 12 turns, over the target of 100.
BIG = HAND_ROWS[2]
BIG_METRICS = {"original_tokens": 265, "original_turns": 12, "compressed_tokens": 265,
               "still_over_limit": True}
SUMMARIZED = {**BIG_METRICS, "compression_region": {"start_idx": 4, "end_idx": 8}}


def written(path: Path, rows: list[dict]) -> Path:
    return write_jsonl(path, rows)


def test_failed_rows_are_counted_apart(tmp_path, counter):
    out = written(tmp_path / "out.jsonl", [])
    failed = [Flagged(Location(str(out), line=n), f"f{n}", "failed", {"error": "boom"})
              for n in (1, 2)]
    fixes = run_fixes(out, failed, CONFIG, [], counter)
    assert (fixes.over.failed, fixes.over.over, fixes.over.not_examined) == (2, 0, [])


def test_without_a_tokenizer_failed_rows_are_still_counted_apart(tmp_path):
    """The tokenizer cannot be had (nothing is downloaded): the failed row is counted as
    failed, the other is listed as not examined."""
    out = written(tmp_path / "out.jsonl", [])
    config = CONFIG.replace(tokenizer_name=str(tmp_path / "no-such-tokenizer"))
    flagged = [Flagged(Location(str(out), line=1), "f", "failed", {"error": "boom"}),
               Flagged(Location(str(out), line=2), "o", "over", dict(BIG_METRICS))]
    fixes = run_fixes(out, flagged, config, [])
    assert fixes.over.failed == 1
    assert fixes.fixes.rows == 0 and fixes.exact is True  # none examined; extractive
    [(where, why)] = fixes.over.not_examined
    assert where == f"{out}:2" and why.startswith("it cannot be counted here: ")


def test_a_row_missing_from_the_output_says_so(tmp_path, counter):
    out = written(tmp_path / "out.jsonl", [{**HAND_ROWS[0], "compression_metrics": {}}])
    ghost = Flagged(Location(str(out), line=7), "ghost", "over", dict(BIG_METRICS))
    fixes = run_fixes(out, [ghost], CONFIG, [], counter)
    assert fixes.over.not_examined == [(f"{out}:7", f"its row is not in {out}")]


def test_an_unreadable_written_row_says_why(tmp_path, counter):
    bad = {"id": "bad", "conversations": [{"from": "human"}], "compression_metrics": {"x": 1}}
    out = written(tmp_path / "out.jsonl", [{**HAND_ROWS[0], "compression_metrics": {}}, bad])
    flagged = Flagged(Location(str(out), line=2), "bad", "over", {"x": 1})
    fixes = run_fixes(out, [flagged], CONFIG, [], counter)
    [(where, why)] = fixes.over.not_examined
    assert where == f"{out}:2" and why.startswith("its row cannot be read: ")


def test_of_two_rows_with_one_id_the_one_with_the_recorded_metrics_is_read(tmp_path, counter):
    first = {**HAND_ROWS[0], "id": "dup",
             "compression_metrics": {"original_tokens": 35, "original_turns": 6}}
    second = {**BIG, "id": "dup", "compression_metrics": dict(BIG_METRICS)}
    out = written(tmp_path / "out.jsonl", [first, second])
    flagged = Flagged(Location(str(out), line=2), "dup", "over", dict(BIG_METRICS))
    fixes = run_fixes(out, [flagged], CONFIG, [], counter)
    assert fixes.over.not_examined == []
    [examined] = fixes.over.rows
    assert examined.counted.total == 265


def test_a_moved_row_is_read_as_written_not_distilled_again(tmp_path, counter):
    """The run (distill off) moved the row to its over-limit entry; the report's settings
    distill: the row is still counted as the run counted it."""
    data = row("moved", "SHGTGTGTGTGT", [10, 5, 5, 5, 30, 30, 30, 30, 30, 30, 30, 30])
    data["conversations"][3]["value"] = COLOURED
    recorded = sum(counter.count_many([t["value"] for t in data["conversations"]]))
    metrics = {"original_tokens": recorded, "original_turns": 12,
               "compressed_tokens": recorded, "still_over_limit": True}
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location("in.jsonl", line=1), "moved", "over", metrics, row=data)
    fixes = run_fixes(out, [flagged], CONFIG.replace(distill="safe"), [], counter)
    assert fixes.over.not_examined == []
    assert [r.counted.total for r in fixes.over.rows] == [recorded]


def test_a_summarized_row_is_read_from_its_recorded_input_file(tmp_path, counter):
    """Not among the run's inputs given, but its recorded file exists: read there."""
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location(str(src), line=3), "big-tail", "over", dict(SUMMARIZED))
    fixes = run_fixes(out, [flagged], CONFIG, [], counter)
    assert fixes.over.not_examined == []
    assert [r.counted.total for r in fixes.over.rows] == [265]


def test_a_summarized_row_whose_input_is_gone_says_so(tmp_path, counter):
    gone = tmp_path / "gone.jsonl"
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location("gone.jsonl", line=3), "big-tail", "over", dict(SUMMARIZED))
    fixes = run_fixes(out, [flagged], CONFIG, [gone], counter)
    assert fixes.over.not_examined == [("gone.jsonl:3", f"its input {gone} is gone")]


def test_a_summarized_row_whose_input_cannot_be_read_says_why(tmp_path, counter):
    src = tmp_path / "in.txt"
    src.write_text(json.dumps(BIG) + "\n", encoding="utf-8")
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location("in.txt", line=1), "big-tail", "over", dict(SUMMARIZED))
    fixes = run_fixes(out, [flagged], CONFIG, [src], counter)
    [(where, why)] = fixes.over.not_examined
    assert where == "in.txt:1"
    assert why.startswith(f"its input {src} cannot be read: ")
    assert "unsupported file type" in why


def test_what_an_over_limit_entry_records():
    def flagged(metrics):
        return Flagged(Location("f", line=1), "x", "c", metrics)

    assert flagged({"error": "boom"}).failed is True
    assert flagged({"error": ""}).failed is False and flagged({}).failed is False
    assert flagged({"compression_region": {"start_idx": 0}}).summarized is True
    assert flagged({"compression_region": {"start_idx": 4}}).summarized is True
    for region in ({"start_idx": -1}, {}, None, {"start_idx": "4"}, [4]):
        assert flagged({"compression_region": region}).summarized is False, region
    m = flagged({"a": 5, "b": True, "c": "5", "d": 5.0, "e": 0})
    assert [m.recorded(k) for k in "abcdef"] == [5, None, None, None, 0, None]


def moved(recorded_tokens, recorded_turns, **extra):
    metrics = {"original_tokens": recorded_tokens, "original_turns": recorded_turns,
               "compressed_tokens": 265, "still_over_limit": True, **extra}
    metrics = {k: v for k, v in metrics.items() if v is not None}
    return Flagged(Location("in.jsonl", line=3), "big-tail", "over", metrics, row=BIG)


AFTER = "(the input changed since the run, or another --tokenizer or --config?)"


def test_a_row_that_counts_otherwise_than_recorded_is_not_re_planned(tmp_path, counter):
    out = written(tmp_path / "out.jsonl", [])
    cases = [(999, 12, f"counted 265 tokens in 12 turns, the run recorded 999 in 12 {AFTER}"),
             (999, None, f"counted 265 tokens in 12 turns, the run recorded 999 in ? {AFTER}"),
             (None, 11, f"counted 265 tokens in 12 turns, the run recorded ? in 11 {AFTER}"),
             (1_265, 12, "counted 265 tokens in 12 turns, the run recorded 1,265 in 12 "
                         f"{AFTER}")]
    for tokens, turns, why in cases:
        fixes = run_fixes(out, [moved(tokens, turns)], CONFIG, [], counter)
        assert fixes.over.not_examined == [("in.jsonl:3", why)], (tokens, turns)
    # Nothing recorded to compare with: the row is taken as it counts.
    fixes = run_fixes(out, [moved(None, None)], CONFIG, [], counter)
    assert fixes.over.not_examined == [] and [r.counted.total for r in fixes.over.rows] == [265]


def test_a_summarized_row_is_distilled_as_the_run_distilled_it(tmp_path, counter):
    """Read from the input, where it is undistilled; the run (distill: safe) recorded the
    distilled counts."""
    data = row("d", "SHGTGTGTGTGT", [10, 5, 5, 5, 30, 30, 30, 30, 30, 30, 30, 30])
    for k, turn in enumerate(data["conversations"]):  # texts no safe rule shortens
        turn["value"] = " ".join(f"t{k}w{i}" for i in range(12))
    data["conversations"][3]["value"] = COLOURED
    src = write_jsonl(tmp_path / "in.jsonl", [data])
    plain = [t["value"] for t in data["conversations"]]
    plain[3] = PLAIN
    recorded = sum(counter.count_many(plain))
    metrics = {"original_tokens": recorded, "original_turns": 12, "compressed_tokens": 250,
               "still_over_limit": True, "compression_region": {"start_idx": 4}}
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location(str(src), line=1), "d", "over", metrics)
    fixes = run_fixes(out, [flagged], CONFIG.replace(distill="safe"), [src], counter)
    assert fixes.over.not_examined == []
    [examined] = fixes.over.rows
    assert examined.counted.total == recorded
    assert examined.counted.turns[3]["value"] == PLAIN
    assert examined.counted.distilled is not None and examined.counted.distilled.turns == 1


def test_moved_rows_need_no_output_file(tmp_path, counter):
    """Every row still over the limit was moved to the over-limit file: the output is
    not read (here it is gone), and the row is examined."""
    fixes = run_fixes(tmp_path / "gone.jsonl", [moved(265, 12)], CONFIG, [], counter)
    assert fixes.over.not_examined == [] and [r.counted.total for r in fixes.over.rows] == [265]


def test_a_written_row_without_metrics_is_not_the_flagged_one(tmp_path, counter):
    out = written(tmp_path / "out.jsonl", [{**BIG}, {**BIG, "compression_metrics": None}])
    flagged = Flagged(Location(str(out), line=1), "big-tail", "over", dict(BIG_METRICS))
    fixes = run_fixes(out, [flagged], CONFIG, [], counter)
    assert fixes.over.not_examined == [(f"{out}:1", f"its row is not in {out}")]


def test_the_table_is_exact_only_for_extractive_summaries(tmp_path, counter):
    out = written(tmp_path / "out.jsonl", [])
    assert run_fixes(out, [moved(265, 12)], CONFIG, [], counter).exact is True
    llm = CONFIG.replace(summarizer="openai", summarization_model="m")
    assert run_fixes(out, [moved(265, 12)], llm, [], counter).exact is False


OPENAI_TURNS = [("system", "You are terse. " * 12), ("user", "fix the bug " * 10),
                ("assistant", "looking now " * 20), ("user", "and then? " * 15),
                ("assistant", "done, all fixed " * 20)]


def test_rows_in_another_dialect_are_read_in_theirs(tmp_path, counter):
    """OpenAI-messages rows, moved to the over-limit entry or written to the output, are
    read as OpenAI messages (their own dialect, detected), so they count as recorded."""
    data = {"id": "oa", "messages": [{"role": r, "content": c} for r, c in OPENAI_TURNS]}
    recorded = sum(counter.count_many([c for _, c in OPENAI_TURNS]))
    metrics = {"original_tokens": recorded, "original_turns": 5,
               "compressed_tokens": recorded, "still_over_limit": True}
    assert recorded > 100  # over HAND_CONFIG's target
    # Moved to the over-limit file:
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location("in.jsonl", line=1), "oa", "over", metrics, row=data)
    fixes = run_fixes(out, [flagged], CONFIG, [], counter)
    assert fixes.over.not_examined == [] and [r.counted.total for r in fixes.over.rows] == [
        recorded]
    # Written to the output:
    out = written(tmp_path / "out2.jsonl", [{**data, "compression_metrics": metrics}])
    flagged = Flagged(Location(str(out), line=1), "oa", "over", metrics)
    fixes = run_fixes(out, [flagged], CONFIG, [], counter)
    assert fixes.over.not_examined == [] and [r.counted.total for r in fixes.over.rows] == [
        recorded]


def test_a_row_the_chat_template_cannot_count_says_why(tmp_path, counter):
    template = tmp_path / "strict.jinja"
    template.write_text("{% for m in messages %}{% if 'boom' in m.content %}"
                        "{{ raise_exception('no boom') }}{% endif %}"
                        "{{ m.role }} {{ m.content }}\n{% endfor %}", encoding="utf-8")
    config = CONFIG.replace(token_counting="chat_template", chat_template=str(template))
    data = {**BIG, "conversations": [*BIG["conversations"][:-1],
                                     {"from": "gpt", "value": "boom"}]}
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location("in.jsonl", line=3), "big-tail", "over", dict(BIG_METRICS),
                      row=data)
    fixes = run_fixes(out, [flagged], config, [], counter)
    [(where, why)] = fixes.over.not_examined
    assert where == "in.jsonl:3"
    assert why.startswith("cannot count the row with the chat template: ") and "no boom" in why


def test_a_summarized_row_without_its_input_says_why(tmp_path, counter):
    out = written(tmp_path / "out.jsonl", [])
    named = tmp_path / "elsewhere.jsonl"
    flagged = Flagged(Location(str(named), line=3), "big-tail", "over", dict(SUMMARIZED))
    fixes = run_fixes(out, [flagged], CONFIG, [], counter)
    assert fixes.over.not_examined == [(
        f"{named}:3", f"it got a summary, so only its input holds the turns a re-plan needs, "
                      f"and {named} is not among the run's inputs that still exist")]


def test_a_summarized_row_past_its_inputs_end_says_so(tmp_path, counter):
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location(str(src), line=9), "big-tail", "over", dict(SUMMARIZED))
    fixes = run_fixes(out, [flagged], CONFIG, [src], counter)
    assert fixes.over.not_examined == [(f"{src}:9", f"{src} has no row at {src}:9")]


def test_rows_past_the_limit_are_counted_not_read(tmp_path, counter, monkeypatch):
    """The first `MAX_ROWS` rows are examined (here 2); later ones are counted as over
    the limit without being read (the third is in no file, and is not listed)."""
    from trajectory_compressor.engine import replan as remedies

    monkeypatch.setattr(remedies, "MAX_ROWS", 2)
    out = written(tmp_path / "out.jsonl", [])
    ghost = Flagged(Location(str(out), line=7), "ghost", "over", dict(BIG_METRICS))
    fixes = run_fixes(out, [moved(265, 12), moved(265, 12), ghost], CONFIG, [], counter)
    assert fixes.over.over == 3
    assert fixes.over.not_examined == [] and len(fixes.over.rows) == 2


def test_a_rows_tokens_after_are_the_recorded_ones(tmp_path, counter):
    out = written(tmp_path / "out.jsonl", [])
    after = run_fixes(out, [moved(265, 12, compressed_tokens=250)], CONFIG, [], counter)
    assert [r.tokens_after for r in after.over.rows] == [250]
    flagged = moved(265, 12)
    del flagged.metrics["compressed_tokens"]
    counted = run_fixes(out, [flagged], CONFIG, [], counter)
    assert [r.tokens_after for r in counted.over.rows] == [265]


def test_a_summarized_row_is_read_from_the_runs_input_of_its_name(tmp_path, counter):
    """The entry names ``old/in.jsonl`` (still there, other rows); the run's input of
    that name is ``new/in.jsonl``: the row is read there."""
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = write_jsonl(tmp_path / "old" / "in.jsonl", HAND_ROWS[:1] * 5)
    new = write_jsonl(tmp_path / "new" / "in.jsonl", HAND_ROWS)
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location(str(old), line=3), "big-tail", "over", dict(SUMMARIZED))
    fixes = run_fixes(out, [flagged], CONFIG, [new], counter)
    assert fixes.over.not_examined == []
    assert [r.counted.total for r in fixes.over.rows] == [265]


def test_a_summarized_row_is_read_in_its_inputs_dialect(tmp_path, counter):
    data = {"id": "oa", "messages": [{"role": r, "content": c} for r, c in OPENAI_TURNS]}
    src = write_jsonl(tmp_path / "in.jsonl", [data])
    recorded = sum(counter.count_many([c for _, c in OPENAI_TURNS]))
    metrics = {"original_tokens": recorded, "original_turns": 5, "compressed_tokens": 90,
               "still_over_limit": True, "compression_region": {"start_idx": 2}}
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location(str(src), line=1), "oa", "over", metrics)
    fixes = run_fixes(out, [flagged], CONFIG, [src], counter)
    assert fixes.over.not_examined == [] and [r.counted.total for r in fixes.over.rows] == [
        recorded]


def test_a_summarized_row_is_found_past_the_first_batch(tmp_path, counter):
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    out = written(tmp_path / "out.jsonl", [])
    flagged = Flagged(Location(str(src), line=3), "big-tail", "over", dict(SUMMARIZED))
    fixes = run_fixes(out, [flagged], CONFIG.replace(batch_rows=1), [src], counter)
    assert fixes.over.not_examined == []
    assert [r.counted.total for r in fixes.over.rows] == [265]


def test_a_written_row_is_read_as_written_not_distilled_again(tmp_path, counter):
    """The run (distill off) wrote the row unsummarized to its output; the report's
    settings distill: the row still counts as the run counted it."""
    data = row("w", "SHGTGTGTGTGT", [10, 5, 5, 5, 30, 30, 30, 30, 30, 30, 30, 30])
    data["conversations"][3]["value"] = COLOURED
    recorded = sum(counter.count_many([t["value"] for t in data["conversations"]]))
    metrics = {"original_tokens": recorded, "original_turns": 12,
               "compressed_tokens": recorded, "still_over_limit": True}
    out = written(tmp_path / "out.jsonl", [{**data, "compression_metrics": metrics}])
    flagged = Flagged(Location(str(out), line=1), "w", "over", metrics)
    fixes = run_fixes(out, [flagged], CONFIG.replace(distill="safe"), [], counter)
    assert fixes.over.not_examined == []
    assert [r.counted.total for r in fixes.over.rows] == [recorded]
