"""`compress --output-mode windows` end to end (§20, issue 39): every dialect and
container, checked against oracles independent of the planner:

- every input row over the target became k >= 2 consecutive rows ``<id>#w1..#wk`` (rows
  under it are written unchanged, one row each), with every other field of the input;
- the tokens of the assistant turns each window trains (turns not marked in the
  dialect's own way), counted here with the real tokenizer, add up over a row's windows
  to the input row's assistant tokens: nothing lost, nothing trained twice;
- every window is within the target (per-turn counts of the written row), or its
  metrics say it is over; no window opens, after its head and summary, on a tool turn;
- a local run, a run killed and resumed, and a Ray run write the same bytes.
"""

from __future__ import annotations

import gzip
import json
import signal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import interrupt_when, invoke_cli, read_jsonl, run_cli, start_cli
from tests.datagen import write_jsonl as generated_jsonl
from tests.sample_files import SAMPLES
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.dialects import dialect_for, row_kind
from trajectory_compressor.dialects.base import SOURCE
from trajectory_compressor.dialects.training import is_marked

TARGET = 4000
SAMPLE_FILES = {"hermes": "trajectories.jsonl", "lf_sharegpt": "llamafactory_sharegpt.json",
                "lf_messages": "llamafactory_messages.jsonl", "openai": "openai_messages.jsonl"}
CONTAINERS = ["jsonl", "jsonl.gz", "json", "parquet", "hf"]
# The `--format` name of each sample's dialect.
DIALECT_NAMES = {"hermes": "sharegpt", "lf_sharegpt": "sharegpt-variant",
                 "lf_messages": "openai", "openai": "openai"}
COLUMNS = ("conversations", "messages", "system", "compression_metrics")
MASKED = "[tool output masked:"


def sample_rows(dialect: str, n: int = 4) -> list[dict[str, Any]]:
    path = SAMPLES / SAMPLE_FILES[dialect]
    if dialect == "hermes":
        n = min(n, 2)  # ~25,000 tokens a row: two keep the matrix quick enough
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))[:n]
    return read_jsonl(path)[:n]


def arrow_ready(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI rows whose content is a string in some messages and a list of parts in
    others, with the parts joined to a string: Arrow columns hold one type."""
    out = []
    for row in rows:
        messages = row.get("messages")
        kinds = {type(m.get("content")) for m in messages or [] if m.get("content") is not None}
        if messages is not None and len(kinds) > 1:
            row = {**row, "messages": [
                {**m, "content": "".join(p.get("text", "") for p in m["content"])}
                if isinstance(m.get("content"), list) else m for m in messages]}
        out.append(row)
    return out


def write_container(rows: list[dict[str, Any]], folder: Path, container: str) -> Path:
    if container == "jsonl":
        path = folder / "in.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif container == "jsonl.gz":
        path = folder / "in.jsonl.gz"
        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    elif container == "json":
        path = folder / "in.json"
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    elif container == "parquet":
        path = folder / "in.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        import datasets

        path = folder / "in_hf"
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def read_output(path: Path) -> list[dict[str, Any]]:
    if path.is_dir():
        files = sorted(path.rglob("*.parquet"))
        return [r for f in files for r in pq.read_table(f).to_pylist()]
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    if path.suffix == ".gz":
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
        return [json.loads(line) for line in text.splitlines() if line]
    return read_jsonl(path)


def output_of(src: Path, folder: Path) -> Path:
    if src.is_dir():
        return folder / "out_hf"
    return folder / ("out" + "".join(src.suffixes))


def _clean(value: Any) -> Any:
    """A row as Parquet gives it back (absent struct fields as None) compared with JSON."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def check_windows(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]],
                  counter: Any, dialect_name: str) -> int:
    """Assert the invariants of the module docstring; the number of windowed rows."""
    config = CompressionConfig()
    dialect = dialect_for(config, dialect_name)

    def counts(row: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
        turns = dialect.turns(row)
        return list(zip(turns, counter.count_many([t["value"] for t in turns]), strict=True))

    def item_of(turn: dict[str, Any]) -> Any:
        source = turn.get(SOURCE)
        if isinstance(source, tuple):
            return source[1]
        return source if source is not None else turn

    at = 0
    windowed = 0
    for row in inputs:
        counted = counts(row)
        total = sum(n for _, n in counted)
        if total <= TARGET:
            assert _clean(outputs[at]) == _clean(row)
            at += 1
            continue
        first = outputs[at]["compression_metrics"]
        k = first["windows"]
        assert k >= 2 and first["window"] == 1
        windows = outputs[at:at + k]
        at += k
        windowed += 1
        trained = 0
        for j, window in enumerate(windows, 1):
            metrics = window["compression_metrics"]
            assert metrics["window"] == j and metrics["windows"] == k
            own_id = row.get("id")
            assert metrics["source_id"] == (None if own_id is None else str(own_id))
            if own_id is not None:
                assert window["id"] == f"{own_id}#w{j}"
            for key, value in row.items():  # every other field kept
                if key not in (*COLUMNS, "id"):
                    assert _clean(window[key]) == _clean(value), key
            written = counts(window)
            size = sum(n for _, n in written)
            assert size <= TARGET or metrics["still_over_limit"], (j, size)
            assert metrics["compressed_tokens"] == size
            own = sum(n for turn, n in written if turn["from"] == "gpt"
                      and not is_marked(dialect, item_of(turn)))
            assert own == metrics["trained_assistant_tokens"]
            trained += own
            # Masked tool outputs: only among the last turns, after everything trained (a
            # result its placeholder would not shorten stays), and only where the window
            # would be over the target without them.
            roles = [t["from"] for t, _ in written]
            placeholders = [i for i, (t, _) in enumerate(written) if MASKED in t["value"]]
            masked = metrics.get("masked_turns", 0)
            assert len(placeholders) == masked
            if masked:  # among the tool turns after the last assistant turn
                last = max(i for i, role in enumerate(roles) if role == "gpt")
                assert placeholders[0] > last and set(roles[last + 1:]) == {"tool"}
                assert size <= TARGET < size + metrics["masked_tokens"]
            summary = next((i for i, (t, _) in enumerate(written)
                            if "[CONTEXT SUMMARY]:" in t["value"]), None)
            if j > 1 and summary is not None:
                after = summary + 1
                assert after < len(roles) and roles[after] != "tool"
            elif j > 1:  # nothing between the head and the window: no summary needed
                assert not metrics["was_compressed"]
                assert counted[metrics["trained_turns"]["start_idx"]][0]["from"] != "tool"
                assert size + metrics.get("masked_tokens", 0) == sum(
                    n for _, n in counted[:metrics["trained_turns"]["end_idx"]])
        assert trained == sum(n for turn, n in counted if turn["from"] == "gpt")
    assert at == len(outputs)
    return windowed


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("dialect", list(SAMPLE_FILES))
def test_every_dialect_and_container(tmp_path, counter, dialect, container):
    rows = sample_rows(dialect)
    if container in ("parquet", "hf"):
        rows = arrow_ready(rows)
    src = write_container(rows, tmp_path, container)
    out = output_of(src, tmp_path)
    done = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                      "--output-mode", "windows", "--target-max-tokens", str(TARGET),
                      "--quiet")
    assert done.returncode == 0, done.stderr
    outputs = read_output(out)
    name = DIALECT_NAMES[dialect]
    assert row_kind(rows[0]) in (name, "sharegpt-columns", "sharegpt-plain", "openai")
    assert check_windows(rows, outputs, counter, name) >= 1
    (found,) = tmp_path.glob("out*_metrics.json")
    section = json.loads(found.read_text(encoding="utf-8"))["windows"]
    assert section["trained_assistant_tokens"] == section["assistant_tokens"]
    assert section["rows_out"] == len(outputs)


def test_rows_mode_is_unchanged_by_default(tmp_path):
    src = write_container(sample_rows("openai"), tmp_path, "jsonl")
    a = invoke_cli("compress", str(src), "-o", str(tmp_path / "a.jsonl"), "--summarizer",
                   "extractive", "--target-max-tokens", str(TARGET), "--quiet")
    b = invoke_cli("compress", str(src), "-o", str(tmp_path / "b.jsonl"), "--summarizer",
                   "extractive", "--target-max-tokens", str(TARGET), "--output-mode", "rows",
                   "--quiet")
    assert a.returncode == b.returncode == 0
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert len(read_jsonl(tmp_path / "a.jsonl")) == 4


def test_yaml_key_and_bad_value(tmp_path):
    src = write_container(sample_rows("openai", 2), tmp_path, "jsonl")
    config = tmp_path / "c.yaml"
    config.write_text("output:\n  mode: windows\n", encoding="utf-8")
    done = invoke_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"), "--config",
                      str(config), "--summarizer", "extractive", "--target-max-tokens",
                      str(TARGET), "--quiet")
    assert done.returncode == 0, done.stderr
    assert len(read_jsonl(tmp_path / "o.jsonl")) > 2
    bad = invoke_cli("compress", str(src), "--output-mode", "pages", "--quiet")
    assert bad.returncode == 2
    assert "output.mode must be one of rows, windows, got 'pages'" in bad.stderr


ARGS = ("--summarizer", "extractive", "--output-mode", "windows", "--target-max-tokens",
        "500", "--summary-target-tokens", "60", "--checkpoint-every", "25", "--quiet")


def test_sigkill_then_resume_writes_the_same_bytes(tmp_path):
    src = generated_jsonl(tmp_path / "in.jsonl", 1500)
    reference = tmp_path / "ref.jsonl"
    done = run_cli("compress", str(src), "-o", str(reference), *ARGS)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out.jsonl"
    proc = start_cli("compress", str(src), "-o", str(out), *ARGS)
    interrupt_when(proc, (tmp_path / ".out.checkpoint.json").exists, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL and not out.exists()
    resumed = run_cli("compress", str(src), "-o", str(out), *ARGS, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == reference.read_bytes()
    # Checkpoints count input rows: the metrics are those of one uninterrupted run.
    a = json.loads((tmp_path / "ref_metrics.json").read_text())
    b = json.loads((tmp_path / "out_metrics.json").read_text())
    assert a["summary"] == b["summary"] and a["windows"] == b["windows"]
    assert a["windows"]["trained_assistant_tokens"] == a["windows"]["assistant_tokens"]


def test_ray_engine_writes_the_same_bytes(tmp_path):
    pytest.importorskip("ray", reason="needs the 'ray' extra")
    src = generated_jsonl(tmp_path / "in.jsonl", 120)
    local = tmp_path / "local.jsonl"
    done = run_cli("compress", str(src), "-o", str(local), *ARGS)
    assert done.returncode == 0, done.stderr
    ray_out = tmp_path / "ray.jsonl"
    done = run_cli("compress", str(src), "-o", str(ray_out), *ARGS, "--engine", "ray",
                   "--ray-actors", "2", timeout=600)
    assert done.returncode == 0, done.stderr
    assert ray_out.read_bytes() == local.read_bytes()
    a = json.loads((tmp_path / "local_metrics.json").read_text())
    b = json.loads((tmp_path / "ray_metrics.json").read_text())
    assert a["windows"] == b["windows"] and a["summary"] == b["summary"]


def test_summarizer_rows(tmp_path):
    """One training row per summary: the request for the replaced turns, the summary of
    the window that got it as the answer; a foreign file is never replaced."""
    src = write_container(sample_rows("openai"), tmp_path, "jsonl")
    out, rows_path = tmp_path / "o.jsonl", tmp_path / "summaries.jsonl"
    args = ("compress", str(src), "-o", str(out), "--summarizer", "extractive",
            "--output-mode", "windows", "--target-max-tokens", "8000", "--quiet",
            "--emit-summarizer-rows", str(rows_path))
    done = invoke_cli(*args)
    assert done.returncode == 0, done.stderr
    made = read_jsonl(rows_path)
    windows = json.loads((tmp_path / "o_metrics.json").read_text())["windows"]
    assert len(made) == windows["summaries"] > 0
    by_id = {row["id"]: row for row in read_jsonl(out)}
    for row in made:
        mark = row["summarizer_row"]
        window = by_id[f"{mark['source_id']}#w{mark['window']}"]
        summary = next(m["content"] for m in window["messages"]
                       if isinstance(m["content"], str)
                       and m["content"].startswith("[CONTEXT SUMMARY]:"))
        system, user, answer = row["messages"]
        assert (system["role"], user["role"], answer["role"]) == ("system", "user",
                                                                  "assistant")
        assert answer["content"] == summary[len("[CONTEXT SUMMARY]:"):].strip()
        assert window["compression_metrics"]["compression_region"]["start_idx"] == \
            mark["turns"]["start_idx"]
        assert row["id"] == f"{mark['source_id']}#w{mark['window']}-summary"
    again = invoke_cli(*args)  # its own file: replaced, the same bytes
    assert again.returncode == 0 and read_jsonl(rows_path) == made
    foreign = tmp_path / "mine.jsonl"
    foreign.write_text('{"keep": "me"}\n', encoding="utf-8")
    refused = invoke_cli(*args[:-1], str(foreign))
    assert refused.returncode == 2 and "was not written by --emit-summarizer-rows" in \
        refused.stderr
    assert foreign.read_text(encoding="utf-8") == '{"keep": "me"}\n'
    rows_mode = invoke_cli("compress", str(src), "-o", str(tmp_path / "r.jsonl"),
                           "--summarizer", "extractive", "--quiet",
                           "--emit-summarizer-rows", str(tmp_path / "x.jsonl"))
    assert rows_mode.returncode == 2 and "goes with --output-mode windows" in rows_mode.stderr


def test_summarizer_rows_refused_on_ray(tmp_path):
    """`--emit-summarizer-rows` is written by the local engine's writer only: with
    `--engine ray` it is a configuration error before anything runs or is written."""
    src = write_container(sample_rows("openai", 2), tmp_path, "jsonl")
    done = invoke_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"), "--summarizer",
                      "extractive", "--output-mode", "windows", "--engine", "ray", "--quiet",
                      "--emit-summarizer-rows", str(tmp_path / "s.jsonl"))
    assert done.returncode == 2
    assert "--emit-summarizer-rows runs on the local engine" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
    shown = invoke_cli("compress", "--help")
    assert "Localengineonly(not--engineray)" in "".join(  # the help's table, unwrapped
        c for c in shown.stdout if c not in "│ \n")


def test_report_and_html_show_the_windows_per_source_row(tmp_path):
    src = write_container(sample_rows("openai", 3), tmp_path, "jsonl")
    out = tmp_path / "o.jsonl"
    done = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                      "--output-mode", "windows", "--target-max-tokens", "8000", "--quiet")
    assert done.returncode == 0, done.stderr
    written = read_jsonl(out)
    sources = {r["compression_metrics"]["source_id"] for r in written
               if "window" in r.get("compression_metrics", {})}
    windows = sum(1 for r in written if "window" in r.get("compression_metrics", {}))
    text = invoke_cli("report", str(out))
    assert text.returncode == 0, text.stderr
    assert (f"from {len(sources)} source rows ({windows / len(sources):.1f} per row); "
            f"rows out {len(written)}") in text.stdout
    assert "(100%)" in text.stdout
    # Summaries made are counted once each (one per window that has one), not once per
    # source row: the windows written that hold a summary turn.
    made = sum(1 for r in written for m in r["messages"]
               if isinstance(m.get("content"), str)
               and m["content"].startswith("[CONTEXT SUMMARY]:"))
    assert made > len(sources)
    as_json = invoke_cli("report", str(out), "--json")
    assert as_json.returncode == 0, as_json.stderr
    recorded = json.loads(as_json.stdout)["metrics"]
    assert sum(recorded["summarization"]["summaries_by_source"].values()) == made
    assert recorded["summarization"]["summaries_by_source"]["extractive"] == made
    assert recorded["windows"]["summaries"] == made
    assert f"{'summaries':<17}{made:>10,}  extractive={made}" in text.stdout
    checked = invoke_cli("validate", str(out))  # k rows out per row in: no disagreement
    assert checked.returncode == 0, checked.stdout + checked.stderr
    page = tmp_path / "r.html"
    assert invoke_cli("report", str(out), "--html", str(page)).returncode == 0
    html = page.read_text(encoding="utf-8")
    assert f"from {len(sources)} source rows" in html and "trained 100%" in html


def _pad_task(row: dict[str, Any], pad: str) -> dict[str, Any]:
    """``row`` with ``pad`` appended to its first user turn (the task)."""
    row = json.loads(json.dumps(row))
    for turn in row.get("conversations") or row.get("messages"):
        if (turn.get("from") or turn.get("role")) in ("human", "user"):
            key = "value" if "value" in turn else "content"
            if isinstance(turn[key], list):
                part = turn[key][0]
                part["text" if "text" in part else "value"] += pad
            else:
                turn[key] += pad
            return row
    raise AssertionError("no user turn")


def head_heavy_rows(dialect_name: str, rows: list[dict[str, Any]], counter: Any,
                    room: int) -> list[dict[str, Any]]:
    """``rows`` with the task padded so that the protected head holds ``TARGET - room``
    tokens (counted per turn, as windows are planned)."""
    from trajectory_compressor.core.plan import compressible_middle
    from trajectory_compressor.core.windows import head_end

    config = CompressionConfig()
    dialect = dialect_for(config, dialect_name)
    out = []
    for row in rows:
        padded, words = row, 0
        for _ in range(8):  # a few corrections: token counts are not additive in words
            turns = dialect.turns(padded)
            roles = [t["from"] for t in turns]
            head = head_end(roles, compressible_middle(roles, config).start)
            held = sum(counter.count_many([t["value"] for t in turns[:head]]))
            missing = TARGET - room - held
            if abs(missing) <= 10:
                break
            words = max(words + missing // 3, 0)
            padded = _pad_task(row, "".join(f" note{i}" for i in range(words)))
        assert abs(missing) <= 30
        out.append(padded)
    return out


def windows_run(rows: list[dict[str, Any]], name: str, folder: Path, counter: Any,
                *flags: str) -> list[dict[str, Any]]:
    """``rows`` compressed in windows mode at `TARGET` (extractive), the invariants of
    `check_windows` asserted (every row over the target windowed); the windows written."""
    src = write_container(rows, folder, "jsonl")
    out = folder / "out.jsonl"
    done = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                      "--output-mode", "windows", "--target-max-tokens", str(TARGET),
                      "--quiet", *flags)
    assert done.returncode == 0, done.stderr
    outputs = read_output(out)
    assert check_windows(rows, outputs, counter, name) == len(rows)
    return outputs


def agent_row(row_id: str, calls: int, counter: Any, room: int) -> dict[str, Any]:
    """An OpenAI agent row of ``calls`` calls (each a short step and a ~240-token output)
    whose task is padded so that its protected head leaves ``room`` tokens of `TARGET`."""
    words = " ".join(f"w{i}" for i in range(60))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": "Fix the bug."}]
    for i in range(calls):
        messages += [
            {"role": "assistant", "content": f"Step {i}: {words[:150]}",
             "tool_calls": [{"id": f"c{i}", "type": "function",
                             "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i} {words} {words}"}]
    [row] = head_heavy_rows("openai", [{"id": row_id, "messages": messages}], counter, room)
    return row


@pytest.mark.parametrize("dialect", list(SAMPLE_FILES))
def test_a_head_that_nearly_fills_the_target(tmp_path, counter, dialect):
    """Rows whose protected head (system, task, first call and its result) nearly fills
    the target: a window that the whole head leaves over the target keeps only the
    system and task turns and summarizes the rest; a window still over carries where and
    by how much (``window_over``), and only when even the least head with the least
    summary and the window's first group of turns is over. Every assistant turn is
    trained in exactly one window."""
    name = DIALECT_NAMES[dialect]
    rows = head_heavy_rows(name, sample_rows(dialect, 2)[1:], counter, 250)
    outputs = windows_run(rows, name, tmp_path, counter)
    out = tmp_path / "out.jsonl"
    dialect_of = dialect_for(CompressionConfig(), name)
    config = CompressionConfig()
    by_source: dict[str | None, tuple[list[int], int]] = {}
    for row in rows:
        turns = dialect_of.turns(row)
        # What the summary notice adds to the system turn, the window's too.
        system = [turns[0]["value"] + config.summary_notice_text, turns[0]["value"]]
        with_notice, without = counter.count_many(system)
        by_source[None if row.get("id") is None else str(row["id"])] = (
            counter.count_many([t["value"] for t in turns]), with_notice - without)
    least_summary = config.summary_target_tokens // 4
    least_heads = over = 0
    for window in outputs:
        metrics = window["compression_metrics"]
        tokens, notice = by_source[metrics["source_id"]]
        region = metrics["compression_region"]
        if metrics["window"] > 1 and region["start_idx"] == 2:  # system and task kept
            least_heads += 1
        if not metrics["still_over_limit"]:
            assert "window_over" not in metrics
            continue
        over += 1
        trained = metrics["trained_turns"]
        start, end = trained["start_idx"], trained["end_idx"]
        assert metrics["window_over"].startswith(f"turns {start}-{end - 1} ("), metrics
        # Nothing windows may do fits it: the system and task turns (the first two) with
        # the least summary (and its notice) and the turns it trains are over the target.
        if metrics["window"] == 1:
            assert sum(tokens[:end]) > TARGET
        else:
            assert sum(tokens[:2]) + notice + least_summary + sum(tokens[start:end]) > TARGET
    assert least_heads >= 1
    report = json.loads((tmp_path / "out_metrics.json").read_text())
    # What a trainer that drops windows over its context learns: the others' tokens.
    within = sum(w["compression_metrics"]["trained_assistant_tokens"] for w in outputs
                 if not w["compression_metrics"]["still_over_limit"])
    section = report["windows"]
    assert (section["windows_over"], section["trained_within_target"]) == (over, within)
    assert section["trained_within_target_share"] == round(
        within / section["assistant_tokens"], 4)
    shown = invoke_cli("report", str(out))
    assert shown.returncode == 0, shown.stderr
    assert (f"{over:>10,}   over the target; the others train {within:,}" in shown.stdout) \
        == bool(over), shown.stdout
    if over:
        assert report["over_limit"]["reasons"].get("window_over_target", 0) >= 1
        entries = read_jsonl(tmp_path / "out_over_limit.jsonl")
        assert sum(len(e["windows_over"]) for e in entries) == over
        assert all(w["why"].startswith("turns ") for e in entries for w in e["windows_over"])


def _pad_output(row: dict[str, Any], nth: int, pad: str) -> dict[str, Any]:
    """``row`` with ``pad`` appended to the content of its ``nth`` tool response."""
    row = json.loads(json.dumps(row))
    seen = 0
    for turn in row.get("conversations") or row.get("messages"):
        for holder, key in _texts_of(turn):
            text = holder[key]
            if "<tool_response>" not in text:
                continue
            if seen == nth:
                start = text.index("<tool_response>") + len("<tool_response>")
                end = text.index("</tool_response>")
                body = json.loads(text[start:end])
                body["content"] = str(body["content"]) + pad
                holder[key] = f"{text[:start]}\n{json.dumps(body)}\n{text[end:]}"
                return row
            seen += 1
    raise AssertionError("not that many tool responses")


def _texts_of(turn: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    key = "value" if "value" in turn else "content"
    if isinstance(turn.get(key), list):
        return [(part, "text" if "text" in part else "value") for part in turn[key]]
    return [(turn, key)] if isinstance(turn.get(key), str) else []


@pytest.mark.parametrize("dialect", list(SAMPLE_FILES))
def test_a_tool_output_over_the_target_alone(tmp_path, counter, dialect):
    """A tool output of more tokens than the target: the window that trains its call
    ends on it, and holds it masked (`core.mask`'s placeholder, with the call's other
    results; nothing trained comes after them there); the next window holds it
    summarized. No window is over, except on an alternating row (LLaMA-Factory
    ShareGPT), whose windows end on the call and open on its results, so the output is
    read by the next trained turn and is never masked: that window says it is over."""
    name = DIALECT_NAMES[dialect]
    pad = "".join(f" line{i} status=ok" for i in range(TARGET // 3))
    rows = [_pad_output(row, 5, pad) for row in sample_rows(dialect, 2)[1:]]
    outputs = windows_run(rows, name, tmp_path, counter)
    metrics = [w["compression_metrics"] for w in outputs]
    masked = [m for m in metrics if m.get("masked_turns")]
    over = [m for m in metrics if m["still_over_limit"]]
    if dialect == "lf_sharegpt":
        assert not masked and len(over) == 1
        assert over[0]["window_over"].startswith(f"turns {over[0]['trained_turns']['start_idx']}")
    else:
        # The padded output is masked in one window (with the call's other results, all
        # of them); the samples' own outputs may be elsewhere. None is over.
        assert not over
        assert sum(m["masked_tokens"] > TARGET - 100 for m in masked) == 1
        assert not any(pad in json.dumps(w) for w in outputs)  # never whole: too long
    report = json.loads((tmp_path / "out_metrics.json").read_text())
    assert report["strategy"]["masked_turns"] == sum(m["masked_turns"] for m in masked)


def test_what_would_fix_windows_over_the_target(tmp_path, counter):
    """A windows run whose windows are over the target because the system and task turns
    nearly fill it: `report` offers only what changes windows (no protected tail, no
    second pass in windows), and each remedy it lists does what it says when compress is
    run again with its flags; `validate` finds no row-count disagreement (a run writes
    its windows: more rows than it reads)."""
    # Room for 40 tokens after the head: the system and task, the least summary and one
    # call with its output masked are still over the target.
    rows = [agent_row("h", 8, counter, 40)]
    src = write_container(rows, tmp_path, "jsonl")
    args = ("--summarizer", "extractive", "--output-mode", "windows", "--target-max-tokens",
            str(TARGET), "--quiet")
    out = tmp_path / "o.jsonl"
    assert invoke_cli("compress", str(src), "-o", str(out), *args).returncode == 0
    made = json.loads((tmp_path / "o_metrics.json").read_text())
    assert made["summary"]["trajectories_still_over_limit"] == 1
    # analyze foresees the windows over the target and what the others train.
    windows = made["windows"]
    assert windows["windows_over"] >= 1
    foreseen = invoke_cli("analyze", str(src), "--output-mode", "windows",
                          "--target-max-tokens", str(TARGET), "--summarizer", "extractive")
    assert foreseen.returncode == 0, foreseen.stderr
    assert (f"{windows['windows_over']} windows over the target; the others train "
            f"{windows['trained_within_target']:,}") in " ".join(foreseen.stdout.split())
    shown = invoke_cli("report", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    remedies = json.loads(shown.stdout)["remedies"]
    alone = {tuple(e["flags"].split()): e["rows_under"] for e in remedies["alone"]}
    families = {f for e in remedies["alone"] for f in e["families"]}
    assert not families & {"protect_last", "elide"}
    assert {"summary", "target"} <= families
    for flags, under in alone.items():
        again = tmp_path / f"again{len(flags)}{flags[-1]}.jsonl"
        done = invoke_cli("compress", str(src), "-o", str(again), *args, *flags)
        assert done.returncode == 0, done.stderr
        written = read_jsonl(again)
        over = any(r["compression_metrics"].get("still_over_limit") for r in written)
        assert over == (under == 0), (flags, under)
    checked = invoke_cli("validate", str(out))
    assert "more than its run wrote" not in checked.stdout + checked.stderr
    # The HTML page groups the source row's windows under it, each with its timeline.
    page = tmp_path / "r.html"
    assert invoke_cli("report", str(out), "--html", str(page)).returncode == 0
    html = page.read_text(encoding="utf-8")
    assert (f"{windows['windows_over']:,} windows over the target, the others train "
            f"{windows['trained_within_target_share']:.0%}") in html
    start = html.index('<script type="application/json" id="report-data">')
    data = json.loads(html[html.index(">", start) + 1:html.index("</script>", start)])
    written = read_jsonl(out)
    (row,) = data["rows"]
    assert row["id"] == "h" and row["note"] == ""
    metrics = [r["compression_metrics"] for r in written]
    assert [w["window"] for w in row["windows"]] == [m["window"] for m in metrics] == \
        list(range(1, len(written) + 1))
    for window, m, r in zip(row["windows"], metrics, written, strict=True):
        assert window["tokens"] == m["compressed_tokens"]
        assert window["over"] == m.get("window_over", "")
        assert len(window["timeline"]["turns"]) == len(r["messages"])
    assert any(w["over"] for w in row["windows"])


def test_analyze_predicts_what_compress_makes(tmp_path):
    """`analyze --output-mode windows` runs (no strategy comparison: windows take
    summarize only) and predicts the windows, summaries and rows out compress makes."""
    src = write_container(sample_rows("openai", 3), tmp_path, "jsonl")
    shown = invoke_cli("analyze", str(src), "--output-mode", "windows", "--target-max-tokens",
                       "8000", "--summarizer", "extractive")
    assert shown.returncode == 0, shown.stderr
    done = invoke_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"), "--summarizer",
                      "extractive", "--output-mode", "windows", "--target-max-tokens", "8000",
                      "--quiet")
    assert done.returncode == 0, done.stderr
    made = json.loads((tmp_path / "o_metrics.json").read_text())["windows"]
    text = " ".join(shown.stdout.split())
    assert (f"{made['windowed_rows']} rows -> {made['windows']} windows" in text
            and f"{made['summaries']} summaries" in text
            and f"rows out {made['rows_out']}" in text), text
    assert made["windows_over"] == 0 and "windows over the target" not in text
    assert "Strategies" not in shown.stdout


def test_analyze_projects_the_llm_requests_a_windows_run_sends(tmp_path):
    """With an LLM summarizer, `analyze --output-mode windows` projects one request per
    window that has a summary (it said 0 calls and no waiting), and a real run against
    the loopback server sends exactly that many, each within the projected input."""
    from tests.fake_llm_server import FakeLLMServer

    src = write_container(sample_rows("openai", 3), tmp_path, "jsonl")
    settings = ["--output-mode", "windows", "--target-max-tokens", "8000", "--summarizer",
                "openai", "--model", "m", "--no-config"]
    with FakeLLMServer().in_thread() as server:
        url = ["--base-url", server.url]
        shown = invoke_cli("analyze", str(src), *settings, *url, "--json", "-")
        assert shown.returncode == 0, shown.stderr
        assert server.requests == 0  # a dry run
        done = invoke_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"), *settings,
                          *url, "--no-cache", "--quiet")
        assert done.returncode == 0, done.stderr
        sent = server.requests
    analysis = json.loads(shown.stdout)
    (target,) = analysis["targets"]
    made = json.loads((tmp_path / "o_metrics.json").read_text())
    assert made["windows"]["summaries"] > 0
    assert target["llm"]["summarization_calls"] == made["windows"]["summaries"] == sent
    assert made["summarization"]["summaries_by_source"]["llm"] == sent
    # Each request's input is the text it summarizes, its output at most the summary's
    # budget (750 tokens by default, less where a window has less room).
    assert target["llm"]["input_tokens"] > target["llm"]["output_tokens"]
    assert 0 < target["llm"]["output_tokens"] <= 750 * sent
    assert analysis["time_estimate"]["targets"][0]["calls"] == sent  # and their wait


def test_windows_counted_through_a_chat_template(tmp_path):
    """`--token-counting chat_template`: windows are planned and checked with the
    template's counts (each window's ``compressed_tokens`` is its rendered length, within
    the target), a window ending on an output over the target alone holds it masked, and
    every assistant turn is trained in exactly one window."""
    from tests.template_tokenizer import make_tokenizer_dir
    from trajectory_compressor.counting.tokens import TokenCounter
    from trajectory_compressor.engine.count import RowCounter

    tok = make_tokenizer_dir(tmp_path / "tok")
    pad = "".join(f" line{i} status=ok" for i in range(TARGET // 3))
    rows = [_pad_output(row, 5, pad) for row in sample_rows("openai", 2)]
    src = write_container(rows, tmp_path, "jsonl")
    out = tmp_path / "out.jsonl"
    done = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                      "--output-mode", "windows", "--target-max-tokens", str(TARGET),
                      "--tokenizer", str(tok), "--token-counting", "chat_template", "--quiet")
    assert done.returncode == 0, done.stderr
    config = CompressionConfig(tokenizer_name=str(tok), token_counting="chat_template")
    rows_counter = RowCounter(config, TokenCounter.load(str(tok)))
    dialect = dialect_for(config, "openai")
    written = read_jsonl(out)
    trained: dict[str, int] = {}
    for window in written:
        metrics = window["compression_metrics"]
        assert rows_counter.total(dialect, window) == metrics["compressed_tokens"]
        assert metrics["compressed_tokens"] <= TARGET or metrics["still_over_limit"]
        source = metrics["source_id"]
        trained[source] = trained.get(source, 0) + metrics["trained_assistant_tokens"]
    masked = [w["compression_metrics"] for w in written
              if w["compression_metrics"].get("masked_turns")]
    assert any(m["masked_tokens"] > TARGET - 200 and not m["still_over_limit"] for m in masked)
    assert not any(pad in json.dumps(w) for w in written)
    for row in rows:  # trained once each: the template's per-turn counts of the input
        turns = dialect.turns(row)
        [counts] = rows_counter.count([(dialect, row, turns)])
        assert isinstance(counts, list)
        assistant = sum(n for t, n in zip(turns, counts, strict=True) if t["from"] == "gpt")
        assert trained[str(row["id"])] == assistant


def test_an_excluded_tool_is_never_masked(tmp_path):
    """`--mask-exclude-tools NAME` holds in windows too: the window that ends on NAME's
    output over the target alone keeps it whole and is over, and says which turn."""
    pad = "".join(f" line{i} status=ok" for i in range(TARGET // 3))
    rows = [_pad_output(row, 5, pad) for row in sample_rows("openai", 2)[1:]]
    padded = next(m for m in rows[0]["messages"] if pad in str(m.get("content")))
    body = padded["content"]
    name = json.loads(body[body.index("{"):body.rindex("}") + 1])["name"]
    src = write_container(rows, tmp_path, "jsonl")
    out = tmp_path / "out.jsonl"
    done = invoke_cli("compress", str(src), "-o", str(out), "--summarizer", "extractive",
                      "--output-mode", "windows", "--target-max-tokens", str(TARGET),
                      "--mask-exclude-tools", name, "--quiet")
    assert done.returncode == 0, done.stderr
    written = read_jsonl(out)
    assert not any(f"{MASKED} {name} " in json.dumps(w) for w in written)
    [over] = [w["compression_metrics"] for w in written
              if w["compression_metrics"]["still_over_limit"]]
    turn = rows[0]["messages"].index(padded)
    assert f"; turn {turn} alone holds " in over["window_over"]
    assert sum(pad in json.dumps(w) for w in written) == 1  # whole, in that window only
