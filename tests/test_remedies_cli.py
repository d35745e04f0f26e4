"""'What would fix it' through the commands a person runs (issue 25): `analyze
--over-limit-strategy`, then `compress`, then `report` as text, `--json`, `--html` and the
page in Chromium, on the rows of `remedy_rows` (their outcomes worked out by hand there)
in every dialect and container.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests import remedy_rows as hand
from tests.cli_helpers import invoke_cli
from tests.test_html_report import (
    assert_loads_nothing,
    browser,  # noqa: F401 - the fixture
    open_page,
)
from tests.test_remedies import BEST, check_table
from trajectory_compressor.app.textfmt import display_width
from trajectory_compressor.engine.layout import finished_layout

CORPORA = [pytest.param(d, c, id=f"{d}-{c}") for d, c in hand.CORPORA]


def compressed(tmp_path, dialect: str, container: str, *extra: str):
    """The corpus compressed with the hand settings: (settings file, input, output)."""
    settings = hand.write_settings(tmp_path)
    src = hand.write_corpus(tmp_path, dialect, container)
    out = tmp_path / f"out.{container}"
    run = invoke_cli("compress", str(src), "-o", str(out), "--config", str(settings),
                     "--quiet", "--no-cache", *extra)
    assert run.returncode == 0, run.stderr
    forget_table(out)
    return settings, src, out


def forget_table(out) -> None:
    """The run's metrics without the table compress stored (issue 40 item 2): these tests
    are about `report` re-planning from the run's files, as it does for older runs."""
    from trajectory_compressor.engine.layout import finished_layout

    path = finished_layout(out).metrics
    metrics = json.loads(path.read_text(encoding="utf-8"))
    metrics.pop("remedies", None)
    path.write_text(json.dumps(metrics), encoding="utf-8")


@pytest.mark.parametrize(("dialect", "container"), CORPORA)
def test_analyze_previews_the_second_pass_and_what_would_fix_the_rest(dialect, container,
                                                                      tmp_path):
    settings = hand.write_settings(tmp_path)
    src = hand.write_corpus(tmp_path, dialect, container)
    run = invoke_cli("analyze", str(src), "--config", str(settings), "--json", "-")
    assert run.returncode == 0, run.stderr
    [target] = json.loads(run.stdout)["targets"]
    assert target["metrics"]["summary"]["trajectories_still_over_limit"] == 3
    check_table(target["remedies"])
    # With the second pass the "elide" row fits (its 153-token output gives 53); the two
    # others need what the second pass cannot do.
    run = invoke_cli("analyze", str(src), "--config", str(settings), "--json", "-",
                     "--over-limit-strategy", "elide_tool_outputs")
    assert run.returncode == 0, run.stderr
    [target] = json.loads(run.stdout)["targets"]
    metrics = target["metrics"]
    assert metrics["summary"]["trajectories_still_over_limit"] == 2
    assert metrics["over_limit"]["rows_elided"] == 1
    assert target["remedies"]["best"]["flags"] == ("--protect-last-n-turns 2 "
                                                   "--no-protect-first-tool")
    # The text: the table, within 80 columns.
    run = invoke_cli("analyze", str(src), "--config", str(settings))
    assert run.returncode == 0, run.stderr
    text = run.stdout[run.stdout.index("What would fix it"):]
    assert text.startswith("What would fix it: 3 rows still over the limit\n")
    assert BEST in " ".join(text.split())
    for line in run.stdout.splitlines():
        assert display_width(line) <= 80, line


def test_analyze_refuses_an_unknown_strategy(tmp_path):
    src = hand.write_corpus(tmp_path, "hermes", "jsonl")
    run = invoke_cli("analyze", str(src), "--over-limit-strategy", "shorten")
    assert run.returncode == 2
    assert "over_limit_strategy must be one of keep, elide_tool_outputs" in run.stderr


@pytest.mark.parametrize(("dialect", "container"), CORPORA)
def test_report_prints_the_table_in_text_json_and_html(dialect, container, tmp_path):
    settings, _src, out = compressed(tmp_path, dialect, container)
    run = invoke_cli("report", str(out), "--config", str(settings), "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    check_table(data["remedies"])
    assert data["remedies"]["not_examined"] == []
    run = invoke_cli("report", str(out), "--config", str(settings))
    assert run.returncode == 0, run.stderr
    assert "What would fix it: 3 rows still over the limit" in run.stdout
    assert BEST in " ".join(run.stdout.split())
    html = tmp_path / "page.html"
    run = invoke_cli("report", str(out), "--config", str(settings), "--html", str(html))
    assert run.returncode == 0, run.stderr
    page = assert_loads_nothing(html.read_text(encoding="utf-8"))
    cells = [text for cls, text in page.cells if cls in ("mono", "num")]
    assert "--protect-last-n-turns 2" in cells and "2 of 3" in cells
    assert "--summary-target-tokens 100" in cells and "--no-protect-first-tool" not in cells
    assert BEST in html.read_text(encoding="utf-8")


def test_report_says_which_rows_it_could_not_re_plan(tmp_path):
    settings, src, out = compressed(tmp_path, "hermes", "jsonl")
    src.rename(tmp_path / "moved.jsonl")
    run = invoke_cli("report", str(out), "--config", str(settings), "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)["remedies"]
    # "tail" and "head" got a summary: only their input holds the turns it replaced.
    # "elide" got none and is read from the output: a summary of 100, the second pass or
    # two protected last turns each bring it under.
    assert (data["rows_over"], data["rows_examined"]) == (3, 1)
    assert [r["location"].rsplit(":", 1)[-1] for r in data["not_examined"]] == ["1", "2"]
    assert all("not among the run's inputs that still exist" in r["why"]
               for r in data["not_examined"])
    alone = {e["flags"]: e["rows_under"] for e in data["alone"] if e["rows_under"]}
    assert {k: v for k, v in alone.items() if not k.startswith("--target")} == {
        "--protect-last-n-turns 2": 1, "--over-limit-strategy elide_tool_outputs": 1,
        "--summary-target-tokens 100": 1}
    run = invoke_cli("report", str(out), "--config", str(settings))
    assert "not examined:" in run.stdout and "(the first" not in run.stdout


def test_report_re_plans_rows_the_run_moved_to_the_over_limit_file(tmp_path):
    settings = hand.write_settings(tmp_path)
    settings.write_text(hand.HAND_YAML + "processing: {save_over_limit: false}\n",
                        encoding="utf-8")
    src = hand.write_corpus(tmp_path, "lf_sharegpt", "json")
    out = tmp_path / "out.json"
    run = invoke_cli("compress", str(src), "-o", str(out), "--config", str(settings),
                     "--quiet")
    assert run.returncode == 0, run.stderr
    assert len(json.loads(out.read_text(encoding="utf-8"))) == 2  # fits, short
    entries = finished_layout(out).over_limit.read_text(encoding="utf-8").splitlines()
    assert all("trajectory" in json.loads(line) for line in entries)
    run = invoke_cli("report", str(out), "--config", str(settings), "--json")
    assert run.returncode == 0, run.stderr
    check_table(json.loads(run.stdout)["remedies"])


def test_report_of_a_run_with_nothing_over_has_no_table(tmp_path):
    settings, _src, out = compressed(tmp_path, "hermes", "jsonl", "--target-max-tokens",
                                     "2000")
    run = invoke_cli("report", str(out), "--config", str(settings), "--target-max-tokens",
                     "2000", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["remedies"] is None
    run = invoke_cli("report", str(out), "--config", str(settings), "--target-max-tokens",
                     "2000")
    assert "What would fix it" not in run.stdout


def test_the_page_shows_the_table_in_chromium(tmp_path, browser):  # noqa: F811
    settings, _src, out = compressed(tmp_path, "openai", "jsonl")
    html = tmp_path / "page.html"
    run = invoke_cli("report", str(out), "--config", str(settings), "--html", str(html))
    assert run.returncode == 0, run.stderr
    page, seen = open_page(browser, html)
    card = page.locator("#fixes")
    assert card.is_visible()
    rows = card.locator("table.fixes tbody tr")
    texts = [" ".join(t.split()) for t in rows.all_inner_texts()]
    assert texts[:3] == ["--protect-last-n-turns 2 2 of 3",
                         "--over-limit-strategy elide_tool_outputs 1 of 3",
                         "--summary-target-tokens 100 1 of 3"]
    assert texts[3].startswith("--target-max-tokens ") and texts[3].endswith("3 of 3")
    assert BEST in card.locator("p.best code").inner_text()
    assert "--no-protect-first-tool or a larger target" in card.inner_text()
    assert seen["errors"] == [] and seen["dialogs"] == [] and all(
        url.startswith("file:") for url in seen["requests"])


def test_page_text_from_data_stays_text(tmp_path):
    """A row id and a file name that look like markup reach the page only escaped."""
    settings = hand.write_settings(tmp_path)
    rows = hand.rows_of("hermes")
    rows[1]["id"] = "</script><img src=x onerror=alert(1)>"
    folder = tmp_path / "<b>odd<i>"
    folder.mkdir()
    src = folder / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert invoke_cli("compress", str(src), "-o", str(out), "--config", str(settings),
                      "-q").returncode == 0
    forget_table(out)
    shutil.rmtree(folder)  # the summarized rows cannot be re-planned: said on the page
    html = tmp_path / "page.html"
    run = invoke_cli("report", str(out), "--config", str(settings), "--html", str(html))
    assert run.returncode == 0, run.stderr
    text = html.read_text(encoding="utf-8")
    assert_loads_nothing(text)
    assert "<b>odd" not in text.split("<script")[0] and "&lt;b&gt;odd" in text
    assert "not examined: " in text


def manual_flow() -> tuple[list[str], str]:
    """The commands of the manual's "Rows still over the limit" (docs/over-limit.md, up to
    its reason codes) and the table it shows."""
    from tests.cli_helpers import ROOT

    page = (ROOT / "docs" / "over-limit.md").read_text(encoding="utf-8")
    section = page[page.index("# Rows still over the limit\n"):
                   page.index("## Why, in detail: the reason codes\n")]
    blocks = section.split("```")
    commands = [line for line in blocks[1].splitlines() if line.strip()]
    table = "\n".join(line.removeprefix("   ") for line in blocks[3].splitlines()).strip("\n")
    return commands, table


def test_the_manual_flow_runs_as_written(tmp_path):
    """analyze -> the table -> compress with its flags -> report, on the rows of the
    bundled sample the manual shows (the five over the limit, among others)."""
    from tests.cli_helpers import ROOT

    lines = (ROOT / "data_samples" / "trajectories.jsonl").read_text(
        encoding="utf-8").splitlines()
    (tmp_path / "my.jsonl").write_text(
        "\n".join([*lines[:10], lines[19], lines[31], lines[43]]) + "\n", encoding="utf-8")
    commands, table = manual_flow()
    assert [c.split()[:2] for c in commands] == [
        ["trajectory-compressor", "analyze"], ["trajectory-compressor", "compress"],
        ["trajectory-compressor", "report"]]
    outputs = []
    for command in commands:
        run = invoke_cli(*command.split()[1:], cwd=tmp_path)
        assert run.returncode == 0, (command, run.stderr)
        outputs.append(run.stdout)
    analyzed, done, reported = outputs
    shown = analyzed[analyzed.index("What would fix it"):]
    assert shown.startswith(table + "\n"), shown
    assert "still over limit          0" in done
    assert "No row is still over the limit, and none failed." in reported
    # The flags the manual passes are the table's "together" line.
    assert table.splitlines()[-1].strip() in commands[1]


def test_a_run_counted_with_a_chat_template_file(tmp_path):
    """The metrics file keeps the template's hash and (issue 40) its path: report re-plans
    with it; without the file it cannot count the rows, and says so for each; given it (in
    --config), it re-plans them in that counting mode, and its proposal holds when
    compress runs it."""
    from tests.template_tokenizer import CHATML

    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    settings = hand.write_settings(tmp_path)
    settings.write_text(hand.HAND_YAML + f"tokenizer: {{counting: chat_template, "
                        f"chat_template: {json.dumps(str(template))}}}\n", encoding="utf-8")
    src = hand.write_corpus(tmp_path, "openai", "jsonl")
    out = tmp_path / "out.jsonl"
    run = invoke_cli("compress", str(src), "-o", str(out), "--config", str(settings), "-q")
    assert run.returncode == 0, run.stderr
    over = json.loads(finished_layout(out).metrics.read_text())["summary"][
        "trajectories_still_over_limit"]
    assert over >= 1
    forget_table(out)
    run = invoke_cli("report", str(out), "--json")
    assert run.returncode == 0, run.stderr
    recorded = json.loads(run.stdout)["remedies"]
    assert (recorded["rows_over"], recorded["rows_examined"]) == (over, over)
    template.rename(tmp_path / "moved.jsonl")
    try:
        run = invoke_cli("report", str(out), "--json")
    finally:
        (tmp_path / "moved.jsonl").rename(template)
    assert run.returncode == 0, run.stderr
    blind = json.loads(run.stdout)["remedies"]
    assert (blind["rows_over"], blind["rows_examined"]) == (over, 0)
    assert all("cannot be counted here" in r["why"] for r in blind["not_examined"])
    run = invoke_cli("report", str(out), "--config", str(settings), "--json")
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)["remedies"]
    assert (seen["rows_over"], seen["rows_examined"], seen["not_examined"]) == (over, over, [])
    best = seen["best"]
    assert best is not None
    again = tmp_path / "again.jsonl"
    run = invoke_cli("compress", str(src), "-o", str(again), "--config", str(settings), "-q",
                     *best["flags"].split())
    assert run.returncode == 0, run.stderr
    left = json.loads(finished_layout(again).metrics.read_text())["summary"][
        "trajectories_still_over_limit"]
    assert left == over - best["rows_under"]


def test_the_rows_examined_are_bounded_and_the_table_says_so(tmp_path, monkeypatch):
    from trajectory_compressor.engine import replan as remedies

    monkeypatch.setattr(remedies, "MAX_ROWS", 2)
    settings, src, out = compressed(tmp_path, "hermes", "jsonl")
    # The first two rows over the limit, in input order: "tail" and "head". "tail" needs
    # two protected last turns at most, "head" its first tool turn unprotected and the
    # second pass: three flags bring both under; "elide" (not examined) is not counted.
    for command in (["analyze", str(src)], ["report", str(out)]):
        run = invoke_cli(*command, "--config", str(settings), "--json", *(
            ["-"] if command[0] == "analyze" else []))
        assert run.returncode == 0, run.stderr
        data = json.loads(run.stdout)
        table = data["targets"][0]["remedies"] if command[0] == "analyze" else data["remedies"]
        assert (table["rows_over"], table["rows_examined"], table["max_rows"]) == (3, 2, 2)
        assert [r["id"] for r in table["rows"]] == ["tail", "head"]
        alone = {e["flags"]: e["rows_under"] for e in table["alone"]}
        assert alone["--protect-last-n-turns 2"] == 1
        assert alone["--over-limit-strategy elide_tool_outputs"] == 0
        assert table["best"]["flags"] == BEST and table["best"]["rows_under"] == 2
        run = invoke_cli(*command, "--config", str(settings))
        assert "(the first 2 of them examined)" in run.stdout


def test_report_without_the_runs_tokenizer_still_reports(tmp_path):
    from trajectory_compressor.counting.tokens import bundled_tokenizer_dir

    tokenizer = tmp_path / "tok"
    shutil.copytree(bundled_tokenizer_dir(), tokenizer)
    settings, _src, out = compressed(tmp_path, "hermes", "jsonl", "--tokenizer",
                                     str(tokenizer))
    shutil.rmtree(tokenizer)
    run = invoke_cli("report", str(out), "--config", str(settings), "--tokenizer",
                     str(tokenizer), "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["figures"]["over_limit"] == 3
    table = data["remedies"]
    assert (table["rows_over"], table["rows_examined"]) == (3, 0)
    assert all("cannot be counted here: cannot load tokenizer" in r["why"]
               for r in table["not_examined"])
