"""A row's metrics describe the row as written. An alternating LLaMA-Factory ShareGPT row
gets its summary joined to the observation before the region (so the row still
alternates): it has one turn fewer than a row whose summary is a turn of its own, and
its count is the joined text's."""

from __future__ import annotations

import json

from tests.fixtures_runs import HAND_CONFIG, compress_run, row, words
from trajectory_compressor.core.config import CompressionConfig

# System column, then human, (function_call, observation) × 5, gpt: 12 turns, 10 tokens each.
LF_TAGS = {"human": "human", "gpt": "function_call", "tool": "observation"}


def lf_row(row_id: str) -> dict:
    hermes = row(row_id, "HGTGTGTGTGTG", [10] * 12)["conversations"]
    conversations = [{"from": LF_TAGS[t["from"]], "value": t["value"]} for t in hermes]
    conversations[-1]["from"] = "gpt"
    return {"id": row_id, "system": words(10), "tools": "[]", "conversations": conversations}


def test_a_joined_summary_is_not_counted_as_a_turn_of_its_own(tmp_path, counter):
    source = tmp_path / "lf.json"
    source.write_text(json.dumps([lf_row("a"), lf_row("b")]), encoding="utf-8")
    out = tmp_path / "out.json"
    compress_run(source, out, CompressionConfig(**HAND_CONFIG, summarizer="extractive"), counter)
    for written in json.loads(out.read_text()):
        m = written["compression_metrics"]
        assert m["was_compressed"] and m["original_turns"] == 13  # the system column too
        # The summary sits inside an observation: no turn holds only the summary.
        values = [t["value"] for t in written["conversations"]]
        assert not any(v.startswith("[CONTEXT SUMMARY]") for v in values)
        assert sum("[CONTEXT SUMMARY]" in v for v in values) == 1
        assert m["compressed_turns"] == 1 + len(values)
        assert m["turns_removed"] == 13 - m["compressed_turns"]
        exact = sum(counter.count_many([written["system"], *values]))
        assert m["compressed_tokens"] == exact
        assert m["tokens_saved"] == m["original_tokens"] - exact == 130 - exact
