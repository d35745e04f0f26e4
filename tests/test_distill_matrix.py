"""`--distill safe` on every dialect and container `compress` accepts (§18, issue 27 item
5): Hermes ``<tool_response>`` bodies (the JSON wrapper kept, its ``content`` rewritten),
LLaMA-Factory ``observation`` turns, LLaMA-Factory and OpenAI ``tool`` messages (a string,
or content parts: the text rewritten, an image part kept), in JSONL, a .json array and
Parquet.

The expected outputs are worked out by hand from README "Distill": escape sequences go,
a progress line keeps what the terminal showed last, standard-layout JSON is written
compact under the header that lays it out again; every other turn, and every other
field, is written as it was.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import invoke_cli, read_jsonl

# A test run with colours and a progress line redrawn 39 times...
LOG = ("\x1b[1m$ pytest -q\x1b[0m\n"
       + "".join(f"collecting {i}/40\r" for i in range(1, 40)) + "collected 40 items\n"
       + "\x1b[32m.\x1b[0m" * 40 + "\n\x1b[32m40 passed\x1b[0m in 1.23s\n")
LOG_SHOWN = "$ pytest -q\ncollected 40 items\n" + "." * 40 + "\n40 passed in 1.23s\n"
# ... and a pretty-printed JSON answer.
PODS = '{\n  "pods": [\n    {\n      "name": "web-7d4f8b9c6d-x2k4p",\n      "ready": true,\n' \
       '      "restarts": 0\n    }\n  ]\n}'
PODS_SHOWN = "⟪json indent 2⟫\n" \
    '{"pods":[{"name":"web-7d4f8b9c6d-x2k4p","ready":true,"restarts":0}]}'
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
SYSTEM = "You run shell commands for the user."
ASK = "Run the tests, then list the pods."
DONE = "All 40 tests pass and web-7d4f8b9c6d-x2k4p is ready."


def hermes(content: str, call: str) -> str:
    body = json.dumps({"tool_call_id": call, "name": "terminal", "content": content})
    return f"<tool_response>\n{body}\n</tool_response>"


def hermes_row() -> dict:
    call = '<tool_call>\n{"name": "terminal", "arguments": {"command": "%s"}}\n</tool_call>'
    return {"id": "h1", "conversations": [
        {"from": "system", "value": SYSTEM}, {"from": "human", "value": ASK},
        {"from": "gpt", "value": call % "pytest -q"},
        {"from": "tool", "value": hermes(LOG, "c1")},
        {"from": "gpt", "value": call % "kubectl get pods -o json"},
        {"from": "tool", "value": hermes(PODS, "c2")},
        {"from": "gpt", "value": DONE}], "reward": 0.5}


def sharegpt_row() -> dict:
    call = '{"name": "terminal", "arguments": {"command": "%s"}}'
    return {"id": "s1", "conversations": [
        {"from": "human", "value": ASK},
        {"from": "function_call", "value": call % "pytest -q"},
        {"from": "observation", "value": LOG},
        {"from": "function_call", "value": call % "kubectl get pods -o json"},
        {"from": "observation", "value": PODS},
        {"from": "gpt", "value": DONE}], "system": SYSTEM, "tools": "[]"}


def llamafactory_messages_row(parts: bool) -> dict:
    def text(value: str) -> list[dict]:
        return [{"type": "text", "value": value}]

    def call(command: str) -> list[dict]:
        return [{"type": "tool_call", "value": json.dumps(
            {"name": "terminal", "arguments": {"command": command}})}]

    return {"messages": [
        {"role": "system", "content": text(SYSTEM)}, {"role": "user", "content": text(ASK)},
        {"role": "assistant", "content": call("pytest -q")},
        {"role": "tool", "content": text(LOG) if parts else LOG},
        {"role": "assistant", "content": call("kubectl get pods -o json")},
        {"role": "tool", "content": text(PODS) if parts else PODS},
        {"role": "assistant", "content": text(DONE)}]}


def openai_row(parts: bool) -> dict:
    def call(n: int, command: str) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{n}", "type": "function", "function": {
                "name": "terminal", "arguments": json.dumps({"command": command})}}]}

    return {"id": "o1", "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK},
        call(1, "pytest -q"),
        {"role": "tool", "tool_call_id": "call_1",
         "content": [{"type": "text", "text": LOG}, IMAGE] if parts else LOG},
        call(2, "kubectl get pods -o json"),
        {"role": "tool", "tool_call_id": "call_2", "content": PODS},
        {"role": "assistant", "content": DONE}]}


def rows(dialect: str, parts: bool) -> list[dict]:
    if dialect == "hermes":
        return [hermes_row()]
    if dialect == "llamafactory_sharegpt":
        return [sharegpt_row()]
    if dialect == "llamafactory_messages":
        return [llamafactory_messages_row(parts)]
    return [openai_row(parts)]


def write(path, data: list[dict]) -> None:
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(data), path)
    elif path.suffix == ".json":
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")


def read(path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    return read_jsonl(path)


def tool_content(dialect: str, item: dict) -> str | list | None:
    """A tool turn's output by the dialect's documented fields, or None for other turns."""
    if dialect == "hermes":
        if item["from"] != "tool":
            return None
        value = item["value"]
        assert value.startswith("<tool_response>\n") and value.endswith("\n</tool_response>")
        body = json.loads(value[len("<tool_response>\n"):-len("\n</tool_response>")])
        assert list(body) == ["tool_call_id", "name", "content"]  # the wrapper as it was
        return body["content"]
    if dialect == "llamafactory_sharegpt":
        return item["value"] if item["from"] == "observation" else None
    return item["content"] if item["role"] == "tool" else None


# Parquet holds ShareGPT ``conversations`` (README "Formats"); messages rows come in
# JSONL and .json, their tool content a string or parts.
CASES = [*((dialect, suffix, False) for dialect in ("hermes", "llamafactory_sharegpt")
           for suffix in (".jsonl", ".json", ".parquet")),
         *((dialect, suffix, parts) for dialect in ("llamafactory_messages", "openai")
           for suffix in (".jsonl", ".json") for parts in (False, True))]


@pytest.mark.parametrize(("dialect", "suffix", "parts"), CASES)
def test_safe_rewrites_each_dialects_tool_outputs_in_each_container(tmp_path, dialect,
                                                                    suffix, parts):
    source = tmp_path / f"in{suffix}"
    originals = rows(dialect, parts)
    write(source, originals)
    out = tmp_path / f"out{suffix}"
    run = invoke_cli("compress", str(source), "-o", str(out), "--distill", "safe",
                     "--summarizer", "extractive", "--no-cache", "-q")
    assert run.returncode == 0, run.stderr
    written = read(out)
    original = read(source)[0]  # as the container gives it back (Parquet adds nulls)
    assert len(written) == 1
    row = written[0]
    metrics = row.pop("compression_metrics")
    # Under the target, distilled all the same (README "Distill": one setting, one format).
    distill = metrics["distill"]
    assert metrics["skipped_under_target"] and distill["turns"] == 2
    # The log lost escapes and redraws, the JSON its white space: one turn each.
    rules = {name: saving for name, saving in distill["rules"].items() if saving is not None}
    assert set(rules) == {"control", "redraws", "json"}
    assert all(saving["turns"] == 1 for saving in rules.values())
    assert sum(s["tokens_before"] - s["tokens_after"] for s in rules.values()) \
        == distill["tokens_before"] - distill["tokens_after"] > 0
    column = "conversations" if "conversations" in row else "messages"
    assert {k: v for k, v in row.items() if k != column} == \
        {k: v for k, v in original.items() if k != column}
    outputs = []
    assert len(row[column]) == len(original[column])
    for before, after in zip(original[column], row[column], strict=True):
        content = tool_content(dialect, after)
        if content is None:
            assert after == before  # system, user and assistant turns as they were
            continue
        assert {k: v for k, v in after.items() if k not in ("value", "content")} == \
            {k: v for k, v in before.items() if k not in ("value", "content")}
        outputs.append(content)
    first, second = outputs
    if parts and dialect == "openai":
        assert first == [{"type": "text", "text": LOG_SHOWN}, IMAGE]  # the image kept
    elif parts:
        assert first == [{"type": "text", "value": LOG_SHOWN}]
        second = second[0]["value"]
    else:
        assert first == LOG_SHOWN
    assert second == PODS_SHOWN
