"""`compress` computes "what would fix it" once, at the end of the run, and stores it with
the run; `report` and `report --html` read it instead of re-planning (issue 40 item 2).
Old runs without the table, or a report under other settings, re-plan and say so."""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import invoke_cli
from tests.sample_files import sample_head
from trajectory_compressor.core.remedies import Entry, Fixes, Remedy
from trajectory_compressor.engine.replan import OverRow, OverRows, WhatWouldFix
from trajectory_compressor.engine.stored_fixes import _NO_ROW, from_stored, to_stored

ARGS = ("--target-max-tokens", "2000", "--summary-target-tokens", "200", "--no-cache",
        "-q", "--no-config")


def test_a_table_reads_back_as_it_was_written():
    last = Remedy("protect_last", ("--protect-last-n-turns", "1"), (("protect_last_n_turns", 1),))
    tool = Remedy("first_tool", ("--no-protect-first-tool",), (("protect_first_tool", False),))
    over = OverRows(limit=50, over=3, failed=1,
                    rows=[OverRow("a.jsonl:1", "x", "head_over", 2100, _NO_ROW),
                          OverRow("a.jsonl:4", 7, "middle_used_up", 2500, _NO_ROW)],
                    not_examined=[("a.jsonl:9", "its input is gone")])
    fixes = Fixes(2, [Entry((last,), frozenset({1})), Entry((tool,), frozenset())],
                  Entry((last, tool), frozenset({0, 1})), None, 3)
    table = WhatWouldFix(over, fixes, True, 200, 2000, {0: [tool]})
    stored = json.loads(json.dumps(to_stored(table)))  # through JSON, as in the file
    back = from_stored(stored)
    assert back.to_dict() == table.to_dict()
    assert back.fixes.best == fixes.best and back.head_help == {0: [tool]}
    assert back.fixes.useless == [Entry((tool,), frozenset())]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fixes")
    src = sample_head("trajectories.jsonl", tmp)
    out = tmp / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                        *ARGS)
    assert result.returncode == 0, result.stderr
    return out, tmp / "out_metrics.json"


def test_compress_stores_the_table_and_report_reads_it(run):
    out, metrics_file = run
    metrics = json.loads(metrics_file.read_text())
    section = metrics["remedies"]
    over = metrics["summary"]["trajectories_still_over_limit"]
    assert section["table"]["over"]["over"] == over > 0
    assert section["settings"] == metrics["settings"] and section["cpu_seconds"] >= 0
    stored = json.loads(invoke_cli("report", str(out), "--json", "--no-config").stdout)
    assert stored["remedies_source"] == "stored"
    # The same table as re-planning the run's rows from its files (the path every report
    # took before): the section removed, the report re-plans and says why.
    without = {k: v for k, v in metrics.items() if k != "remedies"}
    metrics_file.write_text(json.dumps(without))
    try:
        replanned = json.loads(invoke_cli("report", str(out), "--json", "--no-config").stdout)
        text = invoke_cli("report", str(out), "--no-config").stdout
    finally:
        metrics_file.write_text(json.dumps(metrics))
    assert replanned["remedies_source"].startswith("re-planned here in ")
    assert replanned["remedies_source"].endswith("this run stored no table (an older version, "
                                                 "the Ray engine or a resumed run)")
    # The run keeps its first 20 rows over the limit, report re-plans up to 50: with fewer
    # over the limit, the same table.
    assert stored["remedies"]["max_rows"] == 20 and replanned["remedies"]["max_rows"] == 50
    assert over <= 20
    assert {k: v for k, v in replanned["remedies"].items() if k != "max_rows"} == \
        {k: v for k, v in stored["remedies"].items() if k != "max_rows"}
    assert "  (re-planned here in " in text and "What would fix it: " in text


def test_a_report_under_other_settings_re_plans_and_says_so(run):
    out, _ = run
    data = json.loads(invoke_cli("report", str(out), "--json", "--no-config",
                                 "--target-max-tokens", "2500").stdout)
    assert data["remedies_source"].endswith("the settings differ from those the run stored "
                                            "its table under")
    assert data["remedies"]["target_max_tokens"] == 2500


def test_the_html_page_shows_the_stored_table(run, tmp_path):
    out, metrics_file = run
    page = tmp_path / "run.html"
    result = invoke_cli("report", str(out), "--html", str(page), "--no-config")
    assert result.returncode == 0, result.stderr
    html = page.read_text(encoding="utf-8")
    assert 'id="fixes"' in html and "re-planned here" not in html
    table = json.loads(metrics_file.read_text())["remedies"]["table"]
    for entry in table["fixes"]["alone"]:
        if entry["fixed"]:
            assert " ".join(f for r in entry["remedies"] for f in r["flags"]) in html


def test_a_damaged_table_is_re_planned(run, tmp_path):
    out, metrics_file = run
    metrics = json.loads(metrics_file.read_text())
    damaged = {**metrics, "remedies": {**metrics["remedies"], "table": {"over": []}}}
    metrics_file.write_text(json.dumps(damaged))
    try:
        data = json.loads(invoke_cli("report", str(out), "--json", "--no-config").stdout)
    finally:
        metrics_file.write_text(json.dumps(metrics))
    assert data["remedies_source"].endswith("its stored table is damaged")
    assert data["remedies"]["rows_over"] == metrics["summary"]["trajectories_still_over_limit"]
