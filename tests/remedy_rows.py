"""Rows built to be over the limit for known reasons, with token counts worked out by hand,
in every dialect and container `compress` reads (issue 25, "what would fix it").

Every turn's text has a count known without the package: ``words(n)`` is n tokens,
``block(k)`` (k lines of ten words) is 11k - 1, and every assistant turn is 25 tokens:
five words and a ``<tool_call>`` of ``f`` with no arguments in the Hermes rendering
(SPEC §2), which is what OpenAI and LLaMA-Factory messages rows count for their calls, or
(LLaMA-Factory ShareGPT) a ``function_call`` JSON of 25 tokens. `test_remedies` checks
those facts with the tokenizer before it relies on them.

The settings (`HAND_YAML`): target 1,000, summary 200, no summary notice, the last four
turns and each role's first turn protected. Rows (G: an assistant turn with a call, 25
tokens; T: its tool answer):

- ``tail``: S50 H50 G T50 | G T200 G T200 | G T450 G T450 (1,575). Head 0-3 (175), tail
  8-11 (950): the whole middle (450) is summarized and 175 + 950 + a summary is over:
  ``protected_tail_over_target``. With the last two turns protected, the region reaches
  turn 9: 1,575 - 925 + summary <= 850 fits; with three, the tail starts on a tool turn
  and the region stays 4-8.
- ``head``: S200 H200 G T648 | G T100 G T100 | G T50 G T50 (1,473). The head (turns 0-3)
  is 1,073 alone: ``protected_head_alone_over_target``. With the first tool turn
  unprotected the region still starts at turn 4 (a region never starts on a tool turn),
  so turn 3 stays, and only the second pass (cutting that 648-token output) brings the
  row under.
- ``elide``: S300 H200 G T100 | G T153 | G T100 G T100 (1,053). Head 0-3, tail 6-9, the
  middle 4-5 (178) is not more than the summary (200): ``region_too_small``. The second
  pass cuts turn 5 (153 tokens of lines) by 53; a summary of 100 (the region is then
  178 > 100) leaves 875 + summary <= 975; the last two turns protected give a region of
  4-7 (303): 750 + summary.
- ``fits``: compressed under the target; ``short``: under it already.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.fixtures_runs import words

TARGET, SUMMARY = 1000, 200
HAND_YAML = (f"compression: {{target_max_tokens: {TARGET}, summary_target_tokens: {SUMMARY}}}\n"
             "output: {add_summary_notice: false}\n"
             "summarization: {backend: extractive}\n")
CALL = {"name": "f", "arguments": {}}
# Five words and the Hermes rendering of `CALL`: 25 tokens.
GPT_TEXT = words(5) + "\n<tool_call>\n" + json.dumps(CALL) + "\n</tool_call>"
# A LLaMA-Factory function_call of 25 tokens.
FUNCTION_CALL = json.dumps({"name": "f", "arguments": {"q": words(10)}})
GPT = 25


def block(lines: int) -> str:
    """``lines`` lines of ten words: 11 * lines - 1 tokens (each newline one token)."""
    return "\n".join(words(10) for _ in range(lines))


# Each row: (id, system, human, [tool outputs]); an assistant call before each output.
ROWS = [
    ("tail", words(50), words(50), [words(50), words(200), words(200), words(450),
                                    words(450)]),
    ("head", words(200), words(200), [block(59), words(100), words(100), words(50),
                                      words(50)]),
    ("elide", words(300), words(200), [words(100), block(14), words(100), words(100)]),
    ("fits", words(50), words(50), [words(50), words(400), words(400), words(50),
                                    words(50)]),
    ("short", words(50), words(50), [words(50)]),
]
TOTALS = {"tail": 1575, "head": 1473, "elide": 1053, "fits": 1175, "short": 175}
OVER = ("tail", "head", "elide")  # in input order


def hermes(row_id: str, system: str, human: str, outputs: list[str]) -> dict:
    turns = [{"from": "system", "value": system}, {"from": "human", "value": human}]
    for output in outputs:
        turns += [{"from": "gpt", "value": GPT_TEXT}, {"from": "tool", "value": output}]
    return {"id": row_id, "conversations": turns}


def openai(row_id: str, system: str, human: str, outputs: list[str]) -> dict:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": human}]
    for k, output in enumerate(outputs):
        call_id = f"call_{k}"
        messages += [{"role": "assistant", "content": words(5),
                      "tool_calls": [{"id": call_id, "type": "function",
                                      "function": {"name": "f", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": call_id, "content": output}]
    return {"id": row_id, "messages": messages}


def lf_messages(row_id: str, system: str, human: str, outputs: list[str]) -> dict:
    def text(value: str) -> list[dict]:
        return [{"type": "text", "value": value}]

    messages = [{"role": "system", "content": text(system)},
                {"role": "user", "content": text(human)}]
    for output in outputs:
        messages += [{"role": "assistant", "content": [
                         {"type": "text", "value": words(5)},
                         {"type": "tool_call", "value": json.dumps(CALL)}]},
                     {"role": "tool", "content": text(output)}]
    return {"id": row_id, "messages": messages}


def lf_sharegpt(row_id: str, system: str, human: str, outputs: list[str]) -> dict:
    turns = [{"from": "human", "value": human}]
    for output in outputs:
        turns += [{"from": "function_call", "value": FUNCTION_CALL},
                  {"from": "observation", "value": output}]
    return {"id": row_id, "conversations": turns, "system": system, "tools": "[]"}


DIALECTS = {"hermes": hermes, "openai": openai, "lf_messages": lf_messages,
            "lf_sharegpt": lf_sharegpt}
# (dialect, container): the matrix `compress` is tested on (Parquet holds Hermes rows).
CORPORA = [("hermes", "jsonl"), ("hermes", "parquet"), ("openai", "jsonl"),
           ("lf_sharegpt", "json"), ("lf_messages", "jsonl")]


def rows_of(dialect: str) -> list[dict]:
    return [DIALECTS[dialect](*spec) for spec in ROWS]


def write_corpus(folder: Path, dialect: str, container: str) -> Path:
    """The rows in ``dialect``, written as ``container`` in ``folder``."""
    rows = rows_of(dialect)
    path = folder / f"{dialect}.{container}"
    if container == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif container == "json":
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_settings(folder: Path) -> Path:
    path = folder / "hand.yaml"
    path.write_text(HAND_YAML, encoding="utf-8")
    return path
