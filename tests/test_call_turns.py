"""LLaMA-Factory `function_call` turns are tool calls in every summarizer's view (issue 40
item 5): the extractive summary lists them under "Tool calls", an LLM reads them in
``<tool_call>`` blocks; and a `.json` output's sidecars written under the older names are
still found."""

from __future__ import annotations

import json
import re
import shutil

from tests.cli_helpers import invoke_cli
from tests.fake_llm_server import FakeLLMServer
from tests.sample_files import sample_head
from trajectory_compressor.core.conversation import CALL_TURN, call_view
from trajectory_compressor.dialects.sharegpt import ShareGPTVariant

CALL = '{"name": "read_file", "arguments": {"path": "a.py"}}'
ROW = {"conversations": [
    {"from": "human", "value": "go"}, {"from": "function_call", "value": CALL},
    {"from": "observation", "value": "print(1)"}, {"from": "gpt", "value": "done"}]}


def test_a_function_call_turn_is_marked_and_read_as_a_call():
    turns = ShareGPTVariant().turns(ROW)
    assert [bool(t.get(CALL_TURN)) for t in turns] == [False, True, False, False]
    viewed = call_view(turns)
    assert viewed[1]["value"] == f"<tool_call>\n{CALL}\n</tool_call>"
    assert [t["value"] for t in viewed[::2]] == ["go", "print(1)"]
    # A JSON list of calls: one block each.
    two = [{**turns[1], "value": f"[{CALL}, {CALL}]"}]
    assert call_view(two)[0]["value"].count("<tool_call>") == 2
    # The row written back is untouched: the view is the summarizer's only.
    assert ShareGPTVariant().with_turns(ROW, turns) == ROW


def _function_calls(rows: list) -> set[str]:
    names = set()
    for row in rows:
        for turn in row["conversations"]:
            if turn["from"] == "function_call":
                calls = json.loads(turn["value"])
                names.update(c["name"] for c in (calls if isinstance(calls, list) else [calls]))
    return names


def _summaries(rows: list) -> list[str]:
    found = []
    for row in rows:
        for turn in row["conversations"]:
            if "[CONTEXT SUMMARY]:" in turn["value"]:
                found.append(turn["value"][turn["value"].index("[CONTEXT SUMMARY]:"):])
    return found


def _compress_extractive(src, out) -> None:
    result = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                        "--target-max-tokens", "3000", "--summary-target-tokens", "300",
                        "--no-cache", "-q", "--no-config")
    assert result.returncode == 0, result.stderr


def test_the_extractive_summary_lists_function_calls_as_tool_calls(tmp_path):
    src = sample_head("llamafactory_sharegpt.json", tmp_path, rows=5)
    out = tmp_path / "out.json"
    _compress_extractive(src, out)
    summaries = _summaries(json.loads(out.read_text()))
    assert summaries
    called = _function_calls(json.loads(src.read_text()))
    for summary in summaries:
        assert "\nTool calls:\n" in summary, summary
        listed = re.findall(r"^- turn \d+: (\w+)\(", summary, re.MULTILINE)
        assert listed and set(listed) <= called, summary
        # Never an assistant "message" that is a call's JSON.
        assert not re.search(r'\(assistant\): [\[{]"?name', summary), summary


def test_an_llm_reads_function_calls_in_tool_call_blocks(tmp_path):
    src = sample_head("llamafactory_sharegpt.json", tmp_path, rows=2)
    with FakeLLMServer().in_thread() as server:
        result = invoke_cli("compress", str(src), "-o", str(tmp_path / "out.json"),
                            "--base-url", server.url, "--model", "m", "--no-cache", "-q",
                            "--target-max-tokens", "3000", "--summary-target-tokens", "300",
                            "--no-config")
    assert result.returncode == 0, result.stderr
    assert server.bodies
    for body in server.bodies:
        prompt = json.loads(body)["messages"][1]["content"]
        assert re.search(r"\[Turn \d+ - GPT\]:\n<tool_call>\n\{\"name\": ", prompt), prompt
        assert not re.search(r"\[Turn \d+ - GPT\]:\n\{\"name\"", prompt)


def test_a_json_output_with_sidecars_under_the_older_names_is_still_found(tmp_path):
    src = sample_head("llamafactory_sharegpt.json", tmp_path, rows=4)
    out = tmp_path / "src_compressed.json"
    _compress_extractive(src, out)
    # One rule: the output's name without its extension.
    names = sorted(p.name for p in tmp_path.glob("src_compressed*"))
    assert names == ["src_compressed.json", "src_compressed_metrics.json",
                     "src_compressed_over_limit.jsonl", "src_compressed_rejects.jsonl"]
    for name in names[1:]:  # as a run before this rule named them
        shutil.move(tmp_path / name, tmp_path / name.replace("src_compressed",
                                                             "src_compressed.json"))
    report = invoke_cli("report", str(out), "--json", "--no-config")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["metrics_file"] == \
        str(tmp_path / "src_compressed.json_metrics.json")
    checked = invoke_cli("validate", str(out), "--no-config", "--allow-over-limit")
    assert checked.returncode == 0, checked.stdout
    assert "settings from src_compressed.json_metrics.json" in checked.stdout
