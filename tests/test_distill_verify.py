"""`--verify-distill` / `compression.verify_distill` (§18): every distilled row is read
back (`expand`) and compared with what a terminal showed for its original outputs; a row
that differs is written as it came, the failure in its metrics and the run's warnings.

The rules are lossless (tests/test_distill.py), so a failure is planted: a distill that
drops a line of a tool output. Every dialect is run with the real rules and must verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import read_jsonl, run_cli
from tests.test_distill_pipeline import WIDE, read_rows, subset
from trajectory_compressor.core import distill_row
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.engine import compressor as compressor_module
from trajectory_compressor.engine.job import compress_dataset

POLLING = "\n".join(f"Exit status {s}" for s in (0, 0, 1, 0, 0)) + "\n" + \
    "\n".join(["waiting for the job to finish"] * 30)


def polling_row() -> dict:
    return {"id": "p1", "conversations": [
        {"from": "human", "value": "Run the job."},
        {"from": "gpt", "value": "Running it."},
        {"from": "tool", "value": POLLING},
        {"from": "gpt", "value": "It finished."}]}


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def config(verify: bool) -> CompressionConfig:
    return CompressionConfig(summarizer="extractive", target_max_tokens=100000,
                             summary_target_tokens=50, distill="safe", verify_distill=verify)


def lossy_distill(texts, level, count_many, **counts):
    """The real rules, then one line of each changed turn dropped: a rule with a bug."""
    out, stats = distill_row.distill_turns(texts, level, count_many, **counts)
    return [t if t is None or t == o else t.split("\n", 1)[-1]
            for t, o in zip(out, texts, strict=True)], stats


def test_a_row_that_does_not_read_back_is_written_undistilled(tmp_path, monkeypatch, counter):
    monkeypatch.setattr(compressor_module, "distill_turns", lossy_distill)
    src = write(tmp_path / "in.jsonl", [polling_row()])
    result = compress_dataset(str(src), str(tmp_path / "out.jsonl"), config(True),
                              summarizer=ExtractiveSummarizer(counter.count))
    (written,) = read_jsonl(tmp_path / "out.jsonl")
    assert written["conversations"] == polling_row()["conversations"]
    failed = written["compression_metrics"]["distill"]["verify_failed"]
    assert failed == "tool output #1 reads back other than the terminal showed it"
    assert result.metrics.distill_verify_failed == 1
    assert [w for w in result.warnings if "read back" in w] == [
        f"{src}:1: distilled row does not read back, written undistilled: {failed}"]
    run = json.loads((tmp_path / "out_metrics.json").read_text(encoding="utf-8"))
    assert run["distill"]["verify_failed_rows"] == 1
    # without the check the bug reaches the output
    compress_dataset(str(src), str(tmp_path / "plain.jsonl"), config(False),
                     summarizer=ExtractiveSummarizer(counter.count))
    (plain,) = read_jsonl(tmp_path / "plain.jsonl")
    assert plain["conversations"][2]["value"] == "⟪×30⟫ waiting for the job to finish"


def test_a_row_that_reads_back_is_written_distilled(tmp_path, counter):
    src = write(tmp_path / "in.jsonl", [polling_row()])
    compress_dataset(str(src), str(tmp_path / "out.jsonl"), config(True),
                     summarizer=ExtractiveSummarizer(counter.count))
    (written,) = read_jsonl(tmp_path / "out.jsonl")
    assert written["conversations"][2]["value"] == \
        "⟪×5⟫ Exit status {0,0,1,0,0}\n⟪×30⟫ waiting for the job to finish"
    assert "verify_failed" not in written["compression_metrics"]["distill"]


@pytest.mark.parametrize("name", ["terminal_hermes.jsonl", "terminal_openai.jsonl",
                                  "terminal_llamafactory.json"])
def test_every_dialect_verifies_and_writes_what_an_unverified_run_writes(tmp_path, name):
    src = subset(name, tmp_path, 4)
    outs = {}
    for flag in ("--verify-distill", "--no-verify-distill"):
        out = tmp_path / flag.strip("-") / f"run{src.suffix}"
        proc = run_cli("compress", str(src), "-o", str(out), "--distill", "safe", flag, *WIDE)
        assert proc.returncode == 0, proc.stderr
        assert "read back" not in proc.stderr
        outs[flag] = read_rows(out)
    assert outs["--verify-distill"] == outs["--no-verify-distill"]
    assert any("distill" in (r.get("compression_metrics") or {}) for r in outs["--verify-distill"])


def test_the_yaml_key_is_a_boolean(tmp_path):
    loaded = CompressionConfig.from_dict({"compression": {"distill": "safe",
                                                          "verify_distill": True}})
    assert loaded.verify_distill is True
    with pytest.raises(ConfigError, match=r"compression\.verify_distill must be"):
        CompressionConfig.from_dict({"compression": {"verify_distill": "yes"}})
