"""The summarizer a run uses when nothing names one (issue 15: an embedded default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.summarizers import make_summarizer
from trajectory_compressor.summarizers.choice import (
    BUNDLED_MODEL_PACKAGE,
    SERVER_MODULES,
    default_summarizer,
    local_extra_installed,
    resolve_summarizer,
)

ROOT = Path(__file__).resolve().parent.parent
AUTO = CompressionConfig(summarizer="auto")  # what the CLI runs with and no config file
NO_KEY: dict[str, str] = {}


def installed() -> bool:
    return True


def missing() -> bool:
    return False


def test_nothing_named_runs_extractive_even_when_the_local_extra_is_installed():
    # Issue 23: the embedded model runs only when asked for; the reason says how.
    name, why = default_summarizer(AUTO, NO_KEY, local_installed=installed)
    assert name == "extractive"
    assert "OPENROUTER_API_KEY unset" in why and "--summarizer local" in why


def test_nothing_named_and_no_extra_runs_the_extractive_summarizer():
    name, why = default_summarizer(AUTO, NO_KEY, local_installed=missing)
    assert name == "extractive"
    assert why == "no model; no endpoint named, OPENROUTER_API_KEY unset"


def test_the_key_in_the_environment_chooses_the_configured_provider():
    name, why = default_summarizer(AUTO, {"OPENROUTER_API_KEY": "k"}, local_installed=installed)
    assert name == "openai"
    assert "OPENROUTER_API_KEY is set" in why and "https://openrouter.ai/api/v1" in why
    # An empty variable is no key.
    assert default_summarizer(AUTO, {"OPENROUTER_API_KEY": ""},
                              local_installed=installed)[0] == "extractive"


def test_base_url_flags_choose_the_openai_backend():
    config = AUTO.with_endpoint_flags(["http://127.0.0.1:8000/v1"], "m", None, environ={})
    assert default_summarizer(config, NO_KEY, local_installed=installed) == \
        ("openai", "--base-url or summarization.endpoints names an endpoint")


def test_a_base_url_other_than_the_default_chooses_the_openai_backend():
    config = AUTO.replace(base_url="http://user:secret@gpu1:8000/v1")
    name, why = default_summarizer(config, NO_KEY, local_installed=installed)
    assert name == "openai" and "gpu1:8000" in why and "secret" not in why


def test_a_local_model_file_chooses_the_local_backend():
    config = AUTO.replace(local_model="/models/qwen.gguf")
    assert default_summarizer(config, {"OPENROUTER_API_KEY": "k"},
                              local_installed=missing)[0] == "local"


def test_a_config_file_backend_is_kept():
    config = CompressionConfig.from_dict({"summarization": {"backend": "extractive"}})
    assert default_summarizer(config, {"OPENROUTER_API_KEY": "k"},
                              local_installed=installed)[0] == "extractive"


def test_a_hermes_config_keeps_the_openai_backend_without_a_key():
    config = CompressionConfig.from_yaml(ROOT / "configs" / "hermes_compat.yaml")
    assert default_summarizer(config, NO_KEY, local_installed=installed)[0] == "openai"
    assert resolve_summarizer(config, NO_KEY, local_installed=installed) is config


def test_resolve_replaces_auto_only():
    resolved = resolve_summarizer(AUTO, NO_KEY, local_installed=missing)
    assert resolved.summarizer == "extractive"
    assert resolved.replace(summarizer="auto") == AUTO


def test_make_summarizer_settles_auto(counter):
    config = AUTO.with_endpoint_flags(["http://127.0.0.1:9/v1"], "m", None, environ={})
    assert config.summarizer == "auto"
    assert make_summarizer(config, counter).name == "openai"


def test_the_extra_probe_looks_for_every_module_without_importing_it():
    asked: list[str] = []

    def find_spec(name):
        asked.append(name)
        return None if name == BUNDLED_MODEL_PACKAGE else object()

    assert local_extra_installed(find_spec) is False
    assert set(asked) <= {*SERVER_MODULES, BUNDLED_MODEL_PACKAGE}
    assert local_extra_installed(lambda name: object()) is True


def _site_without_the_local_extra(tmp_path: Path) -> Path:
    """A site-packages of symlinks to this one's entries but the 'local' extra's."""
    extra = (*SERVER_MODULES, BUNDLED_MODEL_PACKAGE)
    site = tmp_path / "site"
    site.mkdir()
    for folder in {Path(p) for p in sys.path if p.endswith("site-packages")}:
        for entry in folder.iterdir():
            if not entry.name.lower().startswith(extra) and not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)
    return site


def first_rows(sample_jsonl) -> str:
    """The sample's first three rows: one under the default target, two summarized."""
    return "".join(sample_jsonl.read_text().splitlines(keepends=True)[:3])


@pytest.mark.parametrize("flags", [(), ("--quiet",)])
def test_a_first_run_in_ones_own_folder_uses_the_extractive_summarizer_and_says_so(
        tmp_path, sample_jsonl, flags):
    """No config file, no flag, no key, no 'local' extra: extractive, in one line."""
    work = tmp_path / "mine"
    work.mkdir()
    (work / "data.jsonl").write_text(first_rows(sample_jsonl))
    site = _site_without_the_local_extra(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "OPENROUTER_API_KEY"}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{site}", HERMES_HOME=str(tmp_path / "hermes"))
    proc = subprocess.run([sys.executable, "-S", "-m", "trajectory_compressor", "compress",
                           "data.jsonl", *flags], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("summarizer:")]
    if flags:
        assert notes == []
    else:
        assert notes == [
            "summarizer: extractive (no model; no endpoint named, OPENROUTER_API_KEY unset); "
            "choose another with --summarizer local|openai or --base-url URL"]
    metrics = json.loads((work / "data_compressed_metrics.json").read_text())
    assert metrics["settings"]["summarization"] == {"backend": "extractive"}
    assert metrics["summarization"]["summaries_by_source"]["extractive"] > 0


def test_the_library_without_a_config_runs_extractive_not_openai(tmp_path, sample_jsonl,
                                                                  monkeypatch):
    """`compress_dataset(path)` is the command line without a config file: `auto`."""
    from trajectory_compressor import compress_dataset

    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes"))  # no ~/.hermes/.env key
    monkeypatch.chdir(tmp_path)  # no ./.env key
    out = tmp_path / "out.jsonl"
    src = tmp_path / "in.jsonl"
    src.write_text(first_rows(sample_jsonl))
    result = compress_dataset(str(src), str(out))
    assert result.metrics.trajectories_compressed > 0
    metrics = json.loads((tmp_path / "out_metrics.json").read_text())
    assert metrics["settings"]["summarization"] == {"backend": "extractive"}
