"""`auto` and the key: the engine sees an API key where the command line sees it (the
environment, then the `.env` files), and so do the Ray workers (issue 40 item 7)."""

from __future__ import annotations

import json
import os

import pytest

from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, write_jsonl
from trajectory_compressor.app.cli import _settle_summarizer
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.extractive import ExtractiveSummarizer
from trajectory_compressor.engine.job import compress_dataset

KEY = "sk-autokey-0123456789abcdef"


@pytest.mark.parametrize("where", ["environment", "hermes_home", "none"])
def test_the_engine_settles_auto_as_the_cli_does(tmp_path, monkeypatch, counter, where):
    home = tmp_path / "hermes"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    if where == "environment":
        monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    elif where == "hermes_home":
        (home / ".env").write_text(f"OPENROUTER_API_KEY={KEY}\n", encoding="utf-8")
    config = CompressionConfig(summarizer="auto", **HAND_CONFIG)
    cli = _settle_summarizer(config, announce=False).summarizer
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    # A summarizer object of our own: nothing is sent anywhere; the metrics file records
    # the backend the engine settled `auto` to.
    compress_dataset(str(src), str(tmp_path / "out.jsonl"), config, quiet=True,
                     summarizer=ExtractiveSummarizer(counter.count))
    metrics = json.loads((tmp_path / "out_metrics.json").read_text())
    engine = metrics["settings"]["summarization"]["backend"]
    assert engine == cli == ("extractive" if where == "none" else "openai")


def test_ray_workers_get_the_key_the_driver_reads_from_a_dotenv_file(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray", reason="needs the 'ray' extra")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".env").write_text(f"TC_RAY_KEY={KEY}\n", encoding="utf-8")
    monkeypatch.chdir(work)
    monkeypatch.delenv("TC_RAY_KEY", raising=False)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "no-hermes"))
    src = write_jsonl(work / "in.jsonl", HAND_ROWS)
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with FakeLLMServer(api_key=KEY).in_thread() as server:
            config = CompressionConfig(summarizer="openai", engine="ray", ray_actors=1,
                                       **HAND_CONFIG).with_endpoint_flags(
                [server.url], "m", "TC_RAY_KEY", environ={})
            result = compress_dataset(str(src), str(work / "out.jsonl"), config, quiet=True)
    finally:
        ray.shutdown()
    assert not server.outcomes["unauthorized"], server.outcomes
    assert server.outcomes["ok"] >= 1
    assert result.metrics.summaries_by_source["llm"] >= 1
    assert KEY not in (work / "out.jsonl").read_text()
    assert "TC_RAY_KEY" not in os.environ


def test_driver_keys_are_the_configured_variables_only(monkeypatch):
    from trajectory_compressor.engine.ray import driver_keys

    monkeypatch.setenv("TC_A", "a-value")
    monkeypatch.setenv("TC_OTHER", "not sent")
    config = CompressionConfig(summarizer="openai").with_endpoint_flags(
        ["http://127.0.0.1:9/v1"], "m", "TC_A", environ={})
    assert driver_keys(config) == {"TC_A": "a-value"}
    assert driver_keys(CompressionConfig(api_key_env=None)) == {}
