"""`--token-counting chat_template` end to end: the count that decides "over the target" is
the length transformers' `apply_chat_template` gives for the row, before and after.

Expected values come from transformers itself (the tokenizer folder's own template, called
in the test), not from the package's counter.
"""

from __future__ import annotations

import json

from tests.cli_helpers import ROOT, read_jsonl, run_cli
from tests.template_tokenizer import load_template_tokenizer, make_tokenizer_dir
from trajectory_compressor.counting.template import chat_template_ids

SAMPLES = ROOT / "data_samples"


def _chat(message: dict) -> dict:
    """An OpenAI message as templates take it (what a trainer passes): text content,
    arguments as objects."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(p.get("text", p.get("value", "")) for p in content)
    out = {"role": message["role"], "content": content or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["function"]["name"],
                          "arguments": json.loads(c["function"]["arguments"])}}
            for c in message["tool_calls"]]
    if "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    return out


def _length(tokenizer, row: dict) -> int:
    tools = row.get("tools")
    ids = tokenizer.apply_chat_template([_chat(m) for m in row["messages"]],
                                        tools=tools, tokenize=True)
    return len(chat_template_ids(ids))


def test_row_counts_are_the_chat_template_length_before_and_after(tmp_path):
    folder = make_tokenizer_dir(tmp_path / "tok")
    tokenizer = load_template_tokenizer(tmp_path / "tok2")
    rows = read_jsonl(SAMPLES / "openai_messages.jsonl")
    lengths = [_length(tokenizer, r) for r in rows]
    target = sorted(lengths)[len(lengths) // 2]  # about half the rows over the target
    src = tmp_path / "chat.jsonl"
    src.write_bytes((SAMPLES / "openai_messages.jsonl").read_bytes())
    result = run_cli("compress", str(src), "--tokenizer", str(folder), "--token-counting",
                     "chat_template", "--summarizer", "extractive", "--no-cache",
                     "--target-max-tokens", str(target), "--summary-target-tokens", "300")
    assert result.returncode == 0, result.stderr
    out = read_jsonl(tmp_path / "chat_compressed.jsonl")
    compressed = 0
    for before, after, length in zip(rows, out, lengths, strict=True):
        m = after.get("compression_metrics")
        if length <= target:
            assert m is None and after == before
            continue
        assert m["original_tokens"] == length
        assert m["compressed_tokens"] == _length(tokenizer, after)
        assert m["still_over_limit"] == (m["compressed_tokens"] > target)
        compressed += m["was_compressed"]
    assert compressed >= 3
    metrics = json.loads((tmp_path / "chat_compressed_metrics.json").read_text())
    identity = metrics["tokenizer"]
    assert (identity["name"], identity["counting"]) == (str(folder), "chat_template")
    assert len(identity["files_sha256"]) == 16 and identity["template_sha256"] == "tokenizer"


def test_a_tokenizer_without_a_chat_template_names_the_option(tmp_path):
    src = tmp_path / "chat.jsonl"
    src.write_bytes((SAMPLES / "openai_messages.jsonl").read_bytes())
    result = run_cli("compress", str(src), "--token-counting", "chat_template",
                     "--summarizer", "extractive")
    assert result.returncode == 2
    assert "--chat-template" in result.stderr and "Traceback" not in result.stderr


def test_a_chat_template_file_replaces_the_tokenizer_s_own(tmp_path):
    from tests.template_tokenizer import CHATML

    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    src = tmp_path / "chat.jsonl"
    src.write_bytes((SAMPLES / "openai_messages.jsonl").read_bytes())
    result = run_cli("analyze", str(src), "--token-counting", "chat_template",
                     "--chat-template", str(template), "--json", "-")
    assert result.returncode == 0, result.stderr
    tokenizer = load_template_tokenizer(tmp_path / "tok")
    rows = read_jsonl(src)
    figures = json.loads(result.stdout)
    assert figures["tokens"]["max"] == max(_length(tokenizer, r) for r in rows)


def test_analyze_shows_how_many_rows_the_per_turn_sum_puts_on_the_wrong_side(tmp_path):
    from trajectory_compressor.core.config import CompressionConfig
    from trajectory_compressor.counting.tokens import TokenCounter
    from trajectory_compressor.dialects.messages import Messages
    from trajectory_compressor.engine.count import RowCounter

    folder = make_tokenizer_dir(tmp_path / "tok")
    tokenizer = load_template_tokenizer(tmp_path / "tok2")
    rows = read_jsonl(SAMPLES / "openai_messages.jsonl")
    templated = [_length(tokenizer, r) for r in rows]
    per_turn = [sum(c) for c in RowCounter(CompressionConfig(), TokenCounter.load(str(folder)))
                .count([(Messages(), r, Messages().turns(r)) for r in rows])]
    assert all(t > s for t, s in zip(templated, per_turn, strict=True))  # markers, tools
    # A target between the two counts of the median row: that row changes side.
    order = sorted(range(len(rows)), key=lambda i: per_turn[i])
    middle = order[len(order) // 2]
    target = (per_turn[middle] + templated[middle]) // 2
    expected = sum(1 for s, t in zip(per_turn, templated, strict=True) if s <= target < t)
    result = run_cli("analyze", str(SAMPLES / "openai_messages.jsonl"), "--tokenizer",
                     str(folder), "--target-max-tokens", str(target), "--json", "-")
    assert result.returncode == 0, result.stderr
    gap = json.loads(result.stdout)["counting_gap"]
    assert gap["rows"] == len(rows)
    differences = sorted(t - s for s, t in zip(per_turn, templated, strict=True))
    assert (gap["template_minus_turns"]["min"], gap["template_minus_turns"]["max"]) == \
        (differences[0], differences[-1])
    assert gap["targets"] == [{"target": target, "under_by_turns_over_by_template": expected,
                               "over_by_turns_under_by_template": 0}]
    assert expected >= 1



def test_resume_refuses_another_tokenizer(tmp_path):
    import signal

    from tests.cli_helpers import interrupt_when, start_cli
    from tests.datagen import write_jsonl
    from tests.test_resume import ARGS

    src = write_jsonl(tmp_path / "in.jsonl", 3000)
    out = tmp_path / "out.jsonl"
    proc = start_cli("compress", str(src), "-o", str(out), *ARGS, "--checkpoint-every", "50")
    interrupt_when(proc, (tmp_path / ".out.checkpoint.json").exists, signal.SIGKILL)
    folder = make_tokenizer_dir(tmp_path / "tok")  # the same vocabulary, other files
    again = run_cli("compress", str(src), "-o", str(out), *ARGS, "--resume",
                    "--tokenizer", str(folder))
    assert again.returncode == 2
    assert "cannot resume" in again.stderr and "tokenizer" in again.stderr
