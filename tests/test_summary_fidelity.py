"""Summary fidelity through the pipeline (issue 17, SPEC §15): measured on every compressed
row, the repair request and the `on_low_fidelity` paths, the references line, the cache
holding accepted summaries only, and the aggregate in the metrics file.

The rows carry hand-written facts (a path, a file name, IDs, an error type, a host:port, a
number with a unit); the fake server's profiles answer from that same list, so every
expected count below is worked out from the row, not from the extractor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import read_jsonl
from tests.fake_llm_server import (
    LOSSY_TEXT,
    FakeLLMServer,
    Recorder,
    facts_reply,
    fenced,
    lossy_reply,
)
from tests.fixtures_runs import words, write_jsonl
from trajectory_compressor.core import reasons
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.core.fidelity import Fidelity
from trajectory_compressor.core.metrics import (
    AggregateMetrics,
    TrajectoryMetrics,
    aggregate_from_state,
    aggregate_state,
)
from trajectory_compressor.core.summary import REFERENCES_LABEL
from trajectory_compressor.engine.job import compress_dataset

# One fact per middle turn (turns 4-11, the region); the tail names three of them again.
FACTS = ["src/app/main.py", "config.yaml", "req_8f2k91", "KeyError", "user_id",
         "localhost:8080", "512 MB", "PR-1234"]
TAIL_FACTS = ["src/app/main.py", "req_8f2k91", "localhost:8080"]
REGION = (4, 12)


def fact_row(row_id: str = "facts") -> dict[str, Any]:
    head = [("system", "You are a coding agent."), ("human", "Fix the failing service."),
            ("gpt", "I will look first."), ("tool", "ok")]
    middle = [("gpt" if i % 2 == 0 else "tool", f"Checked {fact} then " + words(60))
              for i, fact in enumerate(FACTS)]
    tail = [("gpt", "Now again " + " and ".join(TAIL_FACTS) + " " + words(5)),
            ("tool", words(5)), ("gpt", "Done " + words(3)), ("human", "Thanks")]
    return {"id": row_id, "conversations": [{"from": r, "value": v}
                                            for r, v in head + middle + tail]}


def run(tmp_path: Path, server: FakeLLMServer, name: str = "out", rows: int = 1,
        **settings: Any) -> tuple[list[dict], dict]:
    """Compress ``rows`` copies of the fact row through the fake server."""
    src = tmp_path / "in.jsonl"
    if not src.exists():
        write_jsonl(src, [fact_row(f"facts-{i}") for i in range(rows)])
    config = CompressionConfig(
        target_max_tokens=150, summary_target_tokens=60, add_summary_notice=False,
        summarizer="openai", base_url=server.url, api_key_env=None, max_retries=1,
        retry_delay=0, cache_path=str(tmp_path / "cache.sqlite")).replace(**settings)
    out = tmp_path / f"{name}.jsonl"
    compress_dataset(str(src), str(out), config, overwrite=True)
    metrics = json.loads((tmp_path / f"{name}_metrics.json").read_text())
    return read_jsonl(out), metrics


def summary_of(row: dict) -> str:
    [summary] = [t["value"] for t in row["conversations"] if SUMMARY_PREFIX in t["value"]]
    return summary


def test_a_faithful_summary_keeps_every_fact(tmp_path):
    with FakeLLMServer(reply=facts_reply(FACTS)).in_thread() as server:
        [row], metrics = run(tmp_path, server, min_fidelity=0.9)
        assert server.requests == 1  # no repair
    m = row["compression_metrics"]
    r = m["compression_region"]
    assert (r["start_idx"], r["end_idx"]) == REGION
    assert m["fidelity"] == {"items": 8, "kept": 8, "ratio": 1.0, "tail_items": 3,
                             "tail_kept": 3, "missing": [], "model_ratio": 1.0,
                             "invented": 0, "invented_items": []}
    assert "low_fidelity" not in m and "fidelity_repair" not in m
    # Nothing is missing, so no references line.
    assert REFERENCES_LABEL not in summary_of(row)
    f = metrics["fidelity"]
    assert (f["count"], f["mean_ratio"], f["p10_ratio"], f["mean_tail_ratio"]) == (1, 1, 1, 1)
    assert (f["items"], f["kept"], f["repair_requests"], f["low_fidelity_rows"]) == (8, 8, 0, 0)


def test_a_lossy_summary_gets_the_tail_facts_as_references(tmp_path):
    with FakeLLMServer(reply=lossy_reply()).in_thread() as server:
        [row], _ = run(tmp_path, server)
    summary = summary_of(row)
    # The tail names three facts again; the summary lacked them: they follow it, in the
    # region's order, and only they (summary_references: tail, the default).
    assert summary == (f"{SUMMARY_PREFIX} {LOSSY_TEXT}\n{REFERENCES_LABEL} "
                       "src/app/main.py; req_8f2k91; localhost:8080")
    f = row["compression_metrics"]["fidelity"]
    assert (f["items"], f["kept"], f["ratio"], f["tail_items"], f["tail_kept"]) == (
        8, 3, 0.375, 3, 3)
    assert f["missing"] == ["config.yaml", "KeyError", "user_id", "512 MB", "PR-1234"]


@pytest.mark.parametrize("mode, kept", [("off", 0), ("all", 8)])
def test_summary_references_off_and_all(tmp_path, mode, kept):
    with FakeLLMServer(reply=lossy_reply()).in_thread() as server:
        [row], _ = run(tmp_path, server, summary_references=mode)
    assert row["compression_metrics"]["fidelity"]["kept"] == kept
    assert (REFERENCES_LABEL in summary_of(row)) == (mode == "all")


def test_a_repair_request_names_what_was_dropped_and_its_answer_is_cached(tmp_path):
    recorder = Recorder(lossy_reply(repairs=True))
    with FakeLLMServer(reply=recorder).in_thread() as server:
        [row], metrics = run(tmp_path, server, min_fidelity=0.9, summary_references="off")
        assert server.requests == 2
    first, repair = recorder.seen
    assert fenced(first, "facts") is None
    # The repair carries the first summary and every fact it dropped, tail ones first.
    assert fenced(repair, "summary") == LOSSY_TEXT
    assert fenced(repair, "facts") == "\n".join(
        f"- {fact}" for fact in TAIL_FACTS + [f for f in FACTS if f not in TAIL_FACTS])
    m = row["compression_metrics"]
    assert m["fidelity"]["ratio"] == 1.0 and m["fidelity_repair"] is True
    assert "low_fidelity" not in m and m["summarization_api_calls"] == 2
    assert m["summary_source"] == "llm"
    assert metrics["fidelity"]["repair_requests"] == 1
    assert metrics["fidelity"]["low_fidelity_rows"] == 0
    repaired = summary_of(row)
    # A rerun finds the accepted (repaired) summary in the cache: no request at all.
    with FakeLLMServer(reply=recorder).in_thread() as server:
        [again], _ = run(tmp_path, server, name="again", min_fidelity=0.9,
                         summary_references="off")
        assert server.requests == 0
    assert summary_of(again) == repaired
    assert again["compression_metrics"]["summary_source"] == "cache"


def test_below_the_bar_keep_marks_the_row_and_caches_nothing(tmp_path):
    with FakeLLMServer(reply=lossy_reply()).in_thread() as server:
        [row], metrics = run(tmp_path, server, min_fidelity=0.9, summary_references="off")
        assert server.requests == 2  # the summary and one repair
    m = row["compression_metrics"]
    assert m["low_fidelity"] is True and m["fidelity_repair"] is True
    assert m["was_compressed"] and m["summary_source"] == "llm"
    assert summary_of(row) == f"{SUMMARY_PREFIX} {LOSSY_TEXT}"
    assert m["fidelity"]["ratio"] == 0.0
    assert metrics["fidelity"]["low_fidelity_rows"] == 1
    assert metrics["fidelity"]["repair_requests"] == 1
    # Not accepted, so not cached: a rerun asks again.
    with FakeLLMServer(reply=lossy_reply()).in_thread() as server:
        run(tmp_path, server, name="again", min_fidelity=0.9, summary_references="off")
        assert server.requests == 2


def test_below_the_bar_extractive_uses_the_extractive_summary(tmp_path):
    with FakeLLMServer(reply=lossy_reply()).in_thread() as server:
        [row], metrics = run(tmp_path, server, min_fidelity=0.9, on_low_fidelity="extractive")
    m = row["compression_metrics"]
    assert m["low_fidelity"] is True and m["summary_source"] == "extractive"
    assert m["summarization_api_calls"] == 2
    summary = summary_of(row)
    assert summary.startswith(f"{SUMMARY_PREFIX} Turns 4-11 (8 turns) were condensed")
    assert LOSSY_TEXT not in summary
    # The extractive summary names the facts the tail needs by construction.
    assert m["fidelity"]["tail_kept"] == 3
    assert metrics["summarization"]["summaries_by_source"]["extractive"] == 1


def test_below_the_bar_uncompressed_writes_the_row_as_it_was(tmp_path):
    with FakeLLMServer(reply=lossy_reply()).in_thread() as server:
        [row], metrics = run(tmp_path, server, min_fidelity=0.9,
                             on_low_fidelity="uncompressed", summary_references="off")
    assert row["conversations"] == fact_row("facts-0")["conversations"]
    m = row["compression_metrics"]
    assert m["low_fidelity"] is True and not m["was_compressed"]
    assert m["still_over_limit"] and "error" not in m
    assert m["summarization_api_calls"] == 2
    [over] = read_jsonl(tmp_path / "out_over_limit.jsonl")
    assert over["reason"] == reasons.LOW_FIDELITY.code
    assert over["reason_text"] == reasons.LOW_FIDELITY.text
    f = metrics["fidelity"]
    # No summary was written: none in the distribution; the row is counted.
    assert (f["count"], f["low_fidelity_rows"], f["repair_requests"]) == (0, 1, 1)
    assert metrics["summary"]["trajectories_compressed"] == 0


def test_the_extractive_backend_is_not_repaired(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [fact_row()])
    config = CompressionConfig(target_max_tokens=150, summary_target_tokens=60,
                               add_summary_notice=False, summarizer="extractive",
                               min_fidelity=1.0, summary_references="off")
    compress_dataset(str(src), str(tmp_path / "out.jsonl"), config)
    [row] = read_jsonl(tmp_path / "out.jsonl")
    m = row["compression_metrics"]
    # Tail facts first and verbatim; the rest as far as 60 tokens go.
    assert m["fidelity"]["tail_kept"] == 3
    assert "fidelity_repair" not in m and m["summarization_api_calls"] == 0
    assert m["low_fidelity"] is (m["fidelity"]["ratio"] < 1.0)


# the aggregate, worked out by hand


def _metrics(items: int, kept: int, tail: int, tail_kept: int, *, compressed: bool = True,
             low: bool = False, repair: bool = False) -> TrajectoryMetrics:
    return TrajectoryMetrics(original_tokens=100, compressed_tokens=50 if compressed else 100,
                             was_compressed=compressed, still_over_limit=not compressed,
                             # a written summary stands in for turns from 1 on
                             turns_compressed_start_idx=1 if compressed else -1,
                             fidelity=Fidelity(items, kept, tail, tail_kept, ()),
                             low_fidelity=low, fidelity_repair=repair)


ROWS = [_metrics(8, 8, 3, 3), _metrics(8, 3, 3, 3, low=True, repair=True),
        _metrics(4, 2, 0, 0, repair=True), _metrics(0, 0, 0, 0),
        _metrics(5, 0, 2, 0, compressed=False, low=True, repair=True)]


def test_the_fidelity_section_by_hand():
    total = AggregateMetrics()
    for m in ROWS:
        total.add(m)
    # Written summaries: ratios 1, 0.375, 0.5 and 1 (no item: 1 by definition); the
    # uncompressed row's summary was not written. Nearest-rank: p10 is the 1st of 4
    # sorted, the median the 2nd.
    assert total.to_dict()["fidelity"] == {
        "count": 4, "mean_ratio": round((1 + 0.375 + 0.5 + 1) / 4, 4), "min_ratio": 0.375,
        "p10_ratio": 0.375, "median_ratio": 0.5, "tail_rows": 2, "mean_tail_ratio": 1.0,
        "items": 20, "kept": 13, "tail_items": 6, "tail_kept": 6, "repair_requests": 3,
        "low_fidelity_rows": 2,
        # No references line (own text = whole text), nothing invented.
        "mean_model_ratio": round((1 + 0.375 + 0.5 + 1) / 4, 4), "invented_rows": 0,
        "invented_share": 0.0, "invented_items": 0}


def test_the_fidelity_section_survives_checkpoints_and_merges():
    whole = AggregateMetrics()
    for m in ROWS:
        whole.add(m)
    first, second = AggregateMetrics(), AggregateMetrics()
    for m in ROWS[:2]:
        first.add(m)
    for m in ROWS[2:]:
        second.add(m)
    restored = aggregate_from_state(json.loads(json.dumps(aggregate_state(first))))
    restored.merge(aggregate_from_state(json.loads(json.dumps(aggregate_state(second)))))
    assert restored.to_dict()["fidelity"] == whole.to_dict()["fidelity"]


def test_a_run_without_summaries_has_no_fidelity_section():
    total = AggregateMetrics()
    total.add(TrajectoryMetrics(original_tokens=10, compressed_tokens=10,
                                skipped_under_target=True))
    assert "fidelity" not in total.to_dict()


def test_row_metrics_round_trip_with_fidelity():
    m = _metrics(8, 3, 3, 3, low=True, repair=True)
    d = m.to_dict()
    keys = list(d)
    # The reference's keys first, then the additions.
    assert keys.index("summary_source") < keys.index("fidelity")
    assert keys[-7:-4] == ["fidelity", "fidelity_repair", "low_fidelity"]
    assert keys[-4:] == ["strategy_used", "masked_turns", "masked_tokens",
                         "assistant_tokens_kept"]  # §19, last
    back = TrajectoryMetrics.from_dict(d)
    assert back.fidelity == m.fidelity and back.low_fidelity and back.fidelity_repair
