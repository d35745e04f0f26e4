"""Dialects: every spelling of a conversation read, compressed and written back valid.

Samples of each dialect (written by scripts/make_dialect_samples.py) go through the real
CLI; generated rows of each dialect go through the compressor with property tests of the
structural rules: tool results stay with their calls, LLaMA-Factory turns alternate, one
summary that is never a training target, every other message untouched.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_helpers import ROOT, read_jsonl, run_cli
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import RowError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.dialects import detect, dialect_for
from trajectory_compressor.dialects.messages import Messages
from trajectory_compressor.dialects.sharegpt import SHAREGPT, ShareGPTVariant
from trajectory_compressor.engine.compressor import TrajectoryCompressor

SAMPLES = ROOT / "data_samples"
PREFIX = "[CONTEXT SUMMARY]:"
SMALL = ("--summarizer", "extractive", "--no-cache")


def _rows(path: Path) -> list[dict]:
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    return read_jsonl(path)


def _summaries(items: list[dict], content_key: str) -> list[int]:
    def text(item: dict) -> str:
        value = item.get(content_key)
        if isinstance(value, list):
            return "".join(str(p.get("text", p.get("value", ""))) for p in value)
        return str(value or "")

    return [i for i, item in enumerate(items) if text(item).startswith(PREFIX)]


def _openai_tool_messages_follow_their_calls(messages: list[dict]) -> bool:
    open_ids: list = []
    for m in messages:
        if m["role"] == "assistant":
            open_ids = [c["id"] for c in m.get("tool_calls") or []]
            open_ids += [None for p in m.get("content") or []
                         if isinstance(p, dict) and p.get("type") == "tool_call"]
        elif m["role"] == "tool":
            if not open_ids:
                return False
            call_id = m.get("tool_call_id")
            if call_id is not None:
                if call_id not in open_ids:
                    return False
                open_ids.remove(call_id)
            else:
                open_ids.pop(0)
        else:
            open_ids = []
    return True


def _alternates(conversations: list[dict]) -> bool:
    user_side = {"human", "user", "observation"}
    body = [t["from"] for t in conversations if t["from"] != "system"]
    return all((role in user_side) == (i % 2 == 0) for i, role in enumerate(body))


# --- the bundled samples through the CLI ---------------------------------------------

@pytest.mark.parametrize("name, column, content", [
    ("llamafactory_sharegpt.json", "conversations", "value"),
    ("openai_messages.jsonl", "messages", "content"),
    ("llamafactory_messages.jsonl", "messages", "content"),
])
def test_each_dialect_sample_is_compressed_in_its_own_spelling(tmp_path, name, column, content):
    src = tmp_path / name
    src.write_bytes((SAMPLES / name).read_bytes())
    result = run_cli("compress", str(src), *SMALL)
    assert result.returncode == 0, result.stderr
    stem, suffix = name.rsplit(".", 1)
    out = tmp_path / f"{stem}_compressed.{suffix}"
    rows_in, rows_out = _rows(src), _rows(out)
    assert len(rows_out) == len(rows_in)
    compressed = 0
    for before, after in zip(rows_in, rows_out, strict=True):
        # Every field but the conversation (and the metrics) is the same JSON value.
        assert {k: v for k, v in after.items() if k not in (column, "compression_metrics",
                                                             "system")} == \
            {k: v for k, v in before.items() if k not in (column, "system")}
        metrics = after.get("compression_metrics")
        if not (metrics and metrics["was_compressed"]):
            assert after[column] == before[column]
            continue
        compressed += 1
        items = after[column]
        region = metrics["compression_region"]
        offset = 1 if before.get("system") else 0  # the system column is turn 0
        if column == "conversations":
            # Alternating rows: the summary joins the user-side turn before the region.
            joined = [i for i, t in enumerate(items) if f"\n\n{PREFIX}" in t["value"]]
            assert joined == [region["start_idx"] - offset - 1]
            assert items[joined[0] + 1:] == before[column][region["end_idx"] - offset:]
            assert items[joined[0]]["from"] in ("human", "observation")
            assert _alternates(items), [t["from"] for t in items]
            assert after["system"].startswith(before["system"])
            continue
        summaries = _summaries(items, content)
        assert len(summaries) == 1
        summary = items[summaries[0]]
        assert summaries[0] == region["start_idx"] - offset
        # The messages after the summary are the input's, untouched.
        assert items[summaries[0] + 1:] == before[column][region["end_idx"] - offset:]
        if column == "messages":
            assert summary["role"] == "user"
            assert _openai_tool_messages_follow_their_calls(items)
            if any("loss_weight" in m for m in before[column]):
                assert summary["loss_weight"] == 0
            if any("weight" in m for m in before[column]):
                assert summary["weight"] == 0
        else:
            assert summary["from"] == "human"
            assert _alternates(items), [t["from"] for t in items]
            assert after["system"].startswith(before["system"])
    assert compressed >= 5


@pytest.mark.parametrize("name, expected", [
    ("trajectories.jsonl", "sharegpt"),
    ("llamafactory_sharegpt.json", "sharegpt-variant"),
    ("openai_messages.jsonl", "openai"),
    ("llamafactory_messages.jsonl", "openai"),
])
def test_detection_names_each_sample_s_dialect(name, expected):
    rows = _rows(SAMPLES / name)[:32]
    assert detect(rows, CompressionConfig()).name == expected


def test_the_format_option_overrides_detection(tmp_path):
    src = tmp_path / "chat.jsonl"
    src.write_bytes((SAMPLES / "openai_messages.jsonl").read_bytes())
    result = run_cli("compress", str(src), "--format", "sharegpt", *SMALL)
    assert result.returncode == 1  # forced Hermes: every row lacks 'conversations'
    rejects = read_jsonl(tmp_path / "chat_compressed_rejects.jsonl")
    assert len(rejects) == 10 and "conversations" in rejects[0]["error"]


def test_a_hermes_sample_is_still_planned_exactly_as_before(tmp_path, sample_jsonl):
    """Hermes rows keep reference parity: with weights on their turns the only change
    to the output is the summary's weight 0."""
    src = tmp_path / "t.jsonl"
    rows = read_jsonl(sample_jsonl)[:12]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = run_cli("compress", str(src), *SMALL)
    assert result.returncode == 0, result.stderr
    for row in read_jsonl(tmp_path / "t_compressed.jsonl"):
        m = row.get("compression_metrics")
        if m and m["was_compressed"]:
            summary = row["conversations"][m["compression_region"]["start_idx"]]
            assert summary == {"from": "human", "value": summary["value"], "weight": 0}


# --- bad rows in every dialect ---------------------------------------------------------

@pytest.mark.parametrize("dialect, row, field", [
    (Messages(), {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    (Messages(), {"messages": [{"role": "user", "content": "q"},
                               {"role": "tool", "content": "r", "tool_call_id": "a"}]},
     "messages[1] is a tool result"),
    (Messages(), {"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    (Messages(), {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    (Messages(), {"messages": "hello"}, "'messages' is a JSON string"),
    (Messages(), {"messages": [{"role": "user", "content": "q"}], "tools": "{bad"}, "'tools'"),
    (ShareGPTVariant(), {"conversations": [{"from": "bot", "value": "x"}]},
     "conversations[0].from"),
    (ShareGPTVariant(), {"conversations": [{"from": "human", "value": 3}]},
     "conversations[0].value"),
    (ShareGPTVariant(), {"conversations": [], "system": ["x"]}, "column 'system'"),
])
def test_bad_rows_name_the_field(dialect, row, field):
    with pytest.raises(RowError) as info:
        dialect.turns(row)
    assert field in info.value.reason


# JSON's own names of its value types (RFC 8259 section 3), as a user reads them in a reject.
@pytest.mark.parametrize("value, name", [(None, "null"), (True, "boolean"), (False, "boolean"),
                                         (7, "number"), (2.5, "number"), ("x", "string"),
                                         ({"a": 1}, "object")])
def test_a_wrong_messages_value_is_named_by_its_json_type(value, name):
    with pytest.raises(RowError) as info:
        Messages().turns({"messages": value})
    assert info.value.reason == f"'messages' is a JSON {name}, expected a list"
    with pytest.raises(RowError) as info:
        Messages().turns([value])
    assert info.value.reason == "row is a JSON array, expected an object"


def test_bad_rows_of_an_openai_file_are_rejected_with_their_line_and_the_run_goes_on(tmp_path):
    good = _rows(SAMPLES / "openai_messages.jsonl")[0]
    orphan = {"messages": [{"role": "user", "content": "q"},
                           {"role": "tool", "tool_call_id": "zz", "content": "r"}]}
    src = tmp_path / "mixed.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in (good, orphan, good)) + "\n",
                   encoding="utf-8")
    result = run_cli("compress", str(src), *SMALL)
    assert result.returncode == 1
    assert len(read_jsonl(tmp_path / "mixed_compressed.jsonl")) == 2
    rejects = read_jsonl(tmp_path / "mixed_compressed_rejects.jsonl")
    assert [(r["line"], "messages[1] is a tool result" in r["error"]) for r in rejects] == \
        [(2, True)]
    assert f"{src}:2" in result.stderr


# --- structural rules on generated rows of every dialect ---------------------------------

_words = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "path/to/file.py",
                                   "Error:", "42", "ok"]), min_size=1, max_size=40)


@st.composite
def episodes(draw):
    """An agent episode: (kind, text) steps, kind user | call(n) | answer | final."""
    steps = [("user", " ".join(draw(_words)))]
    for _ in range(draw(st.integers(1, 8))):
        calls = draw(st.integers(1, 3))
        steps.append(("call", [" ".join(draw(_words)) for _ in range(calls)]))
        steps.append(("answer", [" ".join(draw(_words)) for _ in range(calls)]))
        if draw(st.booleans()):
            steps.append(("final", " ".join(draw(_words))))
            steps.append(("user", " ".join(draw(_words))))
    steps.append(("final", " ".join(draw(_words))))
    return steps


def _openai_row(steps, weights: bool) -> dict:
    messages = [{"role": "system", "content": "You are a careful agent."}]
    n = 0
    pending: list[str] = []
    for kind, payload in steps:
        if kind == "user":
            messages.append({"role": "user", "content": payload})
        elif kind == "call":
            pending = [f"c{n}_{k}" for k in range(len(payload))]
            n += 1
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function",
                 "function": {"name": "run", "arguments": json.dumps({"cmd": text})}}
                for i, text in zip(pending, payload, strict=True)]})
        elif kind == "answer":
            messages += [{"role": "tool", "tool_call_id": i, "content": text}
                         for i, text in zip(pending, payload, strict=True)]
        else:
            messages.append({"role": "assistant", "content": payload})
        if weights and messages[-1]["role"] == "assistant":
            messages[-1]["weight"] = 1
    return {"messages": messages, "id": "gen"}


def _variant_row(steps) -> dict:
    conversations = []
    for kind, payload in steps:
        if kind == "user":
            conversations.append({"from": "human", "value": payload})
        elif kind == "call":
            conversations.append({"from": "function_call", "value": json.dumps(
                [{"name": "run", "arguments": {"cmd": t}} for t in payload])})
        elif kind == "answer":
            conversations.append({"from": "observation", "value": "\n".join(payload)})
        else:
            conversations.append({"from": "gpt", "value": payload})
    # LLaMA-Factory pairs: a user-side turn after a final answer needs none before it.
    return {"conversations": conversations, "system": "Be brief.", "tools": "[]"}


def _compressor(counter, target: int) -> TrajectoryCompressor:
    config = CompressionConfig(summarizer="extractive", target_max_tokens=target,
                               summary_target_tokens=20, protect_last_n_turns=2)
    return TrajectoryCompressor(config, ExtractiveSummarizer(counter.count), counter)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(episodes(), st.integers(60, 600), st.booleans())
def test_generated_openai_rows_keep_tool_results_with_their_calls(counter, steps, target,
                                                                   weights):
    row = _openai_row(steps, weights)
    before = json.loads(json.dumps(row))
    result = asyncio.run(_compressor(counter, target).compress_row(row, dialect=Messages()))
    assert row == before  # never mutated
    messages = result.row["messages"]
    assert _openai_tool_messages_follow_their_calls(messages)
    summaries = _summaries(messages, "content")
    if result.metrics.was_compressed:
        assert len(summaries) == 1
        s = summaries[0]
        assert messages[s]["role"] == "user"
        assert messages[s].get("weight") == (0 if weights else None)
        region = result.plan.region
        assert region is not None
        assert messages[s + 1:] == before["messages"][region.end:]
        assert messages[1:s] == before["messages"][1:region.start]
    else:
        assert messages == before["messages"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(episodes(), st.integers(60, 600))
def test_generated_llamafactory_rows_still_alternate(counter, steps, target):
    row = _variant_row(steps)
    assert _alternates(row["conversations"])
    result = asyncio.run(_compressor(counter, target).compress_row(row,
                                                                  dialect=ShareGPTVariant()))
    conversations = result.row["conversations"]
    assert _alternates(conversations), [t["from"] for t in conversations]
    if result.metrics.was_compressed:
        joined = [t for t in conversations if f"\n\n{PREFIX}" in t["value"]]
        assert len(joined) == 1 and joined[0]["from"] in ("human", "observation")
        assert result.row["system"].startswith("Be brief.")
        # Every function_call still has its observation right after it.
        for i, turn in enumerate(conversations):
            if turn["from"] == "function_call":
                assert conversations[i + 1]["from"] == "observation"


def test_dialect_for_honours_the_dataset_section():
    config = CompressionConfig(dataset_messages="chat", dataset_role_tag="speaker",
                               dataset_content_tag="text", dataset_user_tag="client",
                               dataset_assistant_tag="agent")
    dialect = dialect_for(config, "sharegpt-variant")
    row = {"chat": [{"speaker": "client", "text": "hi"}, {"speaker": "agent", "text": "yo"}]}
    assert [(t["from"], t["value"]) for t in dialect.turns(row)] == \
        [("human", "hi"), ("gpt", "yo")]
    assert detect([row], config).name == "sharegpt-variant"
    out = dialect.with_turns(row, [{"from": "human", "value": "S"}, *dialect.turns(row)[1:]], 0)
    assert out["chat"][0] == {"speaker": "client", "text": "S"}
    assert out["chat"][1] is row["chat"][1]


def test_hermes_turns_are_the_row_s_own_objects():
    row = {"conversations": [{"from": "human", "value": "q", "weight": 0}]}
    assert SHAREGPT.turns(row) is row["conversations"]
