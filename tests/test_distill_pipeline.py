"""Distill in the pipeline (§18): every dialect, rows under the target too, the run's
metrics and settings, batch export/finish against an online run, local against Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import read_jsonl, run_cli
from tests.fake_llm_server import FakeLLMServer, default_reply
from tests.test_batch import answer, request_files
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.counting.tokens import TokenCounter
from trajectory_compressor.engine.job import compress_dataset

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "data_samples"
ROWS = 5
TOOL_ROLES = {"tool", "observation"}
WIDE = ("--target-max-tokens", "400000", "--summarizer", "extractive", "--quiet")


def subset(name: str, folder: Path, rows: int = ROWS) -> Path:
    """The first ``rows`` rows of a terminal sample, in its own container."""
    source = SAMPLES / name
    target = folder / name
    if source.suffix == ".json":
        data = json.loads(source.read_text(encoding="utf-8"))[:rows]
        target.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    else:
        lines = source.read_text(encoding="utf-8").splitlines()[:rows]
        target.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return target


def read_rows(path: Path) -> list[dict]:
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    return read_jsonl(path)


def items(row: dict) -> list[dict]:
    return row.get("conversations") or row.get("messages") or []


def role(item: dict) -> str:
    return item.get("from") or item.get("role") or ""


@pytest.mark.parametrize("name", ["terminal_hermes.jsonl", "terminal_openai.jsonl",
                                  "terminal_llamafactory.json"])
def test_safe_rewrites_tool_outputs_only_on_every_dialect(tmp_path, name):
    src = subset(name, tmp_path)
    out = tmp_path / "out" / name
    proc = run_cli("compress", str(src), "-o", str(out), "--distill", "safe", *WIDE)
    assert proc.returncode == 0, proc.stderr
    before, after = read_rows(src), read_rows(out)
    assert len(before) == len(after) == ROWS
    for original, distilled in zip(before, after, strict=True):
        # Every row is under this target: distilled all the same (README "Distill").
        metrics = distilled.pop("compression_metrics")
        assert metrics["skipped_under_target"] and metrics["distill"]["level"] == "safe"
        changed = 0
        assert len(items(original)) == len(items(distilled))
        for a, b in zip(items(original), items(distilled), strict=True):
            if role(a) not in TOOL_ROLES:
                assert a == b  # system, user and assistant turns as they were
                continue
            assert set(a) == set(b) and type(a.get("content")) is type(b.get("content"))
            text_b = json.dumps(b, ensure_ascii=False)
            assert "\\u001b" not in text_b and "\\r" not in text_b  # escapes and redraws gone
            changed += a != b
        assert changed == metrics["distill"]["turns"] > 0
        assert metrics["distill"]["tokens_after"] < metrics["distill"]["tokens_before"]
        assert {k: v for k, v in distilled.items() if k not in ("conversations", "messages")} \
            == {k: v for k, v in original.items() if k not in ("conversations", "messages")}
    run = json.loads(next(out.parent.glob("*_metrics.json")).read_text())
    assert run["settings"]["compression"]["distill"] == "safe"
    assert run["distill"]["rows"] == ROWS
    assert sum(run["distill"]["saved_by_rule"].values()) == run["distill"]["tokens_saved"] > 0


def test_off_leaves_the_rows_as_they_were(tmp_path):
    src = subset("terminal_hermes.jsonl", tmp_path)
    out = tmp_path / "out" / "off.jsonl"
    proc = run_cli("compress", str(src), "-o", str(out), *WIDE)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == src.read_bytes()
    assert "distill" not in json.loads(out.with_name("off_metrics.json").read_text())


def test_hermes_tool_turns_keep_their_wrapper(tmp_path):
    src = subset("terminal_hermes.jsonl", tmp_path, 1)
    out = tmp_path / "out" / "one.jsonl"
    assert run_cli("compress", str(src), "-o", str(out), "--distill", "safe",
                   *WIDE).returncode == 0
    for a, b in zip(items(read_rows(src)[0]), items(read_rows(out)[0]), strict=True):
        if a["from"] == "tool":
            wrapper_a = json.loads(a["value"].split("\n", 1)[1].rsplit("\n", 1)[0])
            wrapper_b = json.loads(b["value"].split("\n", 1)[1].rsplit("\n", 1)[0])
            assert b["value"].startswith("<tool_response>\n{\"tool_call_id\": ")
            assert b["value"].endswith("}\n</tool_response>")
            assert {k: v for k, v in wrapper_a.items() if k != "content"} == \
                {k: v for k, v in wrapper_b.items() if k != "content"}


def test_distill_shrinks_what_gets_summarized(tmp_path):
    src = subset("terminal_hermes.jsonl", tmp_path, 8)
    runs = {}
    for level in ("off", "safe"):
        out = tmp_path / level / "out.jsonl"
        proc = run_cli("compress", str(src), "-o", str(out), "--distill", level,
                       "--summarizer", "extractive", "--quiet")
        assert proc.returncode == 0, proc.stderr
        runs[level] = json.loads(out.with_name("out_metrics.json").read_text())
    assert runs["safe"]["summary"]["trajectories_compressed"] < \
        runs["off"]["summary"]["trajectories_compressed"]
    assert runs["safe"]["tokens"]["total_before"] < runs["off"]["tokens"]["total_before"]


def test_analyze_shows_what_each_level_would_save(tmp_path):
    src = subset("terminal_hermes.jsonl", tmp_path, 8)
    report = tmp_path / "analysis.json"
    proc = run_cli("analyze", str(src), "--summarizer", "extractive", "--json", str(report))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())["distill"]
    safe, lossy = data["safe"], data["all"]
    counter = TokenCounter.load()
    assert data["tool_tokens"] == sum(counter.count(t["value"]) for row in read_jsonl(src)
                                      for t in row["conversations"] if t["from"] == "tool")
    assert data["tool_tokens"] > lossy["tokens_saved"] >= safe["tokens_saved"] > 0
    assert 0 <= safe["rows_no_longer_over"] <= data["rows_over"] <= 8
    assert "distill" in proc.stdout.lower()


# batch export/finish gives what an online run gives, on the distilled rows

ARGS = ("--model", "fake-model", "--target-max-tokens", "6000", "--summary-target-tokens",
        "200", "--max-concurrent-requests", "4", "--distill", "safe")


def test_batch_equals_online_with_distill(tmp_path):
    src = subset("terminal_hermes.jsonl", tmp_path, 6)
    online = tmp_path / "online" / "out.jsonl"
    bodies: list[dict] = []

    def reply(data: dict) -> str:
        bodies.append(data)
        return default_reply(data)

    with FakeLLMServer(reply=reply).in_thread() as server:
        proc = run_cli("compress", str(src), "-o", str(online), "--base-url", server.url,
                       *ARGS, "--quiet")
        assert proc.returncode == 0, proc.stderr
    # No escape sequence, as the JSON of a Hermes tool response spells one ("\x1b" itself
    # never reaches a prompt: the turn holds it JSON-escaped).
    assert bodies and not any("\\u001b" in m["content"] for b in bodies for m in b["messages"])
    folder, out = tmp_path / "batch", tmp_path / "run" / "out.jsonl"
    export = run_cli("compress", str(src), "-o", str(out), "--summarizer", "batch",
                     "--batch-dir", str(folder), *ARGS, "--quiet")
    assert export.returncode == 0, export.stderr
    files = request_files(folder)
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    key = lambda b: json.dumps(b, sort_keys=True)  # noqa: E731
    assert sorted(key(x["body"]) for x in lines) == sorted(key(b) for b in bodies)
    answer(files, folder / "results-00001.jsonl")
    finish = run_cli("compress", str(src), "-o", str(out), "--summarizer", "batch",
                     "--batch-dir", str(folder), "--batch-results",
                     str(folder / "results-*.jsonl"), *ARGS, "--quiet")
    assert finish.returncode == 0, finish.stderr
    assert out.read_bytes() == online.read_bytes()


def test_the_summary_cache_keys_on_the_distilled_text(tmp_path):
    """A summary paid for on the raw outputs is not served for the distilled ones (and
    back): the request, and so its cache key, carries the distilled text."""
    src = subset("terminal_hermes.jsonl", tmp_path, 4)
    cache = tmp_path / "summaries.sqlite"
    asked: dict[str, list[dict]] = {}
    for run, level in enumerate(("off", "safe", "safe", "off")):
        bodies = asked.setdefault(f"{run}-{level}", [])

        def reply(data: dict, bodies: list[dict] = bodies) -> str:
            bodies.append(data)
            return default_reply(data)

        with FakeLLMServer(reply=reply).in_thread() as server:
            out = tmp_path / f"run{run}" / "out.jsonl"
            proc = run_cli("compress", str(src), "-o", str(out), "--base-url", server.url,
                           *ARGS[:-1], level, "--cache-path", str(cache), "--quiet")
            assert proc.returncode == 0, proc.stderr
    raw, distilled, again, raw_again = asked.values()
    # An escape sequence, as the JSON of a Hermes tool response spells it.
    escape = "\\u001b"
    assert raw and any(escape in m["content"] for b in raw for m in b["messages"])
    # The distilled run asks anew (nothing of the raw run's entries fits) ...
    assert distilled and not any(escape in m["content"]
                                 for b in distilled for m in b["messages"])
    # ... and each level's second run is served from the cache it filled.
    assert again == [] and raw_again == []


# local and Ray write the same bytes


def test_ray_and_local_write_the_same_distilled_rows(tmp_path):
    ray = pytest.importorskip("ray", reason="needs the 'ray' extra")
    src = tmp_path / "in"
    src.mkdir()
    subset("terminal_hermes.jsonl", src, 8)
    subset("terminal_openai.jsonl", src, 4)
    config = CompressionConfig().replace(summarizer="extractive", distill="safe",
                                         target_max_tokens=6000, summary_target_tokens=200)
    local = compress_dataset(str(src), str(tmp_path / "local"), config, quiet=True)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = compress_dataset(str(src), str(tmp_path / "ray"),
                                  config.replace(engine="ray", ray_actors=2), quiet=True)
    finally:
        ray.shutdown()
    assert list(local.layout.outputs) == list(on_ray.layout.outputs)
    for source, path in local.layout.outputs.items():
        assert path.read_bytes() == on_ray.layout.outputs[source].read_bytes()
    assert local.metrics.distill_rows == on_ray.metrics.distill_rows == 12
    assert local.metrics.trajectories_compressed > 0


def test_report_and_html_page_show_what_distill_saved(tmp_path):
    src = subset("terminal_hermes.jsonl", tmp_path, 3)
    out = tmp_path / "out" / "run.jsonl"
    assert run_cli("compress", str(src), "-o", str(out), "--distill", "safe",
                   *WIDE).returncode == 0
    saved = json.loads(out.with_name("run_metrics.json").read_text())["distill"]["tokens_saved"]
    rows = [r["compression_metrics"]["distill"] for r in read_jsonl(out)]
    assert saved == sum(d["tokens_before"] - d["tokens_after"] for d in rows) > 0
    text = run_cli("report", str(out))
    assert text.returncode == 0, text.stderr
    assert any(line.split()[:2] == ["distill", f"{saved:,}"] for line in text.stdout.splitlines())
    page = tmp_path / "page.html"
    assert run_cli("report", str(out), "--html", str(page)).returncode == 0
    html = page.read_text(encoding="utf-8")
    assert ">Distilled<" in html and "tool turns; " in html and "control " in html


def test_a_failing_rule_warns_and_the_row_goes_on_undistilled(tmp_path, monkeypatch):
    """A bug in a rule costs the row its distilling, never the row, and it is said."""
    import trajectory_compressor.engine.compressor as compressor_module

    calls = []

    def broken(texts, level, count_many, **counts):
        calls.append(1)
        if len(calls) == 2:  # the second row: rows are distilled in input order
            raise ValueError("rule bug")
        return distill_turns(texts, level, count_many, **counts)

    distill_turns = compressor_module.distill_turns
    monkeypatch.setattr(compressor_module, "distill_turns", broken)
    src = subset("terminal_hermes.jsonl", tmp_path)
    out = tmp_path / "out.jsonl"
    config = CompressionConfig(target_max_tokens=400000, summarizer="extractive",
                               distill="safe")
    result = compress_dataset(str(src), str(out), config)
    written, given = read_jsonl(out), read_jsonl(src)
    assert len(written) == len(given)
    assert written[1]["conversations"] == given[1]["conversations"]
    assert [w for w in result.warnings if "distill" in w] == [
        f"{src}:2: distill failed, the row goes on undistilled: ValueError: rule bug"]
    assert all(written[i] != given[i] for i in (0, 2, 3, 4))
