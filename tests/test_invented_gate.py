"""Invented facts through the pipeline (issue 23): measured on every row and dialect,
gated by --max-invented like low fidelity, and the default that never invents.

The loopback server's profiles (`tests.fake_llm_server`) are written apart from
`core.invented`: `inventing_reply` adds a made-up shard path, sample and batch counts, a
size and an error name to one real path; `faithful_reply` restates facts it finds with
its own regexes, numbers in another unit or spelling.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.agent_rows import write_agent_rows
from tests.cli_helpers import read_jsonl
from tests.fake_llm_server import (
    FakeLLMServer,
    Recorder,
    faithful_reply,
    fenced,
    inventing_reply,
    repenting_reply,
)
from tests.sample_files import sample_head
from tests.test_summarizer_choice import _site_without_the_local_extra
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.engine.job import compress_dataset
from trajectory_compressor.summarizers.choice import BUNDLED_MODEL_PACKAGE, SERVER_MODULES

ROOT = Path(__file__).resolve().parent.parent
ROWS = 40
# Small enough that every agent row (about 700 tokens) is compressed.
SMALL = {"target_max_tokens": 400, "summary_target_tokens": 120}


def run(tmp_path: Path, src: Path, name: str, **settings: Any) -> tuple[list[dict], dict]:
    out = tmp_path / f"{name}{''.join(src.suffixes)}"
    config = CompressionConfig(add_summary_notice=False, api_key_env=None, max_retries=1,
                               retry_delay=0, cache_enabled=False).replace(**settings)
    compress_dataset(str(src), str(out), config, overwrite=True)
    [metrics_file] = tmp_path.glob(f"{name}*_metrics.json")
    metrics = json.loads(metrics_file.read_text())
    if out.suffix == ".parquet":
        rows = pq.read_table(out).to_pylist()
    elif out.suffix == ".json":
        rows = json.loads(out.read_text())
    else:
        rows = read_jsonl(out)
    return rows, metrics


def fidelities(rows: list[dict]) -> list[dict]:
    return [r["compression_metrics"]["fidelity"] for r in rows
            if (r.get("compression_metrics") or {}).get("was_compressed")]


def flagged_share(rows: list[dict]) -> float:
    measured = fidelities(rows)
    assert measured, "no row was compressed"
    return sum(f["invented"] > 0 for f in measured) / len(measured)


@pytest.fixture(scope="module")
def agent_jsonl(tmp_path_factory) -> Path:
    return write_agent_rows(tmp_path_factory.mktemp("agent") / "agent.jsonl", ROWS)


def test_an_inventing_server_is_flagged_on_at_least_90_percent_of_rows(tmp_path,
                                                                       agent_jsonl):
    with FakeLLMServer(reply=inventing_reply).in_thread() as server:
        rows, metrics = run(tmp_path, agent_jsonl, "inv", summarizer="openai",
                            base_url=server.url, **SMALL)
    assert len(fidelities(rows)) == ROWS
    assert flagged_share(rows) >= 0.9
    # Each reply makes up 5 facts: the shard path, two counts, a size, an error name.
    first = fidelities(rows)[0]
    assert first["invented"] == 5 and first["invented_items"][0].startswith("/data/shards/")
    f = metrics["fidelity"]
    assert f["invented_rows"] == sum(x["invented"] > 0 for x in fidelities(rows))
    assert f["invented_share"] == round(f["invented_rows"] / ROWS, 4)


def test_a_faithful_server_is_flagged_on_at_most_5_percent_of_rows(tmp_path, agent_jsonl):
    with FakeLLMServer(reply=faithful_reply).in_thread() as server:
        rows, metrics = run(tmp_path, agent_jsonl, "faithful", summarizer="openai",
                            base_url=server.url, **SMALL)
    assert len(fidelities(rows)) == ROWS
    assert flagged_share(rows) <= 0.05
    # Its numbers are restated in other units (2.5s for 2500 ms, 1.50 GiB for 1536 MB):
    # the summaries do carry them, so the matching, not their absence, let them pass.
    texts = [t["value"] for r in rows for t in r["conversations"]]
    assert any(" GiB" in t for t in texts) and any(" ms" in t and "took" in t for t in texts)
    assert metrics["fidelity"]["invented_rows"] <= 0.05 * ROWS


def test_the_extractive_summarizer_is_never_flagged(tmp_path, agent_jsonl):
    rows, metrics = run(tmp_path, agent_jsonl, "ext", summarizer="extractive", **SMALL)
    assert len(fidelities(rows)) == ROWS
    assert flagged_share(rows) == 0
    assert metrics["fidelity"]["invented_rows"] == 0
    assert metrics["fidelity"]["invented_items"] == 0


@pytest.mark.parametrize("sample", ["trajectories.jsonl", "trajectories.parquet",
                                    "llamafactory_sharegpt.json", "openai_messages.jsonl",
                                    "llamafactory_messages.jsonl"])
def test_every_dialect_and_container_measures_invention(tmp_path, sample):
    (tmp_path / "in").mkdir()
    src = sample_head(sample, tmp_path / "in")  # 10 rows (of 50 in the Hermes samples)
    with FakeLLMServer(reply=inventing_reply).in_thread() as server:
        rows, _ = run(tmp_path, src, "inv", summarizer="openai", base_url=server.url)
    assert flagged_share(rows) >= 0.9
    rows, _ = run(tmp_path, src, "ext", summarizer="extractive")
    assert flagged_share(rows) == 0


def test_a_summary_over_the_cap_is_repaired_naming_what_it_invented(tmp_path, agent_jsonl):
    recorder = Recorder(repenting_reply)
    with FakeLLMServer(reply=recorder).in_thread() as server:
        rows, metrics = run(tmp_path, agent_jsonl, "gate", summarizer="openai",
                            base_url=server.url, max_invented=0, **SMALL)
    assert server.requests == 2 * ROWS  # one repair per row
    repairs = [fenced(d, "invented") for d in recorder.seen if fenced(d, "invented")]
    assert len(repairs) == ROWS
    assert all(r.startswith("- /data/shards/train-") and "- ShardIndexError" in r
               for r in repairs)
    for row in rows:
        m = row["compression_metrics"]
        assert m["fidelity_repair"] is True and "low_fidelity" not in m
        assert m["fidelity"]["invented"] == 0
    assert metrics["fidelity"]["repair_requests"] == ROWS
    assert metrics["fidelity"]["invented_rows"] == 0


@pytest.mark.parametrize("policy", ["extractive", "uncompressed", "keep"])
def test_a_summary_still_over_the_cap_follows_on_low_fidelity(tmp_path, agent_jsonl, policy):
    with FakeLLMServer(reply=inventing_reply).in_thread() as server:
        rows, metrics = run(tmp_path, agent_jsonl, policy, summarizer="openai",
                            base_url=server.url, max_invented=2, on_low_fidelity=policy,
                            **SMALL)
    assert metrics["fidelity"]["low_fidelity_rows"] == ROWS
    for row in rows:
        m = row["compression_metrics"]
        assert m["low_fidelity"] is True and m["fidelity_repair"] is True
        # 5 made-up facts, fewer where a drawn number happens to occur in the row.
        why = re.fullmatch(r"([345]) invented item\(s\) \(/data/shards/train-\d{5}\.parquet, "
                           r"[^()]+\), over max_invented 2", m["low_fidelity_reason"])
        assert why, m["low_fidelity_reason"]
        if policy == "extractive":
            assert m["summary_source"] == "extractive" and m["fidelity"]["invented"] == 0
        elif policy == "uncompressed":
            assert not m["was_compressed"]
        else:
            assert m["summary_source"] == "llm" and m["fidelity"]["invented"] == int(why[1])


def test_both_bars_are_named_when_both_fail(tmp_path, agent_jsonl):
    with FakeLLMServer(reply=inventing_reply).in_thread() as server:
        rows, _ = run(tmp_path, agent_jsonl, "both", summarizer="openai", base_url=server.url,
                      max_invented=0, min_fidelity=0.99, summary_references="off", **SMALL)
    reason = rows[0]["compression_metrics"]["low_fidelity_reason"]
    assert "of the region's facts, under min_fidelity 0.99; 5 invented item(s)" in reason


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trajectory_compressor", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("value", ["-1", "two", "1.5", ""])
def test_a_bad_max_invented_is_a_usage_error(tmp_path, sample_jsonl, value):
    proc = cli("compress", str(sample_jsonl), "-o", str(tmp_path / "o.jsonl"),
               "--summarizer", "extractive", "--max-invented", value, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--max-invented" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("value", ["-1", "1.5", "'3'"])
def test_a_bad_max_invented_in_yaml_is_a_configuration_error(tmp_path, sample_jsonl, value):
    config = tmp_path / "c.yaml"
    config.write_text(f"summarization:\n  backend: extractive\n  max_invented: {value}\n")
    proc = cli("compress", str(sample_jsonl), "-o", str(tmp_path / "o.jsonl"),
               "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "max_invented" in proc.stderr and "Traceback" not in proc.stderr


def test_max_invented_on_the_command_line_gates_a_run(tmp_path, agent_jsonl):
    with FakeLLMServer(reply=inventing_reply).in_thread() as server:
        proc = cli("compress", str(agent_jsonl), "-o", str(tmp_path / "o.jsonl"),
                   "--base-url", server.url, "--model", "m", "--api-key-env", "",
                   "--target-max-tokens", "400", "--summary-target-tokens", "120",
                   "--max-invented", "0", "--on-low-fidelity", "extractive", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = read_jsonl(tmp_path / "o.jsonl")
    assert {r["compression_metrics"]["summary_source"] for r in rows} == {"extractive"}
    assert all(r["compression_metrics"]["low_fidelity"] for r in rows)


def test_nothing_configured_with_the_local_extra_installed_runs_extractive(tmp_path,
                                                                          sample_jsonl):
    """The 'local' extra importable (stand-ins that record being run as a server): no
    flag, no config, no key still means extractive, and no llama.cpp server starts."""
    stubs, marker = tmp_path / "stubs", tmp_path / "server-started"
    for name in (*SERVER_MODULES, BUNDLED_MODEL_PACKAGE):
        (stubs / name).mkdir(parents=True)
        (stubs / name / "__init__.py").write_text("")
    (stubs / "llama_cpp" / "server").mkdir()
    (stubs / "llama_cpp" / "server" / "__init__.py").write_text("")
    (stubs / "llama_cpp" / "server" / "__main__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n")
    work = tmp_path / "mine"
    work.mkdir()
    (work / "data.jsonl").write_bytes(sample_jsonl.read_bytes())
    site = _site_without_the_local_extra(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "OPENROUTER_API_KEY"}
    env.update(PYTHONPATH=os.pathsep.join(map(str, (ROOT, stubs, site))),
               HERMES_HOME=str(tmp_path / "hermes"))
    proc = subprocess.run([sys.executable, "-S", "-m", "trajectory_compressor", "compress",
                           "data.jsonl"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    [note] = [line for line in proc.stderr.splitlines() if line.startswith("summarizer:")]
    assert note.startswith("summarizer: extractive (") and "'local' extra is installed" in note
    assert "--summarizer local" in note
    metrics = json.loads((work / "data_compressed_metrics.json").read_text())
    assert set(metrics["summarization"]["summaries_by_source"].items()) >= {
        ("extractive", metrics["summary"]["trajectories_compressed"])}
    assert metrics["fidelity"]["invented_rows"] == 0
    assert not marker.exists()
    # The stand-in does record a server start: the check above could fail.
    subprocess.run([sys.executable, "-S", "-m", "llama_cpp.server"], env=env, check=True,
                   timeout=60)
    assert marker.exists()


def test_report_and_the_html_page_show_the_invented_rows(tmp_path, agent_jsonl):
    with FakeLLMServer(reply=inventing_reply).in_thread() as server:
        rows, metrics = run(tmp_path, agent_jsonl, "out", summarizer="openai",
                            base_url=server.url, **SMALL)
    flagged = sum(f["invented"] > 0 for f in fidelities(rows))
    items = sum(f["invented"] for f in fidelities(rows))
    page = tmp_path / "run.html"
    assert cli("report", str(tmp_path / "out.jsonl"), "--html", str(page),
               cwd=tmp_path).returncode == 0
    proc = cli("report", str(tmp_path / "out.jsonl"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    share = f"{flagged / ROWS:.2f}"
    assert f"invented facts{flagged:>13}   rows ({share} of summaries), {items} items" \
        in proc.stdout
    model = sum(f["model_ratio"] for f in fidelities(rows)) / ROWS
    assert f"model fidelity{model:>13.2f}   mean of its own text" in proc.stdout
    html = page.read_text(encoding="utf-8")
    assert f"rows with invented facts <b>{flagged / ROWS:.3f}</b>" in html
    assert metrics["fidelity"]["mean_model_ratio"] == round(model, 4)
