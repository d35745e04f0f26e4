"""The CLI end to end on real files: in this process (`invoke_cli`), and as a subprocess
through the real entry point (`python -m trajectory_compressor`) for the sample file and
--version."""

from __future__ import annotations

import json

from tests.cli_helpers import invoke_cli, read_jsonl, run_cli
from trajectory_compressor.core.conversation import SUMMARY_PREFIX


def test_compress_the_sample_file(tmp_path, sample_jsonl, counter):
    out = tmp_path / "out.jsonl"
    proc = run_cli("compress", str(sample_jsonl), "-o", str(out), "--summarizer", "extractive")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows_in = read_jsonl(sample_jsonl)
    rows_out = read_jsonl(out)
    assert [r["id"] for r in rows_out] == [r["id"] for r in rows_in]
    metrics = json.loads((tmp_path / "out_metrics.json").read_text())
    s = metrics["summary"]
    assert s["total_trajectories"] == len(rows_in)
    assert s["trajectories_compressed"] > s["trajectories_skipped_under_target"] > 0
    assert s["trajectories_still_over_limit"] > 0
    over = read_jsonl(tmp_path / "out_over_limit.jsonl")
    assert len(over) == s["trajectories_still_over_limit"]
    assert all(o["reason"] and o["line"] >= 1 for o in over)
    assert (tmp_path / "out_rejects.jsonl").read_text() == ""
    for before, after in zip(rows_in, rows_out, strict=True):
        assert {k: v for k, v in after.items() if k not in ("conversations",
                                                             "compression_metrics")} == \
            {k: v for k, v in before.items() if k != "conversations"}
        m = after.get("compression_metrics")
        total = sum(counter.count_many([t["value"] for t in after["conversations"]]))
        if m is None:
            assert after == before
            continue
        assert m["compressed_tokens"] == total
        n_summaries = sum(t["value"].startswith(SUMMARY_PREFIX) for t in after["conversations"])
        assert n_summaries == (1 if m["was_compressed"] else 0)
    assert metrics["tokens"]["total_after"] < metrics["tokens"]["total_before"]
    # "remedies": the stored "what would fix it" table, there when rows stay over.
    assert list(metrics) == ["summary", "tokens", "turns", "averages", "summarization",
                             "processing", "usage", "distributions", "fidelity", "over_limit",
                             "strategy", "settings", "tokenizer", "run", "committed",
                             "remedies"]
    assert metrics["summary"]["trajectories_still_over_limit"] > 0
    assert metrics["settings"]["compression"] == {"target_max_tokens": 15250,
                                                  "summary_target_tokens": 750,
                                                  "over_limit_strategy": "keep",
                                                  "distill": "off", "verify_distill": False,
                                                  "strategy": "summarize",
                                                  "mask_keep_last": 3,
                                                  "mask_exclude_tools": []}
    # Unchanged rows are written byte for byte.
    lines_in = sample_jsonl.read_text(encoding="utf-8").splitlines()
    lines_out = out.read_text(encoding="utf-8").splitlines()
    skipped = [i for i, r in enumerate(rows_out) if "compression_metrics" not in r]
    assert skipped and all(lines_in[i] == lines_out[i] for i in skipped)


def first_rows(sample_jsonl, tmp_path, n: int = 3):
    """The sample's first ``n`` rows (the first under the default target, the next over)."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(sample_jsonl.read_text().splitlines(keepends=True)[:n]))
    return src


def test_rerun_replaces_the_output(tmp_path, sample_jsonl):
    src = first_rows(sample_jsonl, tmp_path)
    out = tmp_path / "o.jsonl"
    out.write_text("stale\n")  # not written by a run: replaced only with --overwrite
    for flags in (("--overwrite",), ()):  # then a rerun replaces its own output silently
        proc = invoke_cli("compress", str(src), "-o", str(out), "--summarizer",
                       "extractive", "--quiet", *flags)
        assert proc.returncode == 0, proc.stderr
    assert len(read_jsonl(out)) == 3
    assert not list(tmp_path.glob(".*partial"))


def test_bad_lines_are_rejected_with_their_location_and_the_run_goes_on(tmp_path, sample_jsonl):
    good = sample_jsonl.read_text(encoding="utf-8").splitlines()[:3]
    bad_input = tmp_path / "mixed.jsonl"
    with bad_input.open("wb") as f:
        f.write((good[0] + "\n").encode())
        f.write(b"{not json\n")
        f.write(b'{"conversations": "nope"}\n')
        f.write(b"\xff\xfe broken bytes\n")
        f.write(b'{"id": 1}\n')
        f.write(b'{"conversations": [{"from": "alien", "value": "x"}]}\n')
        f.write(b'{"conversations": [{"from": "human", "value": 3}]}\n')
        f.write(b'{"conversations": ["turn"]}\n')
        f.write(b"[1, 2]\n")
        f.write((good[1] + "\n").encode())
    proc = invoke_cli("compress", str(bad_input), "--summarizer", "extractive", "--quiet")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert f"{bad_input}:2: invalid JSON" in proc.stderr
    out = read_jsonl(tmp_path / "mixed_compressed.jsonl")
    assert len(out) == 2
    rejects = read_jsonl(tmp_path / "mixed_compressed_rejects.jsonl")
    assert [r["line"] for r in rejects] == [2, 3, 4, 5, 6, 7, 8, 9]
    reasons = " | ".join(r["error"] for r in rejects)
    for needle in ("invalid JSON", "expected a list", "not valid UTF-8", "no 'conversations'",
                   "unknown role 'alien'", "non-string 'value'", "expected an object"):
        assert needle in reasons
    metrics = json.loads((tmp_path / "mixed_compressed_metrics.json").read_text())
    assert metrics["summary"]["rows_rejected"] == 8


def test_strict_stops_at_the_first_bad_row_and_commits_nothing(tmp_path, sample_jsonl):
    bad_input = tmp_path / "bad.jsonl"
    bad_input.write_text(sample_jsonl.read_text().splitlines()[0] + "\n{oops\n")
    proc = invoke_cli("compress", str(bad_input), "--summarizer", "extractive", "--strict")
    assert proc.returncode == 1
    assert "bad.jsonl:2" in proc.stderr
    assert not (tmp_path / "bad_compressed.jsonl").exists()
    assert not list(tmp_path.glob(".*partial"))


def test_usage_errors_exit_2_with_one_sentence(tmp_path, sample_jsonl):
    proc = invoke_cli("compress", str(tmp_path / "missing.jsonl"))
    assert proc.returncode == 2 and "input not found" in proc.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text("compression:\n  target_max_token: 10\n")
    proc = invoke_cli("compress", str(sample_jsonl), "--config", str(cfg))
    assert proc.returncode == 2
    assert "did you mean 'compression.target_max_tokens'" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = invoke_cli("compress", str(sample_jsonl), "--summary-target-tokens", "90000",
                   "--summarizer", "extractive")
    assert proc.returncode == 2 and "smaller than" in proc.stderr
    proc = invoke_cli("compress", str(sample_jsonl), "--tokenizer", "nobody/nothing",
                   "--summarizer", "extractive", "-o", str(tmp_path / "x.jsonl"))
    assert proc.returncode == 2 and "deepseek-v4" in proc.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_folder_input_gives_a_folder_output(tmp_path, sample_jsonl):
    src = tmp_path / "runs"
    src.mkdir()
    lines = sample_jsonl.read_text().splitlines()
    (src / "a.jsonl").write_text("\n".join(lines[:4]) + "\n")
    (src / "b.jsonl").write_text("\n".join(lines[4:9]) + "\n")
    (src / "notes.txt").write_text("ignored")
    proc = invoke_cli("compress", str(src), "--summarizer", "extractive", "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "runs_compressed"
    assert sorted(p.name for p in out.iterdir()) == ["a.jsonl", "b.jsonl"]
    assert len(read_jsonl(out / "a.jsonl")) == 4 and len(read_jsonl(out / "b.jsonl")) == 5
    assert (tmp_path / "runs_compressed_metrics.json").exists()


def test_sample_percent_is_seeded_and_ordered(tmp_path, sample_jsonl):
    outs = []
    for name in ("s1.jsonl", "s2.jsonl"):
        proc = invoke_cli("compress", str(sample_jsonl), "-o", str(tmp_path / name),
                       "--summarizer", "extractive", "--sample-percent", "30", "--seed", "3",
                       "--quiet")
        assert proc.returncode == 0, proc.stderr
        outs.append([r["id"] for r in read_jsonl(tmp_path / name)])
    assert outs[0] == outs[1] and 0 < len(outs[0]) < 50
    assert outs[0] == sorted(outs[0])


def test_dry_run_writes_nothing(tmp_path, sample_jsonl):
    src = first_rows(sample_jsonl, tmp_path)
    proc = invoke_cli("compress", str(src), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "would compress" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_help_explains_the_commands():
    # At 80 columns rich now cuts the longest option names (--target-max-tok…): a known
    # gap of this wave's many new options; the names are whole from 120 columns.
    proc = invoke_cli("compress", "--help", env={"COLUMNS": "120"})
    assert proc.returncode == 0
    for flag in ("--target-max-tokens", "--summarizer", "--strict", "--dry-run"):
        assert flag in proc.stdout


def test_version_prints_the_project_version():
    import re

    from tests.cli_helpers import ROOT

    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE).group(1)
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"trajectory-compressor {version}\n"


def test_help_shows_flags_without_a_type_and_the_default_summarizer():
    for command in ((), ("compress",), ("analyze",), ("report",), ("validate",)):
        proc = invoke_cli(*command, "--help", env={"COLUMNS": "120"})
        assert proc.returncode == 0, proc.stderr
        assert "<bool>" not in proc.stdout, command
    text = invoke_cli("compress", "--help", env={"COLUMNS": "1000"}).stdout  # no wrapping
    for needle in ("--protect-last-n-turns", "--no-protect-first-tool",
                   "or one that names no endpoint (backend: auto)", "--no-config"):
        assert needle in text, needle
    # Which one depends on this machine (the 'local' extra, a key in the environment).
    assert any(f"Here and now: {name} (" in text for name in ("local", "extractive", "openai"))


def test_the_metrics_name_no_model_for_the_extractive_summarizer(tmp_path, sample_jsonl):
    out = tmp_path / "out.jsonl"
    src = first_rows(sample_jsonl, tmp_path)
    proc = invoke_cli("compress", str(src), "-o", str(out), "--summarizer",
                   "extractive", "--quiet")
    assert proc.returncode == 0, proc.stderr
    settings = json.loads((tmp_path / "out_metrics.json").read_text())["settings"]
    # Not the configured LLM (google/gemini-3-flash-preview): no model ran.
    assert settings["summarization"] == {"backend": "extractive"}


def test_protected_turn_flags_change_the_plan(tmp_path):
    from tests.fixtures_runs import HAND_ROWS, write_jsonl

    # SHGT (50, 50, 10, 10 tokens): every turn is some role's first, so nothing can be
    # summarized; with no turn protected, the first (50 tokens) is what 120 - 100 + 20
    # needs.
    src = write_jsonl(tmp_path / "in.jsonl", [r for r in HAND_ROWS if r["id"] == "no-middle"])
    small = ("--summarizer", "extractive", "--target-max-tokens", "100",
             "--summary-target-tokens", "20", "--quiet")
    off = ("--protect-last-n-turns", "0", "--no-protect-first-system",
           "--no-protect-first-human", "--no-protect-first-gpt", "--no-protect-first-tool")
    for name, flags in (("kept", ()), ("off", off)):
        proc = invoke_cli("compress", str(src), "-o", str(tmp_path / f"{name}.jsonl"), *small,
                       *flags)
        assert proc.returncode == 0, proc.stderr
    [kept] = read_jsonl(tmp_path / "kept.jsonl")
    [off_row] = read_jsonl(tmp_path / "off.jsonl")
    assert kept["compression_metrics"]["still_over_limit"] is True
    assert not kept["compression_metrics"]["was_compressed"]
    assert off_row["compression_metrics"]["compression_region"] == {
        "start_idx": 0, "end_idx": 1, "turns_count": 1}
    assert [t["from"] for t in off_row["conversations"]] == ["human", "human", "gpt", "tool"]
    settings = json.loads((tmp_path / "off_metrics.json").read_text())["settings"]
    assert settings["protected_turns"] == {"first_system": False, "first_human": False,
                                           "first_gpt": False, "first_tool": False,
                                           "last_n_turns": 0}


def test_compress_lists_the_first_rejects_and_counts_the_rest(tmp_path, sample_jsonl):
    src = tmp_path / "mixed.jsonl"
    good = sample_jsonl.read_text(encoding="utf-8").splitlines()[0]
    src.write_text(good + "\n" + "".join(f'{{"id": {i}}}\n' for i in range(8)))
    proc = invoke_cli("compress", "mixed.jsonl", "--summarizer", "extractive", cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    start = lines.index("Rejected rows: 8")
    assert lines[start + 1:] == [
        *(f"  mixed.jsonl:{n}: row has no 'conversations' field" for n in range(2, 7)),
        "  … and 3 more; see mixed_compressed_rejects.jsonl"]
    # Paths too long for 80 columns lose their start, not the line number or reason.
    proc = invoke_cli("compress", str(src), "--summarizer", "extractive", "--overwrite")
    block = proc.stdout.splitlines()
    block = block[block.index("Rejected rows: 8"):]
    assert len(block) == 7 and all(len(line) <= 80 for line in block)
    assert proc.stdout.splitlines()[-1].endswith("/mixed_compressed_rejects.jsonl")
    assert ".jsonl:2: row has no 'conversations' field" in proc.stdout
