"""`report --html`: the page's content, its safety with hostile rows, the CLI, and the page
in a real headless Chromium (Debian's package, driven by Playwright; no browser download).
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.cli_helpers import invoke_cli, read_jsonl, run_cli
from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, compress_run, row, words, write_jsonl
from trajectory_compressor.app.html_report import render_html
from trajectory_compressor.app.report import load_report
from trajectory_compressor.app.report_data import (
    Histogram,
    ReportData,
    ShownRow,
    collect_report_data,
    unit_edges,
)
from trajectory_compressor.core.config import CompressionConfig

HOSTILE_ID = "</script><img src=x onerror=alert(1)>"
HOSTILE_TEXT = "</script><script>alert(2)</script> <!-- <b>bold</b> &amp; " + words(40)
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]
# Every element the page may hold; nothing that loads (img, link, iframe, object...).
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "main", "header", "footer",
                "section", "h1", "h2", "h3", "p", "div", "span", "code", "b", "table",
                "thead", "tbody", "tr", "th", "td", "button", "script", "svg", "line", "rect",
                "text"}
LOADING_ATTRS = {"src", "href", "srcset", "action", "formaction", "poster", "background",
                 "xlink:href", "data", "ping", "manifest"}


class Page(HTMLParser):
    """The page's elements, attributes, script contents and the text of each table cell."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.cells: list[tuple[str | None, str]] = []  # (class, text) of each td
        self._script: dict[str, str | None] | None = None
        self._cell: str | bool | None = False
        self._text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script, self._text = dict(attrs), []
        elif tag == "td":
            self._cell, self._text = dict(attrs).get("class"), []

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script, "".join(self._text)))
            self._script = None
        elif tag == "td" and self._cell is not False:
            self.cells.append((self._cell, "".join(self._text)))  # type: ignore[arg-type]
            self._cell = False

    def handle_data(self, data):
        self._text.append(data)

    def rows_data(self) -> dict:
        (_attrs, text), = [s for s in self.scripts if s[0].get("type") == "application/json"]
        return json.loads(text)

    def body_rows(self) -> int:
        return sum(1 for tag, attrs in self.tags if tag == "tr" and "data-i" in attrs)


def assert_loads_nothing(page: str) -> Page:
    """No element or style that loads anything; the run's data (which may well mention
    URLs) only inside the JSON block, which is never executed."""
    parsed = Page(page)
    tags = {tag for tag, _ in parsed.tags}
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    for tag, attrs in parsed.tags:
        assert not LOADING_ATTRS & set(attrs), (tag, attrs)
        for value in attrs.values():
            assert not (value or "").lstrip().startswith("//"), (tag, attrs)
    data = next(text for attrs, text in parsed.scripts if attrs.get("type") ==
                "application/json")
    lower = page.replace(data, "").lower()
    for needle in ("http://", "https://", "url(", "@import", "<link", "<img", "<iframe"):
        assert needle not in lower, needle
    csp = [a["content"] for t, a in parsed.tags if t == "meta"
           and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]
    return parsed


def made_data(rows: int = 1, fidelity: bool = True) -> ReportData:
    """A small run put together by hand: one hostile row, and ``rows - 1`` plain ones."""
    timeline = {"target": 100, "compressed": False, "total": 140,
                "parts": {"head": 60, "tail": 80},
                "turns": [[0, 0, 1, "system", 50, "head", "You are a helpful agent."],
                          [1, 1, 2, "human", 10, "head", HOSTILE_TEXT[:60]],
                          [2, 2, 3, "gpt", 80, "tail", "<tool_call>{}</tool_call>"]]}
    shown = [ShownRow("in.jsonl:1", HOSTILE_ID, "the protected head and tail alone exceed "
                      "the target", "head+tail alone > target", "protected_over_target",
                      False, 140, 140, 3, 3, timeline)]
    shown += [ShownRow(f"in.jsonl:{i + 2}", f"row-{i}", "boom", "failed: boom", "failed", True,
                       120 - i, 120 - i, 4, 4, None, "its turns cannot be read")
              for i in range(rows - 1)]
    edges = [0.0, 50.0, 100.0, 150.0]
    fid = Histogram(unit_edges(), [0] * 18 + [1, 0]) if fidelity else None
    metrics = {"summary": {"total_trajectories": 3, "rows_rejected": 0},
               "tokens": {"total_before": 300, "total_after": 280, "total_saved": 20,
                          "overall_compression_ratio": 0.9333},
               "fidelity": {"count": 1, "mean_ratio": 0.9} if fidelity else None}
    if not fidelity:
        del metrics["fidelity"]
    return ReportData(output="out.jsonl", metrics=metrics, target=100, rows=3, compressed=1,
                      skipped=1, over_limit=1, failed=rows - 1,
                      tokens_before=Histogram(edges, [1, 0, 2]),
                      tokens_after=Histogram(edges, [1, 1, 1]), over_before=2, over_after=1,
                      ratios=Histogram(unit_edges(), [0] * 18 + [1, 0]), fidelity=fid,
                      sources={"extractive": 1}, flagged_total=rows, shown=shown)


# The page without a browser

def test_page_loads_nothing_from_anywhere():
    parsed = assert_loads_nothing(render_html(made_data(rows=3)))
    assert [a.get("type") for a, _ in parsed.scripts] == ["application/json", None]


def test_hostile_id_and_turn_text_stay_text():
    page = render_html(made_data())
    assert "<img" not in page and "alert(1)>" not in page
    # Only the page's own two scripts close; the JSON cannot end its element early.
    assert page.count("</script>") == 2
    assert "<script>alert" not in page
    parsed = Page(page)
    assert ("id mono", HOSTILE_ID) in parsed.cells
    data = parsed.rows_data()
    assert data["rows"][0]["id"] == HOSTILE_ID
    assert data["rows"][0]["timeline"]["turns"][1][6] == HOSTILE_TEXT[:60]


def test_fidelity_is_shown_only_when_the_run_has_it():
    assert "Summary fidelity" in render_html(made_data(fidelity=True))
    assert "Summary fidelity" not in render_html(made_data(fidelity=False))


def test_no_flagged_rows_says_so_and_lone_surrogates_do_not_break_the_page():
    data = made_data(rows=1)
    data.shown, data.flagged_total = [], 0
    data.notes = ["bad \ud800 text"]
    page = render_html(data)
    assert "No row is still over the limit, and none failed." in page
    page.encode("utf-8")  # no lone surrogate left


# A real run gathered into a page

@pytest.fixture(scope="module")
def hand_run(tmp_path_factory, counter):
    """HAND_ROWS plus a hostile row (protected turns only: stays over the limit)."""
    tmp = tmp_path_factory.mktemp("hand")
    hostile = row(HOSTILE_ID, "SHGT", [50, 50, 10, 10])
    hostile["conversations"][1]["value"] = HOSTILE_TEXT
    rows = [*HAND_ROWS, hostile]
    src = write_jsonl(tmp / "in.jsonl", rows)
    config = CompressionConfig(summarizer="extractive", **HAND_CONFIG)
    compress_run(src, tmp / "out.jsonl", config, counter)
    return tmp / "out.jsonl", config, rows


def test_histograms_count_every_row_once_in_its_bin(hand_run, counter):
    out, config, rows = hand_run
    data = collect_report_data(load_report(out), config, counter)
    # Tokens before, from the rows' sizes in fixtures_runs (the hostile one counted here).
    before = [35, 205, 265, 120, 195,
              sum(counter.count_many([t["value"] for t in rows[-1]["conversations"]]))]
    edges = data.tokens_before.edges
    steps = {b - a for a, b in itertools.pairwise(edges)}
    assert len(steps) == 1 and edges[0] == 0 and edges[-1] >= max(before)
    expected = [0] * (len(edges) - 1)
    for value in before:
        expected[bisect.bisect_right(edges, value) - 1] += 1
    assert data.tokens_before.counts == expected
    assert data.tokens_before.total == data.tokens_after.total == len(rows)
    # Over the target of 100 before: all but "short"; after: the four rows left over.
    assert (data.over_before, data.over_after) == (5, 4)
    # Two rows got a summary ("fits" and "big-tail"), each a ratio.
    assert data.ratios.total == 2 and data.sources["extractive"] == 2
    # Both summaries carry a fidelity; their regions ("word word ...") hold no item, so
    # the share is 1 by definition (SPEC §15), in the last bin.
    assert data.fidelity is not None and data.fidelity.counts == [0] * 19 + [2]


def test_page_lists_the_worst_rows_up_to_the_cap(hand_run, counter):
    out, config, _ = hand_run
    over = read_jsonl(out.with_name("out_over_limit.jsonl"))
    assert len(over) == 4
    worst = sorted(over, key=lambda e: -e["metrics"]["compressed_tokens"])[:2]
    data = collect_report_data(load_report(out), config, counter, max_rows=2)
    parsed = assert_loads_nothing(page := render_html(data))
    assert parsed.body_rows() == 2
    rows = parsed.rows_data()["rows"]
    assert [r["id"] for r in rows] == [e["id"] for e in worst] == ["small-middle", "big-tail"]
    assert all(r["timeline"] for r in rows)
    assert "Showing the 2 worst of 4 rows; 2 more" in page


# The CLI

@pytest.fixture(scope="module")
def sample_run(tmp_path_factory, sample_jsonl):
    """The sample rows the README shows (the first ten and three more: the five of the 50
    left over the default target, and rows compressed under it), compressed."""
    folder = tmp_path_factory.mktemp("sample")
    lines = sample_jsonl.read_text(encoding="utf-8").splitlines(keepends=True)
    src = folder / "in.jsonl"
    src.write_text("".join([*lines[:10], lines[19], lines[31], lines[43]]), encoding="utf-8")
    out = folder / "out.jsonl"
    proc = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                      "-q")
    assert proc.returncode == 0, proc.stderr
    return out


def test_cli_writes_the_page_and_a_second_run_replaces_it(sample_run):
    page = sample_run.with_name("report.html")
    proc = invoke_cli("report", str(sample_run), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("wrote ") and "5 of 5" in proc.stdout
    first = page.read_bytes()
    assert_loads_nothing(first.decode("utf-8"))
    # An earlier page of ours (its marker kept) is replaced; any other file is not
    # (tests/test_foreign_files.py).
    page.write_bytes(first.replace(b"</body>", b"<p>stale</p></body>"))
    proc = invoke_cli("report", str(sample_run), "--html", str(page), "--max-rows", "3")
    assert proc.returncode == 0, proc.stderr
    second = page.read_text(encoding="utf-8")
    assert second.startswith("<!DOCTYPE html>") and Page(second).body_rows() == 3
    assert not list(page.parent.glob("*.tmp*"))


@pytest.mark.parametrize("where", ["missing-folder", "folder", "metrics-file", "with-show"])
def test_cli_bad_html_path_is_one_sentence(sample_run, where):
    metrics = sample_run.with_name("out_metrics.json")
    before = metrics.read_bytes()
    target = {"missing-folder": sample_run.parent / "nope" / "r.html",
              "folder": sample_run.parent, "metrics-file": metrics,
              "with-show": sample_run.with_name("r.html")}[where]
    extra = ["--show", "0"] if where == "with-show" else []
    proc = invoke_cli("report", str(sample_run), "--html", str(target), *extra)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert metrics.read_bytes() == before


# In a real browser

# Requested last by the tests: while sync_playwright runs, its event loop runs in this
# thread, and a run fixture set up after it could not call asyncio.run.
@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    if chromium is None:
        # CI installs chromium (.ci/run) and sets TC_REQUIRE_BROWSER: there a missing
        # browser is a failure, not a quiet skip.
        if os.environ.get("TC_REQUIRE_BROWSER"):
            pytest.fail("TC_REQUIRE_BROWSER is set but no chromium is on PATH")
        pytest.skip("no chromium on PATH: `apt-get install chromium` to run the browser tests")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not importable (it is in the dev extra)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
        yield b
        b.close()


def open_page(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    seen: dict[str, list[str]] = {"errors": [], "requests": [], "dialogs": []}
    page.on("console", lambda m: m.type == "error" and seen["errors"].append(m.text))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, seen


def column(page, name: str) -> list[str]:
    index = page.locator("#flagged thead th").all_inner_texts().index(name)
    return page.locator(f"#flagged tbody tr td:nth-child({index + 1})").all_inner_texts()


def test_the_page_in_chromium(sample_run, tmp_path, browser):
    html = tmp_path / "report.html"
    proc = run_cli("report", str(sample_run), "--html", str(html))
    assert proc.returncode == 0, proc.stderr
    over = read_jsonl(sample_run.with_name("out_over_limit.jsonl"))
    page, seen = open_page(browser, html)
    assert page.locator("#flagged tbody tr").count() == min(len(over), 200) == 5
    assert not page.locator("#timeline").is_visible()

    # Sorting by id, then by tokens before (twice: ascending).
    by_id = sorted(e["id"] for e in over)
    page.get_by_role("button", name="id", exact=True).click()
    assert column(page, "id") == by_id
    page.get_by_role("button", name="before", exact=True).click()
    page.get_by_role("button", name="before", exact=True).click()
    ascending = [e["id"] for e in sorted(over, key=lambda e: e["metrics"]["original_tokens"])]
    assert column(page, "id") == ascending
    assert page.locator("#flagged th[aria-sort=ascending]").inner_text().startswith("before")

    # Clicking a row shows its turns as written: as many as its metrics say.
    entry = next(e for e in over if e["id"] == ascending[2])
    page.locator("#flagged tbody tr", has_text=entry["id"]).click()
    panel = page.locator("#timeline")
    assert panel.is_visible()
    text = panel.inner_text()
    assert f"Timeline of {entry['id']}" in text and "protected tail" in text
    turns = panel.locator("table.turns tbody tr:not(.group)")
    assert turns.count() == entry["metrics"]["compressed_turns"]
    target = json.loads(sample_run.with_name("out_metrics.json").read_text())["settings"][
        "compression"]["target_max_tokens"]
    assert f"target {target:,}" in text

    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    shutil.copy(tmp_path / "report.png", "/tmp/report.png")
    assert seen["errors"] == [] and seen["dialogs"] == []
    assert seen["requests"] == [html.as_uri()]


def test_hostile_rows_in_chromium_and_the_cap(hand_run, counter, tmp_path, browser):
    out, _, _ = hand_run
    html = tmp_path / "hostile.html"
    proc = run_cli("report", str(out), "--html", str(html), "--max-rows", "3")
    assert proc.returncode == 0, proc.stderr
    page, seen = open_page(browser, html)
    assert page.locator("#flagged tbody tr").count() == 3
    assert page.locator("img").count() == 0
    page.locator("#flagged tbody tr", has_text="onerror").click()
    text = page.locator("#timeline").inner_text()
    assert HOSTILE_ID in text and "</script><script>alert(2)</script>" in text
    assert page.locator("#timeline b, #timeline script").count() == 0
    assert seen["errors"] == [] and seen["dialogs"] == []
    assert seen["requests"] == [html.as_uri()]


def test_windows_of_a_source_row_in_chromium(tmp_path, counter, browser):
    """A windows run (`--output-mode windows`) with a window over the target: the page
    lists the source row once; clicking it shows each of its windows, in order, with its
    tokens, why it is over, and a timeline of as many turns as the window holds."""
    from tests.test_windows_runs import TARGET, agent_row

    src = write_jsonl(tmp_path / "in.jsonl", [agent_row("src-1", 6, counter, 40)])
    out, html = tmp_path / "out.jsonl", tmp_path / "windows.html"
    proc = run_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                   "--output-mode", "windows", "--target-max-tokens", str(TARGET), "--quiet")
    assert proc.returncode == 0, proc.stderr
    written = read_jsonl(out)
    metrics = [r["compression_metrics"] for r in written]
    assert len(written) >= 3 and any(m["still_over_limit"] for m in metrics)
    proc = run_cli("report", str(out), "--html", str(html))
    assert proc.returncode == 0, proc.stderr
    page, seen = open_page(browser, html)
    assert page.locator("#flagged tbody tr").count() == 1
    page.locator("#flagged tbody tr", has_text="src-1").click()
    panel = page.locator("#timeline")
    assert panel.is_visible()
    heads = panel.locator("h4.window").all_inner_texts()
    assert len(heads) == len(written)
    for head, m in zip(heads, metrics, strict=True):
        assert head.startswith(f"Window {m['window']} of {len(written)} \u00b7 "
                               f"{m['compressed_tokens']:,} tokens")
        if m["still_over_limit"]:
            assert head.endswith(", over: " + m["window_over"])
        else:
            assert "over" not in head
    tables = panel.locator("table.turns")
    assert tables.count() == len(written)
    for k, r in enumerate(written):
        turns = tables.nth(k).locator("tbody tr:not(.group)")
        assert turns.count() == len(r["messages"])
    assert seen["errors"] == [] and seen["dialogs"] == []
    assert seen["requests"] == [html.as_uri()]


def test_fidelity_chart_holds_only_the_summaries_written(tmp_path, counter):
    """README: the page's fidelity chart and the metrics file's fidelity section are of the
    summaries written. Under `on_low_fidelity: uncompressed` and a bar of 1.0, the summary
    of row "refused" (its middle holds 25 paths and exit codes: an extractive summary of 100
    tokens cannot keep all of them) is refused, and the second pass cuts its 2,000-token
    tool output instead; the row keeps its `fidelity` record. Row "kept" has a middle of
    plain words, no fact to keep: its share is 1 by definition (SPEC §15), so its summary
    passes the bar and is written. The chart counts that one alone, in the last bin."""
    facts = "\n".join(f"FAIL /repo/src/module_{i}.py:{100 + i * 7} exit {i}" for i in range(25))
    refused = row("refused", "SHGTGTGTTG", [10, 10, 10, 10, 300, 1, 20, 2000, 20, 20])
    refused["conversations"][5]["value"] = facts
    kept = row("kept", "SHGTGTGTTG", [10, 10, 10, 10, 400, 400, 400, 400, 20, 20])
    src = write_jsonl(tmp_path / "in.jsonl", [refused, kept])
    config = CompressionConfig(summarizer="extractive", target_max_tokens=1500,
                               summary_target_tokens=100, protect_last_n_turns=2,
                               add_summary_notice=False, min_fidelity=1.0,
                               on_low_fidelity="uncompressed",
                               over_limit_strategy="elide_tool_outputs")
    out = tmp_path / "out.jsonl"
    compress_run(src, out, config, counter)
    written = {r["id"]: r["compression_metrics"] for r in read_jsonl(out)}
    assert written["refused"]["low_fidelity"] is True
    assert written["refused"]["fidelity"]["ratio"] < 1.0  # the refused summary's record
    assert written["kept"]["compression_region"]["start_idx"] >= 0
    metrics = json.loads(out.with_name("out_metrics.json").read_text(encoding="utf-8"))
    assert metrics["fidelity"]["count"] == 1
    data = collect_report_data(load_report(out), config, counter)
    assert data.fidelity is not None and data.fidelity.counts == [0] * 19 + [1]
