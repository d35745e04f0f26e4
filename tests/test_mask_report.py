"""The strategy's aggregates (§19) in `_metrics.json`, the run summary, `report` (text and
``--json``) and the HTML page, checked against the rows as written: every figure is
recounted here from the rows' own ``compression_metrics``."""

from __future__ import annotations

import json

from tests.cli_helpers import invoke_cli, read_jsonl
from tests.test_mask import counter, openai_row, sharegpt_row
from trajectory_compressor.dialects.messages import Messages


def test_aggregates_match_the_rows(tmp_path):
    rows = []
    for i in range(3):
        row = openai_row()
        row["id"] = f"o{i}"
        rows.append(row)
    small = {"id": "small", "messages": [{"role": "user", "content": "hi"},
                                         {"role": "assistant", "content": "hello"}]}
    rows.append(small)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    size = sum(counter().count_many([t["value"] for t in Messages().turns(rows[0])]))
    out = tmp_path / "out.jsonl"
    run = invoke_cli("compress", str(source), "-o", str(out), "--summarizer", "extractive",
                     "--no-cache", "--target-max-tokens", str(size * 7 // 10),
                     "--summary-target-tokens", "100", "--strategy", "hybrid")
    assert run.returncode == 0, run.stderr
    written = read_jsonl(out)
    over = [r["compression_metrics"] for r in written
            if "compression_metrics" in r and not r["compression_metrics"]["skipped_under_target"]]
    assert len(over) == 3
    section = json.loads((tmp_path / "out_metrics.json").read_text())["strategy"]
    by: dict[str, int] = {}
    for m in over:
        by[m["strategy_used"]] = by.get(m["strategy_used"], 0) + 1
    assert section["rows_by_strategy"] == by == {"mask": 3}
    assert section["masked_rows"] == 3
    assert section["masked_turns"] == sum(m["masked_turns"] for m in over) > 0
    assert section["masked_tokens"] == sum(m["masked_tokens"] for m in over) > 0
    assert section["assistant_tokens_kept"] == 1.0
    assert section["assistant_tokens_before"] == section["assistant_tokens_after"] > 0
    # The run summary says it.
    assert "rows over the target: mask 3" in run.stdout
    assert f"{section['masked_tokens']:,}   tokens off {section['masked_turns']} tool " \
           "turns of 3 rows" in run.stdout
    assert "100.0%   of " in run.stdout
    # report: text, JSON, HTML.
    report = invoke_cli("report", str(out))
    assert report.returncode == 0, report.stderr
    assert "rows over the target: mask 3" in report.stdout
    data = json.loads(invoke_cli("report", str(out), "--json").stdout)
    assert data["metrics"]["strategy"] == section
    page = tmp_path / "page.html"
    html = invoke_cli("report", str(out), "--html", str(page))
    assert html.returncode == 0, html.stderr
    text = page.read_text(encoding="utf-8")
    assert "Assistant tokens kept" in text and "100.0%" in text
    assert f"{section['masked_turns']:,} tool outputs masked" in text


def test_summarize_reports_the_assistant_share_it_keeps(tmp_path):
    row = sharegpt_row()
    source = tmp_path / "in.json"
    source.write_text(json.dumps([row]), encoding="utf-8")
    out = tmp_path / "out.json"
    run = invoke_cli("compress", str(source), "-o", str(out), "--summarizer", "extractive",
                     "--no-cache", "--target-max-tokens", "4000", "--summary-target-tokens",
                     "100")
    assert run.returncode in (0, 1), run.stderr
    metrics = json.loads(out.read_text(encoding="utf-8"))[0]["compression_metrics"]
    assert metrics["strategy_used"] == "summarize" and metrics["masked_turns"] == 0
    # One sidecar naming rule for every container: out.json -> out_metrics.json.
    section = json.loads((tmp_path / "out_metrics.json").read_text())["strategy"]
    assert section["rows_by_strategy"] == {"summarize": 1}
    assert section["assistant_tokens_kept"] == metrics["assistant_tokens_kept"] < 1.0
    assert round(section["assistant_tokens_after"] / section["assistant_tokens_before"], 4) \
        == section["assistant_tokens_kept"]
