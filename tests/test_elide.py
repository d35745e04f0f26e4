"""The second pass, `over_limit_strategy: elide_tool_outputs` (§16): huge tool outputs
outside the protected turns shortened, largest first, just enough; JSON stays JSON; tool
calls keep their results; every elision is in the row's metrics; `validate` passes.

The pure tests count words (a stand-in tokenizer whose counts are worked out by eye);
the others use the real tokenizer and check the result against counts taken afresh.
"""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cli_helpers import read_jsonl, run_cli
from tests.fixtures_runs import compress_run, count_words, words, write_jsonl
from tests.property_budget import examples
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.elide import (
    Elision,
    elide_tool_outputs,
    eligible_turns,
    marker,
    shorten,
)
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.core.plan import Region
from trajectory_compressor.dialects.messages import Messages
from trajectory_compressor.dialects.sharegpt import SHAREGPT
from trajectory_compressor.engine.compressor import RowResult, TrajectoryCompressor
from trajectory_compressor.inspect.validate import Validation, validate_output


def lines(n: int, tag: str = "line") -> list[str]:
    """``n`` lines of exactly 10 words each."""
    return [f"{tag}{i} " + " ".join(["w"] * 9) for i in range(n)]


# --- the pure pass -----------------------------------------------------------------------

def test_plain_text_keeps_its_first_and_last_lines_and_says_what_went():
    text = "\n".join(lines(10))  # 100 words
    out = shorten(text, 100, 40, count_words)
    kept = out.split("\n")
    assert kept[0] == "line0 w w w w w w w w w" and kept[-1] == "line9 w w w w w w w w w"
    [mark] = [line for line in kept if "elided" in line]
    # Each kept line is whole; the marker counts the words of the lines it replaced.
    gone = [line for line in lines(10) if line not in kept]
    assert mark == marker(10 * len(gone))
    # Within the budget, and just enough: one more kept line (10 words) would not fit.
    assert 30 < count_words([out])[0] <= 40


def test_json_stays_json_and_keeps_what_it_can():
    payload = {"path": "src/app.py", "stdout": "\n".join(lines(40)), "exit_code": 1}
    text = "<tool_response>\n" + json.dumps(payload) + "\n</tool_response>"
    tokens = count_words([text])[0]
    out = shorten(text, tokens, 120, count_words)
    first, *body, last = out.split("\n")
    assert (first, last) == ("<tool_response>", "</tool_response>")
    value = json.loads("\n".join(body))
    assert value["path"] == "src/app.py" and value["exit_code"] == 1
    stdout = value["stdout"].split("\n")
    assert stdout[0] == lines(1)[0] and stdout[-1] == lines(40)[-1]
    assert any("tokens elided" in line for line in stdout)
    assert count_words([out])[0] <= 120


def test_a_long_json_array_loses_items_from_its_middle_and_keeps_its_indentation():
    items = [{"id": i, "name": f"item {i}"} for i in range(60)]
    text = json.dumps(items, indent=2)
    tokens = count_words([text])[0]
    out = shorten(text, tokens, tokens // 3, count_words)
    value = json.loads(out)
    assert value[0] == items[0] and value[-1] == items[-1]
    markers = [v for v in value if isinstance(v, str)]
    assert len(markers) == 1 and markers[0].endswith("tokens elided ...]")
    kept = [v for v in value if isinstance(v, dict)]
    assert kept == [i for i in items if i in kept]  # in order, unchanged
    assert out.startswith("[\n  {\n    \"id\": 0,")  # indent 2, as written
    assert count_words([out])[0] <= tokens // 3


def test_largest_first_and_just_enough():
    a, b, c = "\n".join(lines(30, "a")), "\n".join(lines(20, "b")), "\n".join(lines(5, "c"))
    texts = ["system", a, "gpt", b, c]  # 300, 200 and 50 words of tool output
    # 150 to go: the largest output gives them all; the others stay as they were.
    [(turn, text, elision)] = elide_tool_outputs(texts, [1, 3, 4], 150, count_words)
    assert turn == 1 and elision.tokens_before == 300 and 140 < elision.tokens_after <= 150
    assert elision.tokens_after == count_words([text])[0]
    # 400 to go: the largest is cut to its first and last lines and the marker (25
    # words), the next gives the other 125; the 50-word output (under MIN_TOKENS) never.
    found = elide_tool_outputs(texts, [1, 3, 4], 400, count_words)
    assert [(t, e.tokens_before) for t, _, e in found] == [(1, 300), (3, 200)]
    assert found[0][2] == Elision(1, 300, 25)
    assert 65 < found[1][2].tokens_after <= 75
    assert elide_tool_outputs(texts, [1, 3, 4], 0, count_words) == []


def test_only_tool_turns_of_the_middle_are_eligible():
    roles = ["system", "human", "gpt", "tool", "gpt", "tool", "tool", "gpt", "tool", "gpt"]
    # Middle [4, 9) before any summary: tools 5, 6, 8 (3 is in the protected head).
    assert eligible_turns(roles, Region(4, 9)) == [5, 6, 8]
    # A summary replaced turns 4-5 (now one turn at 4): the middle ends one turn earlier.
    after = ["system", "human", "gpt", "tool", "human", "tool", "gpt", "tool", "gpt"]
    assert eligible_turns(after, Region(4, 9), Region(4, 6), 4) == [5, 7]


# --- rows through the compressor ----------------------------------------------------------

BIG_JSON = json.dumps({"path": "/repo/data.csv", "rows": [
    {"id": i, "line": f"record {i}: " + words(12)} for i in range(120)], "truncated": False})
BIG_TEXT = "\n".join(f"{i:04d} | " + words(15) for i in range(150))


def hermes_row() -> dict:
    """Head 0-3, tail 8-11 (it starts with a tool turn), middle 4-7 = G G T T: the summary
    can only take turn 4; the two huge outputs (6, 7) stay in the middle."""
    values = [words(10), words(5), words(5), words(5), words(30), words(30),
              "<tool_response>\n" + BIG_JSON + "\n</tool_response>", BIG_TEXT,
              words(5), words(5), words(5), words(5)]
    roles = ["system", "human", "gpt", "tool", "gpt", "gpt", "tool", "tool", "tool", "gpt",
             "human", "gpt"]
    return {"id": "huge", "conversations": [{"from": r, "value": v}
                                            for r, v in zip(roles, values, strict=True)]}


TARGET = 4000


def config(**extra) -> CompressionConfig:
    return CompressionConfig(**{"summarizer": "extractive", "target_max_tokens": TARGET,
                                "summary_target_tokens": 20, "add_summary_notice": False,
                                **extra})


def compress(counter, row, **extra) -> RowResult:
    dialect = Messages() if "messages" in row else SHAREGPT
    comp = TrajectoryCompressor(config(**extra), ExtractiveSummarizer(counter.count), counter,
                                dialect=dialect)

    async def once() -> RowResult:
        async with comp:
            return await comp.compress_row(row)

    return asyncio.run(once())


def test_by_default_a_row_over_the_limit_is_kept_as_the_summary_left_it(counter):
    result = compress(counter, hermes_row())
    assert result.plan.region == Region(4, 5) and result.plan.region_tokens == 30
    assert result.metrics.still_over_limit and result.why is not None
    assert result.why.code == "budget_not_reached"
    assert "elisions" not in result.row["compression_metrics"]


def test_huge_tool_outputs_are_elided_until_the_row_fits(counter):
    original = hermes_row()
    sizes = counter.count_many([t["value"] for t in original["conversations"]])
    largest = 6 if sizes[6] >= sizes[7] else 7
    result = compress(counter, original, over_limit_strategy="elide_tool_outputs")
    m = result.metrics
    turns = result.row["conversations"]
    total = sum(counter.count_many([t["value"] for t in turns]))
    assert not m.still_over_limit and result.why is None and m.was_compressed
    # Just enough: the row ends just under the target, not far below it.
    assert TARGET - 100 < m.compressed_tokens == total <= TARGET
    # The summary (a human turn) took turn 4: every other turn is where it was.
    roles = [t["from"] for t in original["conversations"]]
    assert [t["from"] for t in turns] == [*roles[:4], "human", *roles[5:]]
    for i in (0, 1, 2, 3, 5, 8, 9, 10, 11):
        assert turns[i] == original["conversations"][i]
    # Only the largest output had to give: about what the summary could not.
    [elision] = result.row["compression_metrics"]["elisions"]
    assert elision == {"turn": largest, "tokens_before": sizes[largest],
                       "tokens_after": counter.count(turns[largest]["value"])}
    assert turns[13 - largest] == original["conversations"][13 - largest]
    summary = counter.count(turns[4]["value"])
    assert m.compressed_tokens == sum(sizes) - 30 + summary - sizes[largest] + \
        elision["tokens_after"]
    if largest == 6:
        body = turns[6]["value"].split("\n")
        assert body[0] == "<tool_response>" and body[-1] == "</tool_response>"
        value = json.loads("\n".join(body[1:-1]))
        assert value["path"] == "/repo/data.csv" and value["truncated"] is False
        assert value["rows"][0] == json.loads(BIG_JSON)["rows"][0]
    else:
        kept = turns[7]["value"].split("\n")
        assert kept[0] == BIG_TEXT.split("\n")[0] and kept[-1] == BIG_TEXT.split("\n")[-1]


def test_a_row_the_elisions_cannot_bring_under_is_left_as_the_summary_left_it(counter):
    # A huge protected tail turn: the tail alone is over a 2,000-token target.
    row = hermes_row()
    row["conversations"][8]["value"] = BIG_TEXT
    kept = compress(counter, row, target_max_tokens=2000)
    assert kept.why is not None and kept.why.code == "protected_tail_over_target"
    result = compress(counter, row, target_max_tokens=2000,
                      over_limit_strategy="elide_tool_outputs")
    assert result.metrics.still_over_limit
    assert "elisions" not in result.row["compression_metrics"]
    assert result.row["conversations"] == kept.row["conversations"]
    assert result.metrics.compressed_tokens == kept.metrics.compressed_tokens


def messages_row() -> dict:
    def call(i: int, name: str) -> dict:
        return {"id": f"call_{i}", "type": "function",
                "function": {"name": name, "arguments": json.dumps({"path": f"/r/{i}"})}}

    return {"id": "oa", "messages": [
        {"role": "system", "content": words(10)},
        {"role": "user", "content": words(5)},
        {"role": "assistant", "content": None, "tool_calls": [call(0, "ls")]},
        {"role": "tool", "tool_call_id": "call_0", "name": "ls", "content": words(5)},
        {"role": "assistant", "content": words(30)},
        {"role": "assistant", "content": "Reading both.",
         "tool_calls": [call(1, "read"), call(2, "cat"), call(3, "stat")]},
        {"role": "tool", "tool_call_id": "call_1", "name": "read", "content": BIG_JSON},
        {"role": "tool", "tool_call_id": "call_2", "name": "cat",
         "content": [{"type": "text", "text": BIG_TEXT}]},
        {"role": "tool", "tool_call_id": "call_3", "name": "stat", "content": words(5)},
        {"role": "assistant", "content": words(5)},
        {"role": "user", "content": words(5)},
        {"role": "assistant", "content": words(5)},
    ]}


def test_openai_tool_messages_keep_their_calls_and_json(counter):
    original = messages_row()
    result = compress(counter, original, over_limit_strategy="elide_tool_outputs")
    assert not result.metrics.still_over_limit, result.metrics
    messages = result.row["messages"]
    Messages().turns(result.row)  # every tool result still answers its call
    tools = [(m["tool_call_id"], m["name"]) for m in messages if m["role"] == "tool"]
    assert tools == [("call_0", "ls"), ("call_1", "read"), ("call_2", "cat"),
                     ("call_3", "stat")]
    read = next(m for m in messages if m.get("tool_call_id") == "call_1")
    cat = next(m for m in messages if m.get("tool_call_id") == "call_2")
    elided = {e["turn"] for e in result.row["compression_metrics"]["elisions"]}
    assert elided and elided <= {messages.index(read), messages.index(cat)}
    if messages.index(read) in elided:
        assert json.loads(read["content"])["path"] == "/repo/data.csv"
    if messages.index(cat) in elided:
        assert [p["type"] for p in cat["content"]] == ["text"]  # still a list of parts
        assert cat["content"][0]["text"].startswith("0000 | ")
    # Messages nobody changed are the objects that were read.
    assert messages[-1] == original["messages"][-1]


def test_a_run_with_elisions_validates(tmp_path, counter):
    src = write_jsonl(tmp_path / "in.jsonl", [hermes_row()])
    out = tmp_path / "out.jsonl"
    result = compress_run(src, out, config(over_limit_strategy="elide_tool_outputs"),
                          counter)
    assert result.metrics.trajectories_still_over_limit == 0
    assert result.metrics.rows_elided == 1 and result.metrics.tool_outputs_elided >= 1
    found = Validation()
    assert list(validate_output(str(out), config(), found, counter)) == []
    assert found.rows == 1
    [written] = read_jsonl(out)
    assert written["compression_metrics"]["elisions"]
    metrics = json.loads(out.with_name("out_metrics.json").read_text())
    assert metrics["over_limit"]["rows_elided"] == 1
    assert not out.with_name("out_over_limit.jsonl").read_text().strip()


def test_parquet_output_carries_the_elisions_and_truncation_flag(tmp_path, counter):
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = hermes_row()
    jsonl_out = tmp_path / "out.jsonl"
    compress_run(write_jsonl(tmp_path / "in.jsonl", [row]), jsonl_out,
                 config(over_limit_strategy="elide_tool_outputs"), counter)
    [expected] = read_jsonl(jsonl_out)
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([row]), src)
    out = tmp_path / "out.parquet"
    compress_run(src, out, config(over_limit_strategy="elide_tool_outputs"), counter)
    [written] = pq.read_table(out).to_pylist()
    metrics = written["compression_metrics"]
    assert metrics["elisions"] == expected["compression_metrics"]["elisions"]
    assert len(metrics["elisions"]) >= 1
    assert metrics["summary_truncated"] in (None, False)
    assert written["conversations"] == expected["conversations"]


def test_the_strategy_from_the_command_line_and_validate(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [hermes_row()])
    out = tmp_path / "out.jsonl"
    common = ["--summarizer", "extractive", "--target-max-tokens", str(TARGET),
              "--summary-target-tokens", "20", "--quiet"]
    proc = run_cli("compress", str(src), "-o", str(out), *common,
                   "--over-limit-strategy", "elide_tool_outputs", "--max-over-limit", "0")
    assert proc.returncode == 0, proc.stderr
    [written] = read_jsonl(out)
    assert written["compression_metrics"]["elisions"]
    proc = run_cli("validate", str(out), "--target-max-tokens", str(TARGET),
                   "--max-over-limit", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_cli("compress", str(src), "-o", str(tmp_path / "bad.jsonl"), *common,
                   "--over-limit-strategy", "shorten")
    assert proc.returncode == 2
    assert "over_limit_strategy must be one of keep, elide_tool_outputs" in proc.stderr


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=400),
    lambda inner: st.lists(inner, max_size=12)
    | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=60)


@settings(max_examples=examples(150), deadline=None)
@given(value=_json_values.filter(lambda v: isinstance(v, (dict, list))),
       indent=st.sampled_from([None, 2]), wrapped=st.booleans(),
       share=st.floats(0, 1))
def test_json_in_is_json_out_whatever_the_budget(value, indent, wrapped, share):
    body = json.dumps(value, indent=indent)
    text = f"<tool_response>\n{body}\n</tool_response>" if wrapped else body
    tokens = count_words([text])[0]
    out = shorten(text, tokens, int(tokens * share), count_words)
    if wrapped:
        first, *inner, last = out.split("\n")
        assert (first, last) == ("<tool_response>", "</tool_response>")
        out = "\n".join(inner)
    assert type(json.loads(out)) is type(value)  # the outermost value always stays


@settings(max_examples=examples(150), deadline=None)
@given(text=st.lists(st.text(st.characters(blacklist_characters="\n"), max_size=60),
                     min_size=3, max_size=40).map("\n".join),
       share=st.floats(0, 1))
def test_plain_text_keeps_its_first_and_last_lines(text, share):
    if text.lstrip()[:1] in ("{", "["):
        return  # JSON's own rules
    tokens = count_words([text])[0]
    out = shorten(text, tokens, int(tokens * share), count_words)
    if out == text:
        return
    first, *_, last = text.split("\n")
    assert out.split("\n")[0] == first and out.split("\n")[-1] == last


def test_a_json_string_of_many_lines_gives_all_it_can_before_a_shorter_one_is_cut():
    # README: the longest strings first, "each only as far as needed". Inside JSON a
    # string's line breaks are written escaped ("\n" -> "\\n"), which joins the words
    # around them for this counter: a cut measured on the bare text misjudged what it
    # saves, gave up on the long string and cut the short one too.
    long_text, short_text = "\n".join(lines(40, "a")), "\n".join(lines(12, "b"))
    text = json.dumps({"long": long_text, "short": short_text})
    total = count_words([text])[0]
    # The long string alone can go down to its first and last lines and a marker.
    floor = count_words([json.dumps({"long": "\n".join([lines(40, "a")[0], marker(9999),
                                                        lines(40, "a")[-1]]),
                                     "short": short_text})])[0]
    checked = 0
    for budget in range(floor + 5, total - 5, 7):
        out = json.loads(shorten(text, total, budget, count_words))
        assert count_words([json.dumps(out)])[0] <= budget, budget
        assert out["short"] == short_text, budget
        checked += 1
    assert checked > 20
