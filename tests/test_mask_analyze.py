"""`analyze` with strategies (§19): summarize, mask and hybrid side by side per target, the
one that keeps the most training signal at the fewest calls, and `--strategy` /
`--mask-keep-last` among the remedies of "What would fix it".

The rows are `tests.test_mask`'s coding-agent rows (a file view per step). Expected
figures follow from what each strategy does by definition: masking makes no summary and
keeps every assistant token; a summary of the middle removes the assistant turns in it.
"""

from __future__ import annotations

import json

from tests.cli_helpers import invoke_cli
from tests.test_mask import counter, openai_row
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.remedies import MASK_KEEP, STRATEGY, ladders
from trajectory_compressor.dialects.messages import Messages
from trajectory_compressor.inspect.analyze import analyze


def size_of(row: dict) -> int:
    return sum(counter().count_many([t["value"] for t in Messages().turns(row)]))


def write_rows(path, n: int = 3) -> dict:
    rows = []
    for i in range(n):
        row = openai_row()
        row["id"] = f"o{i}"
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows[0]


def test_side_by_side_where_masking_is_enough(tmp_path):
    path = tmp_path / "rows.jsonl"
    row = write_rows(path)
    target = size_of(row) * 7 // 10
    config = CompressionConfig(summarizer="extractive", target_max_tokens=target,
                               summary_target_tokens=100)
    data = analyze(str(path), config, counter=counter()).to_dict()
    side = data["targets"][0]["strategies"]
    assert side["rows_over"] == 3
    summarize, mask, hybrid = side["summarize"], side["mask"], side["hybrid"]
    # Masking brings every row under with no summary and every assistant token kept;
    # hybrid then has nothing to summarize; summarize makes one summary a row.
    assert mask["rows_under_after"] == hybrid["rows_under_after"] == 3
    assert mask["summaries"] == hybrid["summaries"] == 0 and summarize["summaries"] == 3
    assert mask["assistant_tokens_kept"] == hybrid["assistant_tokens_kept"] == 1.0
    assert summarize["assistant_tokens_kept"] < 1.0
    assert mask["assistant_tokens_before"] == summarize["assistant_tokens_before"] > 0
    assert mask["tokens_before"] == 3 * size_of(row)
    assert mask["tokens_after"] <= 3 * target
    # Ties on rows over, share and calls: the first listed of mask and hybrid.
    assert side["best"] == "mask"


def test_side_by_side_where_a_summary_is_needed(tmp_path):
    path = tmp_path / "rows.jsonl"
    row = write_rows(path, 2)
    config = CompressionConfig(summarizer="extractive", target_max_tokens=size_of(row) // 3,
                               summary_target_tokens=100)
    data = analyze(str(path), config, counter=counter()).to_dict()
    side = data["targets"][0]["strategies"]
    summarize, mask, hybrid = side["summarize"], side["mask"], side["hybrid"]
    assert mask["rows_still_over"] == 2 and mask["summaries"] == 0
    assert hybrid["summaries"] == summarize["summaries"] == 2
    assert hybrid["rows_still_over"] <= summarize["rows_still_over"]
    assert summarize["assistant_tokens_kept"] <= hybrid["assistant_tokens_kept"] < 1.0
    assert side["best"] in ("hybrid", "summarize")
    assert side["best"] == ("hybrid" if hybrid["assistant_tokens_kept"]
                            > summarize["assistant_tokens_kept"] else "summarize")


def test_the_text_shows_the_strategies_and_the_remedies(tmp_path):
    path = tmp_path / "rows.jsonl"
    row = write_rows(path, 2)
    target = size_of(row) // 3
    proc = invoke_cli("analyze", str(path), "--summarizer", "extractive",
                      "--target-max-tokens", str(target), "--summary-target-tokens", "100",
                      "--strategy", "mask")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Strategies on the rows over the target (exact; --strategy)" in out
    for label in ("summarize", "mask", "hybrid", "rows under / still over",
                  "summaries (LLM calls)", "assistant tokens kept"):
        assert label in out
    assert "keeps the most training signal at the fewest calls" in out
    # Under --strategy mask both rows stay over; hybrid brings them under: a remedy.
    fixes = out[out.index("What would fix it"):]
    line = next(x for x in fixes.splitlines() if x.strip().startswith("--strategy hybrid"))
    assert line.rstrip().endswith("2 of 2")


def test_ladders_offer_a_strategy_and_fewer_kept_outputs():
    summarize = ladders(CompressionConfig())
    # Nothing is masked: no rung of keep-last can matter, and hybrid seldom helps.
    assert STRATEGY not in summarize and MASK_KEEP not in summarize
    masking = ladders(CompressionConfig(strategy="mask", mask_keep_last=3))
    assert [r.command for r in masking[STRATEGY]] == ["--strategy hybrid"]
    assert [r.command for r in masking[MASK_KEEP]] == \
        ["--mask-keep-last 2", "--mask-keep-last 1", "--mask-keep-last 0"]
    hybrid = ladders(CompressionConfig(strategy="hybrid", mask_keep_last=0))
    assert STRATEGY not in hybrid and MASK_KEEP not in hybrid
