"""`validate`'s counts and problems on hand-made output rows (``words(n)`` is ``n``
tokens with the bundled tokenizer; the default counting sums the turns)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.fixtures_runs import row, write_jsonl
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.conversation import SUMMARY_PREFIX
from trajectory_compressor.inspect.validate import Validation, validate_output

# -- validate's counts ----------------------------------------------------------------------

def validated(tmp_path, rows: list[dict], target: int, counter,
              extra: tuple[str, ...] = ()) -> tuple[Validation, list]:
    out = write_jsonl(tmp_path / "out.jsonl", rows, extra)
    found = Validation()
    problems = list(validate_output(str(out), CompressionConfig(target_max_tokens=target,
                                                                summary_target_tokens=10),
                                    found, counter))
    return found, problems


def test_validate_counts_the_rows_whose_metrics_record_an_error(tmp_path, counter):
    failed = {**row("bad", "SHG", [10, 10, 10]),
              "compression_metrics": {"error": "the summarizer failed", "still_over_limit": True}}
    fine = {**row("ok", "SHG", [10, 10, 10]), "compression_metrics": {"error": None}}
    again = {**failed, "id": "bad-2"}  # another row (the same id twice is a problem)
    found, problems = validated(tmp_path, [failed, fine, again], 100, counter)
    assert (found.rows, found.failed, found.problems, problems) == (3, 2, 0, [])


def test_a_row_exactly_at_the_target_is_within_it(tmp_path, counter):
    """30 tokens against a target of 30 fits (over means more than the target); 31 does
    not."""
    at = row("at", "SHG", [10, 10, 10])
    over = row("over", "SHG", [10, 10, 11])
    found, problems = validated(tmp_path, [at, over], 30, counter)
    assert (found.rows, found.over_limit) == (2, 1)
    assert [p.location for p in problems] == [f"{tmp_path / 'out.jsonl'}:2"]


def hermes(roles: str, *values: str) -> dict:
    names = {"S": "system", "H": "human", "G": "gpt", "T": "tool"}
    return {"conversations": [{"from": names[r], "value": v}
                              for r, v in zip(roles, values, strict=True)]}


def test_each_rule_of_a_row_is_one_problem_and_one_count(tmp_path, counter):
    one = hermes("SHG", "sys", f"{SUMMARY_PREFIX} what happened", "next")
    two = hermes("SHHG", "sys", f"{SUMMARY_PREFIX} a", f"{SUMMARY_PREFIX} b", "next")
    same = {**hermes("HG", "a", "b"),
            "compression_metrics": {"original_tokens": 30, "compressed_tokens": 30}}
    grown = {**hermes("HG", "a", "b"),
             "compression_metrics": {"original_tokens": 10, "compressed_tokens": 11}}
    # Hermes rows need not alternate (a call may have two results): not a problem here.
    calls = hermes("HGTTG", "do it", "<tool_call>x</tool_call>", "out 1", "out 2", "done")
    found, problems = validated(tmp_path, [one, two, same, grown, calls], 1000, counter,
                                extra=("{not json",))
    out = tmp_path / "out.jsonl"
    assert [(p.location, p.message) for p in problems[:2]] == [
        (f"{out}:2", "2 summaries in one row, in turns 1, 2 (a compressed row has one)"),
        (f"{out}:4", "compression made the row longer (10 -> 11 tokens)")]
    (unreadable,) = problems[2:]
    assert unreadable.location == f"{out}:6"
    assert "JSON" in unreadable.message  # the reader's reason, not a stock phrase
    assert (found.rows, found.problems, found.unreadable, found.over_limit, found.failed) == (
        6, 3, 1, 0, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        unreadable.message = "changed"  # type: ignore[misc]


def test_a_clean_output_counts_nothing_but_its_rows(tmp_path, counter):
    rows = [hermes("HG", "a", f"b{i}") for i in range(3)]  # the same row twice is a problem
    found, problems = validated(tmp_path, rows, 1000, counter)
    assert problems == []
    assert found == Validation(rows=3)  # problems, over_limit, failed, unreadable all 0


def test_a_llamafactory_row_must_alternate(tmp_path, counter):
    """LLaMA-Factory drops a row whose user-side turns (human, observation) and
    assistant-side turns (gpt, function_call) do not alternate."""
    good = {"conversations": [{"from": "human", "value": "list files"},
                              {"from": "function_call", "value": '{"name": "ls"}'},
                              {"from": "observation", "value": "a.py"},
                              {"from": "gpt", "value": "one file"}]}
    bad = {"conversations": [{"from": "human", "value": "list files"},
                             {"from": "human", "value": "again"},
                             {"from": "function_call", "value": '{"name": "ls"}'},
                             {"from": "observation", "value": "a.py"},
                             {"from": "gpt", "value": "one file"}]}
    out = tmp_path / "lf.json"
    other = {"conversations": [*good["conversations"][:3], {"from": "gpt", "value": "done"}]}
    out.write_text(json.dumps([good, bad, other]), encoding="utf-8")
    found = Validation()
    problems = list(validate_output(str(out), CompressionConfig(summary_target_tokens=10,
                                                                target_max_tokens=1000),
                                    found, counter))
    assert [p.message for p in problems] == [
        "user-side and assistant-side turns do not alternate (LLaMA-Factory drops it)"]
    assert (found.rows, found.problems) == (3, 1)


def test_the_counter_given_is_used_else_the_configs_tokenizer_is_loaded(tmp_path, counter):
    out = write_jsonl(tmp_path / "out.jsonl", [row("a", "HG", [10, 10])])
    elsewhere = CompressionConfig(target_max_tokens=19, summary_target_tokens=10,
                                  tokenizer_name=str(tmp_path / "no-such-tokenizer"))
    found = Validation()
    problems = list(validate_output(str(out), elsewhere, found, counter))  # never loaded
    assert (found.over_limit, len(problems)) == (1, 1)  # 20 tokens > 19
    found = Validation()
    default = CompressionConfig(target_max_tokens=20, summary_target_tokens=10)
    assert list(validate_output(str(out), default, found)) == []  # the bundled tokenizer
    assert (found.rows, found.over_limit) == (1, 0)


def test_a_row_the_template_cannot_render_is_one_problem(tmp_path, counter):
    """A chat template that refuses tool messages (as some do): the row with a tool turn
    is a problem that says why, the others are counted."""
    template = tmp_path / "no_tools.jinja"
    template.write_text("{% for m in messages %}{% if m.role == 'tool' %}"
                        "{{ raise_exception('this template has no tool role') }}{% endif %}"
                        "{{ m.role }}: {{ m.content }}\n{% endfor %}", encoding="utf-8")
    out = write_jsonl(tmp_path / "out.jsonl", [
        hermes("HG", "a", "b"),
        hermes("HGTG", "do it", "<tool_call>x</tool_call>", "result", "done")])
    config = CompressionConfig(target_max_tokens=1000, summary_target_tokens=10,
                               token_counting="chat_template", chat_template=str(template))
    found = Validation()
    problems = list(validate_output(str(out), config, found, counter))
    assert [p.location for p in problems] == [f"{out}:2"]
    assert problems[0].message.startswith("cannot count the row: ")
    assert "this template has no tool role" in problems[0].message
    assert (found.rows, found.problems, found.over_limit) == (2, 1, 0)
