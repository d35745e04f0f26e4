"""`report --show / --html / --json` and `validate` on every dialect and container
`compress` writes (issue 25, item 1): each sample compressed at a target that leaves some
rows under it (left as they were, without metrics) and some over it (flagged).

Expected texts come from the rows as written, read here with each dialect's documented
field names, not through the package's dialects.
"""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import ROOT, invoke_cli, read_jsonl
from tests.sample_files import sample_head
from tests.test_html_report import browser, open_page  # noqa: F401 - the fixture
from trajectory_compressor.app.report import load_report
from trajectory_compressor.app.report_data import collect_report_data
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.engine.layout import finished_layout

SAMPLES = ROOT / "data_samples"
# ``input>format``: the input written out in another container (--output-format), so
# that the OpenAI dialect is seen in Parquet too. Parquet holds no field that is a string
# in one message and a list in another (a row like that is a located reject), so that
# input's content parts are joined into strings first (`parquet_ready`).
SAMPLE_NAMES = ("trajectories.jsonl", "trajectories.parquet", "openai_messages.jsonl",
                "llamafactory_sharegpt.json", "llamafactory_messages.jsonl",
                "openai_messages.jsonl>parquet")
TARGET, SUMMARY = 4000, 200


def written_rows(out):
    """The output's rows, read with the container's own library."""
    if out.suffix == ".parquet":
        return pq.read_table(out).to_pylist()
    if out.suffix == ".json":
        return json.loads(out.read_text(encoding="utf-8"))
    return read_jsonl(out)


def turn_texts(row) -> list[str]:
    """Each turn's text, by the dialect's documented fields: ShareGPT ``conversations``
    of ``{from, value}``; OpenAI / LLaMA-Factory ``messages`` of ``{role, content}``."""
    if "conversations" in row:
        return [t["value"] for t in row["conversations"]]
    texts = []
    for m in row["messages"]:
        content = m.get("content") or ""
        if isinstance(content, list):  # parts: {type, text} (OpenAI), {type, value} (LF)
            content = "\n".join(p.get("text") or p.get("value") or "" for p in content
                                 if p.get("type") != "tool_call")
        texts.append(content)
    return texts


def shown_line(text: str) -> str:
    """The line a timeline shows for a turn: its first one that is not a lone tag such as
    ``<think>``."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if not re.fullmatch(r"</?[\w-]+>", line)), lines[0])


def parquet_ready(source, folder):
    """``source``'s OpenAI rows with every content of text parts joined into one string."""
    rows = read_jsonl(source)
    for row in rows:
        for message in row["messages"]:
            if isinstance(message.get("content"), list):
                message["content"] = "\n".join(p.get("text") or "" for p in message["content"])
    path = folder / source.name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=SAMPLE_NAMES)
def run(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("matrix")
    name, _, container = request.param.partition(">")
    stem, suffix = name.rsplit(".", 1)
    out = tmp / f"{stem}_out.{container or suffix}"
    other = ["--output-format", container] if container else []
    (tmp / "in").mkdir()
    src = sample_head(name, tmp / "in")  # 10 rows (of 50 in the Hermes samples)
    source = parquet_ready(src, tmp) if container == "parquet" else src
    proc = invoke_cli("compress", str(source), "-o", str(out), "--summarizer",
                   "extractive", "--no-cache", "-q", "--target-max-tokens", str(TARGET),
                   "--summary-target-tokens", str(SUMMARY), *other)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(finished_layout(out).metrics.read_text(encoding="utf-8"))["summary"]
    # The matrix means something only with rows of both kinds.
    assert summary["trajectories_skipped_under_target"] >= 1
    assert summary["trajectories_still_over_limit"] >= 1
    return out, summary


def test_show_prints_the_rows_turns(run):
    out, _summary = run
    rows = written_rows(out)
    for index in (0, len(rows) - 1):
        proc = invoke_cli("report", str(out), "--show", str(index))
        assert proc.returncode == 0, proc.stderr
        texts = [shown_line(t)[:12] for t in turn_texts(rows[index]) if t.strip()]
        assert texts
        for text in texts:
            assert text in proc.stdout, (index, text)


def test_json_lists_every_flagged_row_and_counts_every_row(run):
    out, summary = run
    proc = invoke_cli("report", str(out), "--json", "--limit", "0")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    flagged = [r for r in written_rows(out)
               if (r.get("compression_metrics") or {}).get("still_over_limit")]
    assert data["figures"]["rows"] == len(written_rows(out)) == summary["total_trajectories"]
    assert len(data["rows"]) == len(flagged) == summary["trajectories_still_over_limit"]


def test_html_has_a_timeline_for_each_flagged_row_and_charts_every_row(run, tmp_path):
    out, summary = run
    html = tmp_path / "page.html"
    proc = invoke_cli("report", str(out), "--html", str(html))
    assert proc.returncode == 0, proc.stderr
    page = html.read_text(encoding="utf-8")
    start = page.index('<script type="application/json" id="report-data">')
    data = json.loads(page[page.index(">", start) + 1:page.index("</script>", start)])
    assert len(data["rows"]) == summary["trajectories_still_over_limit"]
    for row in data["rows"]:
        assert row["timeline"] is not None and row["note"] == "", row
    # Each timeline holds its row's turns as written (a LLaMA-Factory system column is a
    # turn too).
    written = [len(turn_texts(r)) + bool(r.get("system")) for r in written_rows(out)
               if (r.get("compression_metrics") or {}).get("still_over_limit")]
    assert sorted(len(r["timeline"]["turns"]) for r in data["rows"]) == sorted(written)
    assert "without a readable conversation" not in page
    # The charts hold every row, the ones left under the target too.
    report = load_report(out)
    config = CompressionConfig(target_max_tokens=TARGET, summary_target_tokens=SUMMARY)
    collected = collect_report_data(report, config, TokenCounter.load("deepseek-v4"))
    assert collected.notes == []
    assert collected.tokens_before.total == collected.tokens_after.total == len(
        written_rows(out))


def test_validate_passes_a_fresh_output(run):
    out, summary = run
    over = summary["trajectories_still_over_limit"]
    # Rows the run left over the target are a problem of their own unless allowed.
    proc = invoke_cli("validate", str(out))
    assert proc.returncode == (1 if over else 0), (proc.stdout, proc.stderr)
    proc = invoke_cli("validate", str(out), "--allow-over-limit")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout.startswith(f"{summary['total_trajectories']} rows checked, 0 problems")
    assert f"(target {TARGET:,}, summary {SUMMARY}" in proc.stdout


def test_the_page_shows_a_flagged_openai_rows_timeline(browser, tmp_path):  # noqa: F811
    src = SAMPLES / "openai_messages.jsonl"
    out = tmp_path / "openai_out.jsonl"
    proc = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                   "--no-cache", "-q", "--target-max-tokens", str(TARGET),
                   "--summary-target-tokens", str(SUMMARY))
    assert proc.returncode == 0, proc.stderr
    html = tmp_path / "page.html"
    assert invoke_cli("report", str(out), "--html", str(html)).returncode == 0
    flagged = [r for r in read_jsonl(out)
               if (r.get("compression_metrics") or {}).get("still_over_limit")]
    row = flagged[0]
    page, seen = open_page(browser, html)
    page.locator("#flagged tbody tr", has_text=row["id"]).click()
    panel = page.locator("#timeline")
    assert panel.is_visible()
    assert f"Timeline of {row['id']}" in panel.inner_text()
    turns = panel.locator("table.turns tbody tr:not(.group)")
    assert turns.count() == len(row["messages"])
    assert seen["errors"] == [] and seen["dialogs"] == []
