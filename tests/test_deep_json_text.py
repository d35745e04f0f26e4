"""A deeply nested JSON text inside a turn (issue 36, item 7).

100,000 nested ``[`` in a tool output stopped ``analyze`` and ``--dry-run`` with an
internal error (exit 4, even with distill off: the preview parses tool outputs) and
failed that row in ``compress`` (RecursionError in the stdlib parser). Every place that
parses turn text now goes through `core.json_text.loads`, which measures the nesting
iteratively first: such a text is plain text to distill, elide, fidelity and the
extractive summarizer, and the row is compressed like any other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import invoke_cli, read_jsonl
from trajectory_compressor.core import json_text

DEEP_ARRAYS = "[" * 100_000
DEEP_OBJECTS = '{"a":' * 50_000 + "1" + "}" * 50_000  # valid JSON, 50,000 levels
LINES = "\n".join(f"line {i}: ok" for i in range(60))


# --- the bounded parser, by hand -------------------------------------------------------

def test_depth_is_measured_outside_strings():
    assert json_text.too_deep(DEEP_ARRAYS)
    assert json_text.too_deep(DEEP_OBJECTS)
    at_limit = "[" * 128 + "]" * 128
    assert not json_text.too_deep(at_limit)
    assert json_text.loads(at_limit) is not None
    assert json_text.too_deep("[" * 129 + "]" * 129)
    # Brackets inside strings are data: 10,000 of them in one string, depth 1.
    inside = json.dumps(["[" * 10_000, '{"x": "\\"[[["}'])
    assert not json_text.too_deep(inside)
    assert json_text.loads(inside) == ["[" * 10_000, '{"x": "\\"[[["}']
    # Siblings do not add up: 300 arrays side by side are depth 2.
    assert not json_text.too_deep("[" + ",".join(["[]"] * 300) + "]")


@pytest.mark.parametrize("text", [DEEP_ARRAYS, DEEP_OBJECTS, "[" * 129 + "]" * 129])
def test_a_text_too_deep_is_a_json_decode_error(text):
    with pytest.raises(json.JSONDecodeError, match="nested more than 128 levels deep"):
        json_text.loads(text)


# --- every command, every dialect ------------------------------------------------------

def hermes(deep: str) -> list[dict]:
    rows = []
    for i in range(3):
        turns = [{"from": "system", "value": "You are an agent."},
                 {"from": "human", "value": f"Task {i}: fix the parser."}]
        for k in range(6):
            turns.append({"from": "gpt", "value": f"Step {k}: I run the tool. " * 20})
            turns.append({"from": "tool", "value": deep if (i, k) == (1, 2) else LINES})
        turns.append({"from": "gpt", "value": "Done."})
        rows.append({"id": f"r{i}", "conversations": turns})
    return rows


def llamafactory(deep: str) -> list[dict]:
    rows = []
    for i in range(3):
        turns = [{"from": "human", "value": f"Task {i}: fix the parser."}]
        for k in range(6):
            turns.append({"from": "function_call",
                          "value": json.dumps({"name": "run", "arguments": {"step": k}})})
            turns.append({"from": "observation",
                          "value": deep if (i, k) == (1, 2) else LINES})
        turns.append({"from": "gpt", "value": "Done."})
        rows.append({"id": f"r{i}", "conversations": turns, "system": "You are an agent.",
                     "tools": json.dumps([{"name": "run", "parameters": {}}])})
    return rows


def openai(deep: str, in_arguments: bool = False) -> list[dict]:
    rows = []
    for i in range(3):
        messages = [{"role": "system", "content": "You are an agent."},
                    {"role": "user", "content": f"Task {i}: fix the parser."}]
        for k in range(6):
            hit = (i, k) == (1, 2)
            arguments = deep if hit and in_arguments else json.dumps({"step": k})
            messages.append({"role": "assistant", "content": f"Step {k}: I run it. " * 20,
                             "tool_calls": [{"id": f"c{k}", "type": "function",
                                             "function": {"name": "run",
                                                          "arguments": arguments}}]})
            messages.append({"role": "tool", "tool_call_id": f"c{k}",
                             "content": deep if hit and not in_arguments else LINES})
        messages.append({"role": "assistant", "content": "Done."})
        rows.append({"id": f"r{i}", "messages": messages})
    return rows


def llamafactory_call(deep: str) -> list[dict]:
    """The deep text as a function_call's value (a tool call that is no JSON)."""
    rows = llamafactory(LINES)
    rows[1]["conversations"][3]["value"] = deep
    return rows


CASES = {
    "hermes-arrays": hermes(DEEP_ARRAYS),
    "hermes-objects": hermes(DEEP_OBJECTS),
    "llamafactory-arrays": llamafactory(DEEP_ARRAYS),
    "llamafactory-function-call": llamafactory_call(DEEP_ARRAYS),
    "openai-arrays": openai(DEEP_ARRAYS),
    "openai-arguments": openai(DEEP_OBJECTS, in_arguments=True),
}
SMALL = ("--target-max-tokens", "400", "--summary-target-tokens", "60")


def write(rows: list[dict], path: Path) -> Path:
    if path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("case", sorted(set(CASES) - {"openai-arguments"}))
def test_analyze_dry_run_compress_and_validate_handle_the_row(tmp_path, case):
    source = write(CASES[case], tmp_path / "in.jsonl")
    for distill in ("off", "all"):
        analyzed = invoke_cli("analyze", str(source), *SMALL, "--distill", distill)
        assert analyzed.returncode == 0, analyzed.stderr
        assert "  rows    3, rejected 0\n" in analyzed.stdout, analyzed.stdout
        dry = invoke_cli("compress", str(source), "-o", str(tmp_path / "dry.jsonl"),
                         "--dry-run", *SMALL, "--distill", distill)
        assert dry.returncode == 0, dry.stderr
        assert "internal error" not in analyzed.stderr + dry.stderr
    out = tmp_path / "out.jsonl"
    done = invoke_cli("compress", str(source), "-o", str(out), "--summarizer", "extractive",
                      *SMALL, "--distill", "all", "--over-limit-strategy",
                      "elide_tool_outputs", "--min-fidelity", "0.1", "--quiet")
    assert done.returncode == 0, done.stderr
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == ["r0", "r1", "r2"]  # nothing lost, in order
    assert all("error" not in r["compression_metrics"] for r in rows)
    assert rows[1]["compression_metrics"]["was_compressed"]
    check = invoke_cli("validate", str(out), "--allow-over-limit")
    assert check.returncode == 0, check.stdout + check.stderr


def test_tool_call_arguments_too_deep_are_a_located_reject_in_every_command(tmp_path):
    # OpenAI arguments must be a JSON text: one too deep to parse cannot be kept as
    # arguments, so the row is rejected, with its line, the same in analyze and compress.
    source = write(CASES["openai-arguments"], tmp_path / "in.jsonl")
    why = ("messages[6].tool_calls[0].function.arguments is not valid JSON (nested more "
           "than 128 levels deep)")
    analyzed = invoke_cli("analyze", str(source), *SMALL)
    assert analyzed.returncode == 0, analyzed.stderr
    assert "  rows    2, rejected 1\n" in analyzed.stdout
    out = tmp_path / "out.jsonl"
    done = invoke_cli("compress", str(source), "-o", str(out), "--summarizer", "extractive",
                      *SMALL, "--quiet")
    assert done.returncode == 1
    assert f"warning: {source}:2: {why}" in done.stderr
    assert [r["id"] for r in read_jsonl(out)] == ["r0", "r2"]
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert (reject["line"], reject["error"]) == (2, why)


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_the_other_containers_too(tmp_path, suffix):
    source = write(hermes(DEEP_ARRAYS), tmp_path / f"in{suffix}")
    analyzed = invoke_cli("analyze", str(source), *SMALL)
    assert analyzed.returncode == 0, analyzed.stderr
    out = tmp_path / f"out{suffix}"
    done = invoke_cli("compress", str(source), "-o", str(out), "--summarizer", "extractive",
                      *SMALL, "--distill", "all", "--quiet")
    assert done.returncode == 0, done.stderr
    rows = (json.loads(out.read_text()) if suffix == ".json"
            else pq.read_table(out).to_pylist())
    assert [r["id"] for r in rows] == ["r0", "r1", "r2"]
    assert rows[1]["conversations"] != hermes(DEEP_ARRAYS)[1]["conversations"]  # summarized
