"""Tests written to kill the mutants of `app/report.py` that no in-process test reached
(issue 40, item 8): a run read back without its metrics file, damaged over-limit files,
the text of each section of `report`, and `--show`'s status lines.

Each run is a real in-process compress of the hand rows (`tests/fixtures_runs.py`); the
expected texts are written out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, compress_run, write_jsonl
from trajectory_compressor.app.gates import Counts
from trajectory_compressor.app.report import (
    FlaggedRow,
    FoundRow,
    RunReport,
    code_of,
    distill_lines,
    find_fixes,
    find_row,
    format_found,
    format_report,
    found_to_dict,
    load_report,
    numbers_lines,
    report_counts,
    settle_fixes,
    windows_lines,
)
from trajectory_compressor.app.timeline import build_timeline
from trajectory_compressor.core import reasons
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import InputError
from trajectory_compressor.core.metrics import TrajectoryMetrics
from trajectory_compressor.engine.layout import finished_layout
from trajectory_compressor.engine.stored_fixes import VERSION as STORED_VERSION
from trajectory_compressor.engine.stored_fixes import to_stored
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


# --- the whole text of `report`, from figures written by hand ----------------------------

def _flagged(row_id, reason, before, after, failed=False):
    metrics = TrajectoryMetrics(original_tokens=before, compressed_tokens=after,
                                still_over_limit=not failed,
                                error="boom" if failed else None)
    code = reasons.FAILED.code if failed else reason.code
    return FlaggedRow(Location("/runs/x/in.jsonl", 3, 2), row_id,
                      "boom" if failed else reason.text, metrics, metrics.to_dict(), code=code)


HAND_METRICS = {
    "summary": {"total_trajectories": 8, "rows_rejected": 1, "trajectories_compressed": 4,
                "trajectories_skipped_under_target": 1, "trajectories_still_over_limit": 2,
                "trajectories_failed": 1},
    "tokens": {"total_before": 52000, "total_after": 30100,
               "overall_compression_ratio": 0.5788},
    "summarization": {"summaries_by_source": {"llm": 3, "extractive": 0, "cache": 2},
                      "total_api_calls": 5, "total_errors": 1, "retries": 2},
    "windows": {"windowed_rows": 2, "windows": 5, "rows_out": 11, "summaries": 3,
                "trained_assistant_tokens": 900, "assistant_tokens": 1000,
                "trained_share": 0.9, "windows_over": 1, "trained_within_target": 800,
                "trained_within_target_share": 0.8},
    "distributions": {
        "tokens_before": {"min": 10, "median": 6000, "p90": 9000, "p99": 9900, "max": 10000},
        "tokens_after": {"min": 10, "median": 3000, "p90": 4000, "p99": 4100, "max": 4200}},
}


def _hand_report(metrics):
    out = Path("/runs/x/out.jsonl")
    rows = [_flagged("a-very-long-identifier-of-one-row-0001", reasons.HEAD_ALONE, 9000, 4200),
            _flagged("b", reasons.NO_MIDDLE, 7000, 4100),
            _flagged(None, None, 5000, 5000, failed=True)]
    return RunReport(out, finished_layout(out), metrics, rows)


def test_the_whole_report_of_hand_figures():
    # shares of 8 rows; summaries 3 + 0 + 2, the empty source left out; 5 windows of 2
    # rows is 2.5 a row; the third row is beyond --limit 2.
    assert format_report(_hand_report(HAND_METRICS), limit=2).split("\n") == [
        "Run output /runs/x/out.jsonl",
        "  rows                      8   rejected 1",
        "  compressed                4   50.0%",
        "  skipped (under)           1   12.5%",
        "  still over limit          2   25.0%",
        "  failed                    1",
        "  tokens               52,000 -> 30,100 (ratio 0.5788)",
        "  summaries                 5  llm=3 cache=2",
        "  API calls                 5   errors 1, retries 2",
        "  windows                   5   from 2 source rows (2.5 per row); rows out 11",
        "  window summaries          3   assistant tokens trained 900 of 1,000 (90%)",
        "  windows over              1   over the target; the others train 800 (80%)",
        "",
        "Tokens per row",
        "          min  median    p90    p99     max",
        "  before   10   6,000  9,000  9,900  10,000",
        "  after    10   3,000  4,000  4,100   4,200",
        "",
        "Why, by reason",
        "  reason                         code                              rows",
        "  protected head alone > target  protected_head_alone_over_target     1",
        "  no compressible middle         nothing_compressible                 1",
        "  failed                         failed                               1",
        "",
        "Still over the limit or failed: 3 rows (1 failed), worst first",
        "  location  id                      before  after  reason",
        "  …jsonl:3  a-very-long-identifie…   9,000  4,200  protected head alone > target",
        "  …jsonl:3  b                        7,000  4,100  no compressible middle",
        "  ... 1 more (--limit 0 shows all)",
        "",
        "See one row's turns: trajectory-compressor report OUTPUT --show ID",
    ]
    report = _hand_report(HAND_METRICS)
    report.rows = report.rows * 20  # 60 rows: 50 shown by default
    assert "  ... 10 more (--limit 0 shows all)" in format_report(report).split("\n")


def test_the_report_of_a_run_that_recorded_no_figures():
    out = Path("/runs/x/out.jsonl")
    assert format_report(RunReport(out, finished_layout(out), {"summary": {}})).split(
        "\n") == [
        "Run output /runs/x/out.jsonl",
        "  rows                      0   rejected 0",
        "  compressed                0    0.0%",
        "  skipped (under)           0    0.0%",
        "  still over limit          0    0.0%",
        "  failed                    0",
        "  tokens                    0 -> 0 (ratio 1.0000)",
        "  summaries                 0  ",
        "  API calls                 0   errors 0, retries 0",
        "",
        "No row is still over the limit, and none failed.",
    ]
    assert windows_lines({"windowed_rows": 1}) == [
        "  windows                   0   from 1 source rows (0.0 per row); rows out 0",
        "  window summaries          0   assistant tokens trained 0 of 0 (0%)",
    ]
    assert windows_lines({"windowed_rows": 0, "windows": 3}) == []
    assert windows_lines(["not", "a", "dict"]) == []


def test_figures_count_reasons_from_the_rows_unless_the_run_recorded_them():
    report = _hand_report(None)
    report.rows.append(_flagged("c", reasons.NO_MIDDLE, 6000, 4000))
    assert report.figures() == {
        "rows": None, "compressed": None, "skipped_under_target": None, "over_limit": 3,
        "failed": 1, "rejected": None,
        "reasons": {"protected_head_alone_over_target": 1, "nothing_compressible": 2,
                    "failed": 1}}
    report.metrics = {**HAND_METRICS, "over_limit": {"reasons": {"nothing_compressible": 7}}}
    figures = report.figures()
    assert figures["reasons"] == {"nothing_compressible": 7}
    assert (figures["over_limit"], figures["failed"], figures["rows"]) == (2, 1, 8)
    assert report.to_dict()["remedies_source"] is None
    report.fixes_source = "stored"
    assert report.to_dict()["remedies_source"] == "stored"


def test_numbers_lines_with_and_without_a_summary():
    numbers = {"head_tokens": 100, "middle_tokens": 2000, "tail_tokens": 300,
               "region_tokens": 1900, "target": 1000, "summary_target": 200}
    assert numbers_lines({}) == []
    assert numbers_lines(numbers) == [
        "  head 100 + middle 2,000 + tail 300 tokens; region 1,900",
        "  target 1,000, summary target 200"]
    assert numbers_lines({**numbers, "summary_tokens": 250})[0] == (
        "  head 100 + middle 2,000 + tail 300 tokens; region 1,900 -> summary 250")
    wide = numbers_lines({k: 10**30 for k in numbers})
    assert [len(line) for line in wide] == [80, 80]


def test_show_notes_a_row_judged_against_another_target(counter):
    turns = HAND_ROWS[1]["conversations"]  # "fits": 205 tokens
    tokens = counter.count_many([t["value"] for t in turns])
    total = sum(tokens)
    metrics = TrajectoryMetrics(original_tokens=total, compressed_tokens=total,
                                original_turns=len(turns), compressed_turns=len(turns))
    numbers = {"head_tokens": 1, "middle_tokens": 2, "tail_tokens": 3, "region_tokens": 4,
               "target": 5, "summary_target": 6}
    found = FoundRow(Location("in.jsonl", 2, 1), HAND_ROWS[1], metrics, numbers=numbers)
    lines = format_found(found, build_timeline(turns, tokens, metrics, CONFIG)).split("\n")
    assert lines[3:7] == [
        "  head 1 + middle 2 + tail 3 tokens; region 4",
        "  target 5, summary target 6",
        "  note: the run judged this row against another target than 100;",
        "  give report the run's --config or --target-max-tokens",
    ]
    # at exactly the target a row is not over it: no note
    at_target = CompressionConfig(summarizer="extractive",
                                  **{**HAND_CONFIG, "target_max_tokens": total})
    lines = format_found(found, build_timeline(turns, tokens, metrics, at_target)).split("\n")
    assert not any("another target" in line for line in lines)
    # a failed row is judged by its failure, not its size
    failed = TrajectoryMetrics(original_tokens=total, compressed_tokens=total,
                               original_turns=len(turns), compressed_turns=len(turns),
                               error="boom")
    found = FoundRow(Location("in.jsonl", 2, 1), HAND_ROWS[1], failed)
    lines = format_found(found, build_timeline(turns, tokens, failed, CONFIG)).split("\n")
    assert lines[1] == "  failed: boom"
    assert not any("another target" in line for line in lines)
    as_dict = found_to_dict(found, build_timeline(turns, tokens, failed, CONFIG))
    assert as_dict["reason"] is None and as_dict["metrics"]["error"] == "boom"
    unknown = FoundRow(Location("in.jsonl", 2, 1), HAND_ROWS[1], None, code="x")
    as_dict = found_to_dict(unknown, build_timeline(turns, tokens, None, CONFIG))
    assert as_dict["reason"] == "x" and as_dict["metrics"] is None


# --- reading a run back: which rows, from where ------------------------------------------

def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_report_counts_come_from_the_metrics_file_when_there_is_one(run):
    metrics_path = run.with_name("out_metrics.json")
    metrics = json.loads(metrics_path.read_text())
    metrics["summary"]["total_trajectories"] = 99
    metrics_path.write_text(json.dumps(metrics))
    assert report_counts(load_report(run)).rows == 99


def test_a_line_of_the_output_that_is_no_row_is_not_counted(run):
    run.with_name("out_metrics.json").unlink()
    run.write_text(run.read_text() + "not a row\n[1, 2]\n42\n")
    assert report_counts(load_report(run)).rows == 5


def test_a_rejects_file_that_cannot_be_opened_is_an_error_naming_it(run, tmp_path):
    import socket

    run.with_name("out_metrics.json").unlink()
    rejects = run.with_name("out_rejects.jsonl")
    rejects.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX) as sock:  # exists, and os.open refuses it (ENXIO)
        sock.bind(str(rejects))
        with pytest.raises(InputError) as caught:
            report_counts(load_report(run))
    assert str(caught.value) == (f"cannot read the rejects file {rejects}: No such device "
                                 "or address")


def _fail_a_compressed_row(run):
    """The output's row "fits" failed (the metrics count it); the over-limit file lists
    only the rows over the target."""
    rows = _lines(run)
    fits = next(r for r in rows if r["id"] == "fits")
    fits["compression_metrics"]["error"] = "the summarizer stopped: boom"
    _write(run, rows)
    metrics_path = run.with_name("out_metrics.json")
    metrics = json.loads(metrics_path.read_text())
    metrics["summary"]["trajectories_failed"] = 1
    metrics_path.write_text(json.dumps(metrics))
    return fits, metrics_path, metrics


def test_a_failure_the_over_limit_file_misses_is_found_in_the_output(run):
    fits, metrics_path, metrics = _fail_a_compressed_row(run)
    report = load_report(run)
    failed = [r for r in report.rows if r.failed]
    assert [(r.id, r.code) for r in failed] == [("fits", reasons.FAILED.code)]
    assert len(report.rows) == 4
    # once the over-limit file lists it too, the output is not scanned again
    entries = _lines(_over_limit(run))
    entries.append({"id": "fits", "reason": reasons.FAILED.code,
                    "reason_text": "the summarizer stopped: boom",
                    "metrics": fits["compression_metrics"], "line": 1})
    _write(_over_limit(run), entries)
    assert [r.id for r in load_report(run).rows].count("fits") == 1
    # with no failure counted, the output is not scanned at all
    del metrics["summary"]["trajectories_failed"]
    metrics_path.write_text(json.dumps(metrics))
    _write(_over_limit(run), entries[:-1])
    ids = [r.id for r in load_report(run).rows]
    assert len(ids) == 3 and "fits" not in ids


def test_a_reason_given_only_as_text_gets_its_code(run):
    entries = _lines(_over_limit(run))
    for entry in entries:
        entry["reason"] = ""
        entry["reason_text"] = reasons.NO_MIDDLE.text
    _write(_over_limit(run), entries)
    assert {r.code for r in load_report(run).rows} == {reasons.NO_MIDDLE.code}


def test_show_tells_two_written_rows_of_one_id_apart_by_their_metrics(run):
    rows = _lines(run)
    big = next(r for r in rows if r["id"] == "big-tail")
    other = json.loads(json.dumps(big))
    other["compression_metrics"]["compressed_tokens"] += 1
    _write(run, [other, *rows])  # the wrong one first
    found = find_row(load_report(run), "big-tail")
    assert found.row["compression_metrics"] == big["compression_metrics"]


def test_show_finds_a_listed_row_written_without_its_metrics_by_its_id(run):
    rows = _lines(run)
    for r in rows:
        r.pop("compression_metrics", None)
    _write(run, rows)
    found = find_row(load_report(run), "big-tail")
    assert found.row["id"] == "big-tail" and found.metrics is not None


def test_fixes_are_asked_only_of_rows_over_the_limit_that_did_not_fail():
    report = _hand_report(None)
    report.rows = [r for r in report.rows if r.failed]
    assert find_fixes(report, CONFIG) is None
    # a failed row is left as it was, so it is usually over the target too
    for r in report.rows:
        r.metrics.still_over_limit = True
    assert find_fixes(report, CONFIG) is None


def test_a_stored_table_is_read_when_the_settings_match(run):
    report = load_report(run)
    settle_fixes(report, CONFIG)
    assert report.fixes is not None and report.metrics is not None
    report.metrics["remedies"] = {"version": STORED_VERSION,
                                  "settings": CONFIG.run_settings(),
                                  "table": to_stored(report.fixes)}
    again = load_report(run)
    again.metrics = report.metrics
    settle_fixes(again, CONFIG)
    assert again.fixes_source == "stored"
    assert again.fixes is not None and again.fixes.over.over == 3
    assert not any(line.startswith("  (re-planned") for line in format_report(again).split("\n"))
    # a note too long for one line wraps at 80 columns
    again.fixes_source = "x" * 75 + " y"
    lines = format_report(again).split("\n")
    at = lines.index("  (" + "x" * 75)
    assert lines[at + 1] == "   y)"


# --- more of the text: sections, widths, defaults ----------------------------------------

def test_more_report_sections_and_their_defaults():
    assert distill_lines({"turns": 3}) == [
        "  distill                   0   tokens saved in 3 tool turns of 0 rows"]
    assert windows_lines({"windowed_rows": 1, "windows": 3}) == [
        "  windows                   3   from 1 source rows (3.0 per row); rows out 0",
        "  window summaries          0   assistant tokens trained 0 of 0 (0%)",
    ]
    fidelity = format_report.__globals__["_fidelity_lines"]
    assert fidelity({"count": 0, "invented_rows": 1}) == []
    assert fidelity({"repair_requests": 3}) == [
        "  low fidelity              0   rows below the bar after 3 repair requests"]
    assert fidelity({"low_fidelity_rows": 1}) == [
        "  low fidelity              1   rows below the bar after 0 repair requests"]
    out = Path("/runs/x/out.jsonl")
    one = {"summary": {"total_trajectories": 1, "trajectories_compressed": 1},
           "distill": {"turns": 2, "tokens_saved": 40, "rows": 1}}
    lines = format_report(RunReport(out, finished_layout(out), one)).split("\n")
    assert lines[2] == "  compressed                1  100.0%"
    assert "  distill                  40   tokens saved in 2 tool turns of 1 rows" in lines


def test_a_long_output_path_keeps_its_end():
    out = Path("/runs/" + "deep/" * 20 + "out.jsonl")
    line = format_report(RunReport(out, finished_layout(out), None)).split("\n")[0]
    assert line == "Run output …" + str(out)[-68:]


def test_the_id_column_is_at_most_24_wide_and_counts_align_right():
    out = Path("/runs/x/out.jsonl")
    m = TrajectoryMetrics(original_tokens=1200, compressed_tokens=900, still_over_limit=True)
    row = FlaggedRow(Location("in.jsonl", 1, 0), "i" * 40, reasons.NO_MIDDLE.text, m,
                     m.to_dict(), code=reasons.NO_MIDDLE.code)
    lines = format_report(RunReport(out, finished_layout(out), None, [row])).split("\n")
    start = lines.index("Still over the limit or failed: 1 rows (0 failed), worst first")
    assert lines[start + 1:start + 3] == [
        "  location    id                        before  after  reason",
        "  in.jsonl:1  " + "i" * 23 + "…   1,200    900  no compressible middle",
    ]


def test_show_wraps_a_long_failure_at_80_columns_and_clips_a_long_location(counter):
    turns = HAND_ROWS[0]["conversations"]
    tokens = counter.count_many([t["value"] for t in turns])
    failed = TrajectoryMetrics(original_tokens=sum(tokens), compressed_tokens=sum(tokens),
                               original_turns=6, compressed_turns=6, error="x" * 69 + " y")
    row = {**HAND_ROWS[0], "id": "r" * 60}
    found = FoundRow(Location("/data/" + "folder/" * 4 + "in.jsonl", 1, 0), row, failed)
    lines = format_found(found, build_timeline(turns, tokens, failed, CONFIG)).split("\n")
    # the prefix leaves 5 columns: the location gets its floor of 12, its end kept
    assert lines[0] == "Trajectory " + "r" * 60 + " at …/in.jsonl:1"
    assert lines[1:3] == ["  failed: " + "x" * 69, "    y"]
