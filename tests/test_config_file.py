"""Which config file a command reads (issue 40 item 3): the one named, the user's own at a
documented path, or none; never a `configs/default.yaml` that happens to lie in the working
folder. A config that names no endpoint leaves the summarizer to `auto`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import invoke_cli
from tests.sample_files import sample_head
from trajectory_compressor.app.config_file import choose_config, user_config_path
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
# A training repository's own Hydra config: sections this tool does not know.
HYDRA = """defaults:
  - _self_
model:
  name: llama-3-8b
  lr: 2.0e-5
trainer:
  max_steps: 1000
"""
NO_KEY = {"OPENROUTER_API_KEY": "", "HERMES_HOME": "/nonexistent-hermes"}


@pytest.mark.parametrize("data", [
    {},
    {"compression": {"target_max_tokens": 4000}},
    {"compression": {"target_max_tokens": 4000}, "summarization": None},
    {"summarization": {"min_fidelity": 0.5, "endpoints": []}},
])
def test_a_config_that_names_no_endpoint_leaves_the_summarizer_to_auto(data):
    assert CompressionConfig.from_dict(data).summarizer == "auto"


@pytest.mark.parametrize("data, backend", [
    ({"summarization": {"model": "m"}}, "openai"),
    ({"summarization": {"base_url": "http://localhost:1/v1"}}, "openai"),
    ({"summarization": {"api_key_env": "MY_KEY"}}, "openai"),
    ({"summarization": {"endpoints": [{"base_url": "http://h/v1", "model": "m"}]}}, "openai"),
    ({"summarization": {"backend": "extractive", "model": "m"}}, "extractive"),
])
def test_a_config_that_names_an_endpoint_or_backend_keeps_it(data, backend):
    assert CompressionConfig.from_dict(data).summarizer == backend


def test_the_hermes_config_keeps_its_meaning():
    config = CompressionConfig.from_yaml(CONFIGS / "hermes_compat.yaml")
    assert config.summarizer == "openai"
    assert config.summarization_model == "google/gemini-3-flash-preview"
    assert config.base_url == "https://openrouter.ai/api/v1"


def test_the_user_config_path_follows_xdg(tmp_path):
    assert user_config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == \
        tmp_path / "trajectory-compressor" / "config.yaml"
    # Unset or relative (the XDG spec says to ignore it): ~/.config.
    home = Path.home() / ".config" / "trajectory-compressor" / "config.yaml"
    assert user_config_path({}) == home
    assert user_config_path({"XDG_CONFIG_HOME": "rel/dir"}) == home


def _user_config(tmp_path: Path, text: str) -> dict[str, str]:
    folder = tmp_path / "xdg" / "trajectory-compressor"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(text, encoding="utf-8")
    return {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def test_choose_config_order(tmp_path, monkeypatch):
    env = _user_config(tmp_path, "compression:\n  target_max_tokens: 3000\n")
    named = tmp_path / "named.yaml"
    named.write_text("compression:\n  target_max_tokens: 5000\n", encoding="utf-8")
    assert choose_config(named, environ=env).config.target_max_tokens == 5000
    user = choose_config(None, environ=env)
    assert user.config.target_max_tokens == 3000 and "user config" in user.origin
    bare = choose_config(None, no_config=True, environ=env)
    assert bare.config == CompressionConfig(summarizer="auto") and bare.path is None
    with pytest.raises(ConfigError, match="not both"):
        choose_config(named, no_config=True, environ=env)
    with pytest.raises(ConfigError, match="not found"):
        choose_config(tmp_path / "missing.yaml", environ=env)
    # A configs/default.yaml in the working folder is nobody's config here.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "default.yaml").write_text(HYDRA, encoding="utf-8")
    assert choose_config(None, environ={"XDG_CONFIG_HOME": str(tmp_path / "none")}).config \
        == CompressionConfig(summarizer="auto")


def test_a_hydra_config_in_the_working_folder_does_not_stop_a_run(tmp_path):
    work = tmp_path / "repo"
    (work / "configs").mkdir(parents=True)
    (work / "configs" / "default.yaml").write_text(HYDRA, encoding="utf-8")
    source = sample_head("openai_messages.jsonl", work, rows=4)
    for command in (("compress", str(source), "--target-max-tokens", "3000"),
                    ("validate", str(work / "openai_messages_compressed.jsonl"),
                     "--allow-over-limit"),
                    ("report", str(work / "openai_messages_compressed.jsonl"))):
        result = invoke_cli(*command, cwd=work, env=NO_KEY)
        assert result.returncode == 0, (command, result.stdout, result.stderr)
        assert "unknown section" not in result.stderr
    metrics = json.loads((work / "openai_messages_compressed_metrics.json").read_text())
    assert metrics["settings"]["summarization"] == {"backend": "extractive"}


def test_a_config_setting_only_the_target_wants_no_key(tmp_path):
    source = sample_head("openai_messages.jsonl", tmp_path, rows=4)
    config = tmp_path / "small.yaml"
    config.write_text("compression:\n  target_max_tokens: 3000\n", encoding="utf-8")
    result = invoke_cli("compress", str(source), "--config", str(config), cwd=tmp_path,
                        env=NO_KEY)
    assert result.returncode == 0, result.stderr
    assert "summarizer: extractive" in result.stderr
    metrics = json.loads((tmp_path / "openai_messages_compressed_metrics.json").read_text())
    assert metrics["settings"]["compression"]["target_max_tokens"] == 3000
    assert metrics["settings"]["summarization"] == {"backend": "extractive"}


def test_the_user_config_is_read_and_no_config_skips_it(tmp_path):
    env = {**NO_KEY, **_user_config(tmp_path, "compression:\n  target_max_tokens: 3000\n")}
    source = sample_head("openai_messages.jsonl", tmp_path, rows=4)
    first = invoke_cli("compress", str(source), "-o", str(tmp_path / "a.jsonl"), "--quiet",
                       cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    second = invoke_cli("compress", str(source), "-o", str(tmp_path / "b.jsonl"), "--quiet",
                        "--no-config", cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    targets = [json.loads((tmp_path / f"{n}_metrics.json").read_text())["settings"]
               ["compression"]["target_max_tokens"] for n in "ab"]
    assert targets == [3000, 15250]
    both = invoke_cli("compress", str(source), "--no-config", "--config",
                      str(tmp_path / "x.yaml"), cwd=tmp_path, env=env)
    assert both.returncode == 2 and "not both" in both.stderr
