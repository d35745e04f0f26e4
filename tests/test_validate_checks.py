"""`validate` says what is wrong (issue 40 item 1, issue 36 item 6): rows over the target
are a problem kind of their own; unanswered tool calls in every dialect; more than one
summary; repeated rows; an output that disagrees with its metrics file (dropped or added
rows, edited rows, another run's metrics); and `report` says so too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli_helpers import invoke_cli, read_jsonl
from tests.sample_files import sample_head

NO_CONFIG = ("--no-config",)
CLOSING_SETTINGS = ("(target 15,250, summary 750, counting turns, tokenizer deepseek-v4; "
                    "no metrics file beside it: no config file (--no-config))")


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _validate(path: Path, *flags: str):
    return invoke_cli("validate", str(path), *NO_CONFIG, *flags)


# Unanswered tool calls, by hand, one row per dialect: (rows, expected problem lines).
HERMES_CALL = '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'
HERMES = [
    {"id": "h-ok", "conversations": [
        {"from": "human", "value": "list"}, {"from": "gpt", "value": HERMES_CALL},
        {"from": "tool", "value": "<tool_response>\na.py\n</tool_response>"},
        {"from": "gpt", "value": "done"}]},
    {"id": "h-none", "conversations": [
        {"from": "human", "value": "list"}, {"from": "gpt", "value": HERMES_CALL},
        {"from": "human", "value": "well?"}, {"from": "gpt", "value": "done"}]},
    {"id": "h-half", "conversations": [
        {"from": "human", "value": "list"},
        {"from": "gpt", "value": HERMES_CALL + "\n" + HERMES_CALL},
        {"from": "tool", "value": "<tool_response>\na.py\n</tool_response>"},
        {"from": "gpt", "value": "done"}]},
]
OPENAI_CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
OPENAI = [
    {"id": "o-ok", "messages": [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "", "tool_calls": [OPENAI_CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "assistant", "content": "done"}]},
    {"id": "o-none", "messages": [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "", "tool_calls": [OPENAI_CALL]},
        {"role": "user", "content": "well?"}, {"role": "assistant", "content": "done"}]},
    {"id": "o-half", "messages": [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "",
         "tool_calls": [OPENAI_CALL, {**OPENAI_CALL, "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "b.py"},
        {"role": "assistant", "content": "done"}]},
]
LF_CALL = '{"name": "ls", "arguments": {}}'
LLAMAFACTORY = [
    {"id": "l-ok", "conversations": [
        {"from": "human", "value": "list"}, {"from": "function_call", "value": LF_CALL},
        {"from": "observation", "value": "a.py"}, {"from": "gpt", "value": "done"}]},
    {"id": "l-none", "conversations": [
        {"from": "human", "value": "list"}, {"from": "function_call", "value": LF_CALL},
        {"from": "human", "value": "well?"}, {"from": "gpt", "value": "done"}]},
]
LF_MESSAGES = [
    {"id": "m-ok", "messages": [
        {"role": "user", "content": [{"type": "text", "value": "list"}]},
        {"role": "assistant", "content": [{"type": "tool_call", "value": LF_CALL}]},
        {"role": "tool", "content": [{"type": "text", "value": "a.py"}]},
        {"role": "assistant", "content": [{"type": "text", "value": "done"}]}]},
    {"id": "m-none", "messages": [
        {"role": "user", "content": [{"type": "text", "value": "list"}]},
        {"role": "assistant", "content": [{"type": "tool_call", "value": LF_CALL}]},
        {"role": "user", "content": [{"type": "text", "value": "well?"}]},
        {"role": "assistant", "content": [{"type": "text", "value": "done"}]}]},
]




@pytest.mark.parametrize("rows, where, expected", [
    (HERMES, "jsonl", {2: "turn 1 makes a tool call that no tool result answers",
                       3: "turn 1 makes 2 tool calls but only 1 tool results answer them"}),
    (OPENAI, "jsonl", {2: "turn 1 makes a tool call that no tool result answers",
                       3: "turn 1 makes 2 tool calls but only 1 tool results answer them"}),
    (LLAMAFACTORY, "json", {2: "turn 1 makes a tool call that no tool result answers"}),
    (LF_MESSAGES, "jsonl", {2: "turn 1 makes a tool call that no tool result answers"}),
], ids=["hermes", "openai", "llamafactory-sharegpt", "llamafactory-messages"])
def test_an_unanswered_tool_call_is_found_in_every_dialect(tmp_path, rows, where, expected):
    if where == "json":
        path = tmp_path / "rows.json"
        path.write_text(json.dumps(rows), encoding="utf-8")
        located = {f"{path} row {n - 1}": m for n, m in expected.items()}
    else:
        path = _write_jsonl(tmp_path / "rows.jsonl", rows)
        located = {f"{path}:{n}": m for n, m in expected.items()}
    result = _validate(path)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stdout.strip().splitlines()
    assert lines[:-1] == [f"{where_}: {message}" for where_, message in located.items()]
    n = len(expected)
    noun = "rows with a tool call no result answers" if n > 1 else \
        "row with a tool call no result answers"
    assert lines[-1] == f"{len(rows)} rows checked, {n} problem{'s' * (n > 1)}: {n} {noun} " \
        + CLOSING_SETTINGS


@pytest.mark.parametrize("rows", [
    [{"id": "h-end", "conversations": [{"from": "human", "value": "fix it"},
                                       {"from": "gpt", "value": HERMES_CALL}]}],
    [{"id": "o-end", "messages": [{"role": "user", "content": "fix it"},
                                  {"role": "assistant", "content": "",
                                   "tool_calls": [OPENAI_CALL]}]}],
], ids=["hermes", "openai"])
def test_a_row_that_ends_on_its_call_is_not_a_problem(tmp_path, rows):
    # An agent's episode ends on its final call (SWE-agent's `submit`): OpenAI fine-tuning
    # trains such a last assistant call, so it is a whole example, not a broken pair.
    result = _validate(_write_jsonl(tmp_path / "end.jsonl", rows))
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "no tool result answers" not in result.stdout


def test_more_than_one_summary_in_a_turn_or_a_row(tmp_path):
    s = "[CONTEXT SUMMARY]: "
    rows = [
        {"id": "one", "conversations": [{"from": "human", "value": s + "a"},
                                        {"from": "gpt", "value": "ok"}]},
        {"id": "turn", "conversations": [{"from": "human", "value": f"{s}a\n\n{s}b"},
                                         {"from": "gpt", "value": "ok"}]},
        {"id": "row", "conversations": [{"from": "human", "value": s + "a"},
                                        {"from": "gpt", "value": "ok"},
                                        {"from": "human", "value": s + "b"},
                                        {"from": "gpt", "value": "ok"}]},
    ]
    path = _write_jsonl(tmp_path / "s.jsonl", rows)
    result = _validate(path)
    assert result.returncode == 1
    assert result.stdout.strip().splitlines() == [
        f"{path}:2: 2 summaries in one row, 2 of them in turn 0 (a compressed row has one)",
        f"{path}:3: 2 summaries in one row, in turns 0, 2 (a compressed row has one)",
        "3 rows checked, 2 problems: 2 rows with more than one summary " + CLOSING_SETTINGS]


def test_a_repeated_row_is_found_by_id_or_by_content(tmp_path):
    a = {"id": "a", "conversations": [{"from": "human", "value": "x"},
                                      {"from": "gpt", "value": "y"}]}
    plain = {"conversations": [{"from": "human", "value": "p"}, {"from": "gpt", "value": "q"}]}
    renamed = {**a, "conversations": [{"from": "human", "value": "other"},
                                      {"from": "gpt", "value": "y"}]}
    path = _write_jsonl(tmp_path / "d.jsonl", [a, plain, renamed, plain])
    result = _validate(path)
    assert result.returncode == 1
    assert result.stdout.strip().splitlines()[:-1] == [
        f"{path}:3: repeats the id 'a' of the row at {path}:1",
        f"{path}:4: repeats the row at {path}:2 (same content)"]
    assert "2 duplicated rows" in result.stdout


def _compress(folder: Path) -> tuple[Path, dict]:
    """The Hermes sample's first 10 rows compressed at 2,000 tokens in ``folder``:
    (output, its metrics)."""
    folder.mkdir(exist_ok=True)
    src = sample_head("trajectories.jsonl", folder)
    result = invoke_cli("compress", str(src), "--target-max-tokens", "2000",
                        "--summary-target-tokens", "200", "-q", "--summarizer", "extractive",
                        "--no-cache", *NO_CONFIG)
    assert result.returncode == 0, result.stderr
    out = folder / "trajectories_compressed.jsonl"
    return out, json.loads((folder / "trajectories_compressed_metrics.json").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _compress(tmp_path_factory.mktemp("run"))


def _copy_run(run, folder: Path) -> Path:
    """A run of its own (an output changed in place must be its run's own output)."""
    return _compress(folder)[0]


def test_rows_over_the_target_are_their_own_kind_and_fail_unless_allowed(run):
    out, metrics = run
    over = [r for r in read_jsonl(out.with_name("trajectories_compressed_over_limit.jsonl"))]
    assert len(over) == metrics["summary"]["trajectories_still_over_limit"] > 1
    result = _validate(out)
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == len(over) + 1
    assert all("over the target 2,000, flagged still_over_limit by the run" in line
               for line in lines[:-1])
    assert lines[-1].startswith(
        f"10 rows checked, {len(over)} problems: {len(over)} rows over the target 2,000, "
        "flagged still_over_limit by the run (target 2,000,")
    allowed = _validate(out, "--allow-over-limit")
    assert allowed.returncode == 0 and allowed.stdout.startswith(
        f"10 rows checked, 0 problems; allowed by --allow-over-limit: {len(over)} rows over")
    assert _validate(out, "--max-over-limit", str(len(over))).returncode == 0
    assert _validate(out, "--max-over-limit", str(len(over) - 1)).returncode == 3
    data = json.loads(_validate(out, "--json").stdout)
    assert data["kinds"] == {"over_target": len(over)} and data["problems"] == len(over)
    assert data["over_target"] == {"rows": len(over), "flagged": len(over), "target": 2000,
                                   "allowed": False}
    assert [p["kind"] for p in data["problem_list"]] == ["over_target"] * len(over)


def test_a_dropped_row_is_found(run, tmp_path):
    out = _copy_run(run, tmp_path / "drop")
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text("".join(lines[:4] + lines[5:]), encoding="utf-8")
    result = _validate(out, "--allow-over-limit")
    assert result.returncode == 1
    assert f"{out}: 1 row fewer than its run wrote (9 now, 10 recorded in " \
        "trajectories_compressed_metrics.json): rows were dropped" in result.stdout
    assert "trajectories_compressed.jsonl changed since its run committed it" in result.stdout
    assert "2 disagreements with the run's metrics file" in result.stdout.splitlines()[-1]


def test_a_duplicated_row_is_found(run, tmp_path):
    out = _copy_run(run, tmp_path / "dup")
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text("".join(lines + lines[2:3]), encoding="utf-8")
    result = _validate(out, "--allow-over-limit")
    assert result.returncode == 1
    row_id = json.loads(lines[2])["id"]
    assert f"{out}:11: repeats the id {row_id!r} of the row at {out}:3" in result.stdout
    assert "1 row more than its run wrote (11 now, 10 recorded" in result.stdout
    last = result.stdout.splitlines()[-1]
    assert "1 duplicated row" in last and "2 disagreements" in last


def test_row_metrics_that_contradict_the_row_are_found(run, tmp_path):
    out = _copy_run(run, tmp_path / "lie")
    rows = read_jsonl(out)
    skipped = next(i for i, r in enumerate(rows)
                   if not (r.get("compression_metrics") or {}).get("was_compressed"))
    rows[skipped]["compression_metrics"] = {**(rows[skipped].get("compression_metrics") or {}),
                                            "was_compressed": True}
    compressed = next(i for i, r in enumerate(rows)
                      if (r.get("compression_metrics") or {}).get("was_compressed")
                      and i != skipped)
    rows[compressed]["compression_metrics"]["compressed_tokens"] += 7
    _write_jsonl(out, rows)
    result = _validate(out, "--allow-over-limit")
    assert result.returncode == 1
    assert (f"{out}:{skipped + 1}: its metrics mark it compressed, but it holds no summary "
            "turn") in result.stdout
    assert f"{out}:{compressed + 1}: its metrics say" in result.stdout
    assert "2 rows whose metrics contradict the row" in result.stdout.splitlines()[-1]


def test_another_runs_metrics_beside_an_output_is_named_by_validate_and_report(run, tmp_path):
    out, _ = run
    folder = tmp_path / "other"
    folder.mkdir()
    copy = folder / "copy.jsonl"
    shutil.copyfile(out, copy)
    shutil.copyfile(out.with_name("trajectories_compressed_metrics.json"),
                    folder / "copy_metrics.json")
    result = _validate(copy, "--allow-over-limit")
    assert result.returncode == 1
    assert "the metrics file copy_metrics.json beside it is another run's" in result.stdout
    report = invoke_cli("report", str(copy), *NO_CONFIG)
    assert report.returncode == 0, report.stderr
    assert "copy_metrics.json beside it is another run's" in report.stderr
    as_json = json.loads(invoke_cli("report", str(copy), "--json", *NO_CONFIG).stdout)
    assert len(as_json["sidecar_disagreements"]) == 1
    # Its own run's output: nothing to say.
    assert json.loads(invoke_cli("report", str(out), "--json", *NO_CONFIG).stdout)[
        "sidecar_disagreements"] == []


def test_the_committed_record_matches_the_output(run):
    import hashlib

    out, metrics = run
    entry = metrics["committed"]["files"][str(out.resolve())]
    data = out.read_bytes()
    assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert metrics["committed"]["rows"] == 10


def test_the_runs_own_gate_judges_rows_over_the_target(tmp_path):
    src = sample_head("trajectories.jsonl", tmp_path)
    args = ("--target-max-tokens", "2000", "--summary-target-tokens", "200", "-q",
            "--summarizer", "extractive", "--no-cache", *NO_CONFIG)
    loose = tmp_path / "loose.jsonl"
    assert invoke_cli("compress", str(src), "-o", str(loose), *args,
                      "--max-over-limit", "100%").returncode == 0
    assert json.loads((tmp_path / "loose_metrics.json").read_text())["gates"] == {
        "over_limit": "100%"}
    result = _validate(loose)
    assert result.returncode == 0, result.stdout
    assert "; allowed by the run's own --max-over-limit: " in result.stdout
    strict = tmp_path / "strict.jsonl"
    assert invoke_cli("compress", str(src), "-o", str(strict), *args,
                      "--max-over-limit", "0").returncode == 3
    judged = _validate(strict)
    assert judged.returncode == 3 and "gate failed: over-limit rows" in judged.stderr
    # A gate given to validate wins over the run's.
    assert _validate(strict, "--max-over-limit", "100%").returncode == 0
