"""Tests written to kill the mutants of `app/report.py` that no in-process test reached
(issue 40, item 8): a run read back without its metrics file, damaged over-limit files,
the text of each section of `report`, and `--show`'s status lines.

Each run is a real in-process compress of the hand rows (`tests/fixtures_runs.py`); the
expected texts are written out by hand.
"""

from __future__ import annotations

import json

import pytest

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, compress_run, write_jsonl
from trajectory_compressor.app.gates import Counts
from trajectory_compressor.app.report import (
    FoundRow,
    code_of,
    distill_lines,
    find_fixes,
    find_row,
    format_found,
    format_report,
    load_report,
    report_counts,
    settle_fixes,
)
from trajectory_compressor.app.timeline import build_timeline
from trajectory_compressor.core import reasons
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import InputError
from trajectory_compressor.core.metrics import TrajectoryMetrics
from trajectory_compressor.formats.base import Location

CONFIG = CompressionConfig(summarizer="extractive", **HAND_CONFIG)


@pytest.fixture
def run(tmp_path, counter):
    """The hand rows compressed: 5 rows written, 3 of them still over the target."""
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    out = tmp_path / "out.jsonl"
    compress_run(src, out, CONFIG, counter)
    return out


def _over_limit(out):
    return out.with_name("out_over_limit.jsonl")


def test_a_run_without_its_metrics_file_is_counted_from_its_other_files(run):
    run.with_name("out_metrics.json").unlink()
    entries = [json.loads(line) for line in _over_limit(run).read_text().splitlines()]
    assert len(entries) == 3
    # One flagged row kept out of the output (as `--over-limit-output` would): its row is
    # in the entry and counts as a row of the run.
    kept = entries[0]["id"]
    written = [json.loads(line) for line in run.read_text().splitlines()]
    kept_row = next(r for r in written if r["id"] == kept)
    run.write_text("".join(json.dumps(r) + "\n" for r in written if r["id"] != kept))
    entries[0]["trajectory"] = kept_row
    _over_limit(run).write_text("".join(json.dumps(e) + "\n" for e in entries))
    run.with_name("out_rejects.jsonl").write_text('{"line": 1}\n\n{"line": 7}\n')

    report = load_report(run)
    assert report.metrics is None
    assert report_counts(report) == Counts(rows=5, over_limit=3, failed=0, rejected=2)

    run.with_name("out_rejects.jsonl").unlink()
    assert report_counts(report) == Counts(rows=5, over_limit=3, failed=0, rejected=0)

    text = format_report(report).splitlines()
    assert text[1] == "  (no out_metrics.json: metrics were off for this run)"
    assert text[2] == ""


def test_a_damaged_over_limit_line_names_the_file_and_its_line(run):
    path = _over_limit(run)
    path.write_text(path.read_text() + "\n{not json\n")
    with pytest.raises(InputError) as caught:
        load_report(run)
    assert str(caught.value).startswith(f"{path}:5: not a JSON line (")


def test_no_over_limit_file_means_no_flagged_rows(run):
    _over_limit(run).unlink()
    report = load_report(run)
    assert report.rows == []
    assert find_fixes(report, CONFIG) is None
    lines = format_report(report).splitlines()
    assert lines[-2:] == ["", "No row is still over the limit, and none failed."]


def test_a_listed_row_missing_from_the_output_is_an_error_naming_it(run):
    written = [json.loads(line) for line in run.read_text().splitlines()]
    run.write_text("".join(json.dumps(r) + "\n" for r in written if r["id"] != "big-tail"))
    report = load_report(run)
    with pytest.raises(InputError) as caught:
        find_row(report, "big-tail")
    listed = next(r for r in report.rows if r.id == "big-tail")
    assert str(caught.value) == (f"{listed.location} is listed as over the limit but its row "
                                 f"is not in {run}")


def test_a_reason_neither_code_nor_known_sentence_falls_back_by_failure():
    assert code_of("something odd happened", failed=True) == reasons.FAILED.code
    assert code_of("something odd happened", failed=False) == reasons.OVER_TARGET.code
    assert code_of(reasons.OVER_TARGET.code, failed=True) == reasons.OVER_TARGET.code


def test_the_report_text_section_by_section(run):
    report = load_report(run)
    assert report.metrics is not None
    report.metrics["usage"] = {"total_tokens": 1500, "prompt_tokens": 1200,
                               "completion_tokens": 300}
    report.metrics["fidelity"] = {"repair_requests": 4, "low_fidelity_rows": 2}
    lines = format_report(report, limit=1).splitlines()
    assert "  usage                 1,200 prompt + 300 completion tokens" in lines
    assert "  low fidelity              2   rows below the bar after 4 repair requests" \
        in lines
    assert not any(line.startswith("  fidelity ") for line in lines)
    assert "  ... 2 more (--limit 0 shows all)" in lines
    assert lines[-2:] == ["", "See one row's turns: trajectory-compressor report OUTPUT "
                          "--show ID"]
    # the reasons table follows a blank line after the figures
    why = lines.index("Why, by reason")
    assert lines[why - 1] == ""
    assert "  ... " not in "\n".join(format_report(report, limit=0).splitlines())


def test_fidelity_lines_with_model_figures():
    report_lines = format_report.__globals__["_fidelity_lines"]({
        "count": 3, "mean_ratio": 0.9, "p10_ratio": 0.5, "min_ratio": 0.25,
        "mean_tail_ratio": 1, "mean_model_ratio": 0.75, "invented_rows": 2,
        "invented_share": 0.5, "invented_items": 7})
    assert report_lines == [
        "  fidelity               0.90   mean; p10 0.50, min 0.25; tail items kept 1.00",
        "  model fidelity         0.75   mean of its own text, without references",
        "  invented facts            2   rows (0.50 of summaries), 7 items",
    ]


def test_distill_lines_by_hand():
    assert distill_lines({"turns": 0}) == []
    assert distill_lines({"turns": 3, "tokens_saved": 1234, "rows": 2}) == [
        "  distill               1,234   tokens saved in 3 tool turns of 2 rows"]
    # "esc" would just fit a line of 79 columns: the width is 78
    rules = {"progress": 12000, "duplicates": 3000, "esc": 45, "blank_runs": 7,
             "long_lines": 1500, "file_views": 900, "json_pretty": 12}
    lines = distill_lines({"turns": 9, "tokens_saved": 19464, "rows": 4, "level": " safe ",
                           "saved_by_rule": rules})
    assert lines == [
        "  distill              19,464   tokens saved in 9 tool turns of 4 rows (safe)",
        "                                by rule: progress 12,000, duplicates 3,000,",
        "                                esc 45, blank_runs 7, long_lines 1,500,",
        "                                file_views 900, json_pretty 12",
    ]


def test_settle_fixes_says_when_it_re_planned_and_why(run, counter):
    report = load_report(run)
    assert report.metrics is not None
    report.metrics.pop("remedies", None)
    report.metrics.pop("fixes", None)
    settle_fixes(report, CONFIG)
    assert report.fixes is not None and report.fixes.over.over == 3
    assert report.fixes_source.startswith("re-planned here in ")
    assert " s CPU: " in report.fixes_source
    text = format_report(report).splitlines()
    assert any(line.startswith("  (re-planned here in ") for line in text)


def test_show_status_of_a_row_left_as_it_was_and_a_count_that_differs(counter):
    turns = HAND_ROWS[0]["conversations"]
    tokens = counter.count_many([t["value"] for t in turns])
    metrics = TrajectoryMetrics(original_tokens=sum(tokens), compressed_tokens=sum(tokens) + 5,
                                original_turns=len(turns), compressed_turns=len(turns))
    timeline = build_timeline(turns, tokens, metrics, CONFIG)
    found = FoundRow(Location("in.jsonl", 1, 0), HAND_ROWS[0], metrics)
    lines = format_found(found, timeline).splitlines()
    assert lines[0] == "Trajectory short at in.jsonl:1"
    assert lines[1] == "  left as it was"
    assert lines[2] == f"  tokens {sum(tokens)} -> {sum(tokens) + 5}, turns 6 -> 6"
    assert lines[3] == (f"  note: the run recorded {sum(tokens) + 5} tokens, counted here "
                        f"{sum(tokens)}: another --tokenizer?")
