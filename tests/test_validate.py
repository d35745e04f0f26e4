"""`validate OUTPUT`: one line per broken rule with its location, exit 1; clean outputs 0."""

from __future__ import annotations

import json

from tests.cli_helpers import invoke_cli, read_jsonl
from tests.sample_files import sample_head
from tests.template_tokenizer import load_template_tokenizer, make_tokenizer_dir
from tests.test_template_pipeline import _length


def _compressed(tmp_path, name: str):
    src = sample_head(name, tmp_path)  # 10 rows (of 50 in the Hermes sample)
    result = invoke_cli("compress", str(src), "--summarizer", "extractive", "--no-cache", "-q")
    assert result.returncode == 0, result.stderr
    stem, suffix = name.rsplit(".", 1)
    return tmp_path / f"{stem}_compressed.{suffix}"


def test_a_fresh_output_of_every_dialect_passes(tmp_path):
    for name in ("trajectories.jsonl", "openai_messages.jsonl", "llamafactory_sharegpt.json",
                 "llamafactory_messages.jsonl"):
        out = _compressed(tmp_path, name)
        metrics_name = out.name.rsplit(".", 1)[0] + "_metrics.json"
        over = json.loads((tmp_path / metrics_name).read_text())["summary"][
            "trajectories_still_over_limit"]
        result = invoke_cli("validate", str(out))
        # Rows over the target fail the check unless allowed (issue 40 item 1).
        assert result.returncode == (1 if over else 0), (name, result.stdout, result.stderr)
        allowed = invoke_cli("validate", str(out), "--allow-over-limit")
        assert allowed.returncode == 0, (name, allowed.stdout, allowed.stderr)
        noted = (f"; allowed by --allow-over-limit: {over} row{'s' * (over != 1)} over the "
                 "target 15,250, flagged still_over_limit by the run" if over else "")
        assert allowed.stdout.strip().splitlines()[-1] == (
            f"10 rows checked, 0 problems{noted} (target 15,250, summary 750, counting turns, "
            f"tokenizer deepseek-v4; settings from {metrics_name})"), name


def test_each_broken_rule_is_one_located_line(tmp_path):
    out = _compressed(tmp_path, "openai_messages.jsonl")
    rows = read_jsonl(out)
    orphan = json.loads(json.dumps(rows[0]))
    orphan["messages"].insert(1, {"role": "tool", "tool_call_id": "nope", "content": "x"})
    twice = json.loads(json.dumps(rows[1]))
    twice["messages"].insert(1, {"role": "user", "content": "[CONTEXT SUMMARY]: a"})
    twice["messages"].insert(1, {"role": "user", "content": "[CONTEXT SUMMARY]: b"})
    grown = json.loads(json.dumps(rows[2]))
    grown["compression_metrics"] = {**(grown.get("compression_metrics") or {}),
                                    "original_tokens": 10, "compressed_tokens": 11}
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in (orphan, twice, grown, rows[3])),
                   encoding="utf-8")
    result = invoke_cli("validate", str(bad))
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith(f"{bad}:1: messages[1] is a tool result")
    assert lines[1].startswith(f"{bad}:2: ") and "summaries in one row" in lines[1]
    assert lines[2] == f"{bad}:3: compression made the row longer (10 -> 11 tokens)"
    assert lines[-1] == ("4 rows checked, 3 problems: 1 unreadable row; 1 row with more "
                         "than one summary; 1 row compression made longer (target 15,250, "
                         "summary 750, counting turns, tokenizer deepseek-v4; no metrics file "
                         "beside it: built-in defaults)")


def test_a_llamafactory_row_that_no_longer_alternates_is_named(tmp_path):
    out = _compressed(tmp_path, "llamafactory_sharegpt.json")
    rows = json.loads(out.read_text(encoding="utf-8"))
    rows[0]["conversations"].insert(1, {"from": "human", "value": "again"})
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(rows), encoding="utf-8")
    result = invoke_cli("validate", str(broken), "-q", "--allow-over-limit")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{broken} row 0: user-side and assistant-side turns do not alternate "
        "(LLaMA-Factory drops it)"]


def test_with_the_chat_template_rows_over_the_target_are_found(tmp_path):
    out = _compressed(tmp_path, "openai_messages.jsonl")
    folder = make_tokenizer_dir(tmp_path / "tok")
    tokenizer = load_template_tokenizer(tmp_path / "tok2")
    # Every row over the target, flagged by its run or not (issue 40 item 1).
    expected = [i + 1 for i, row in enumerate(read_jsonl(out))
                if _length(tokenizer, row) > 15250]
    result = invoke_cli("validate", str(out), "--tokenizer", str(folder), "--token-counting",
                     "chat_template", "-q")
    assert expected, "the per-turn count leaves some rows over the template length"
    assert result.returncode == 1
    assert [int(line.split(":")[1]) for line in result.stdout.splitlines()] == expected
