"""Which summarizer a run uses when nothing names one (``summarization.backend: auto``).

`auto` is what the command line runs with when no config file is used, and what the
shipped ``configs/default.yaml`` says: an LLM endpoint only when one is named (or its key
is in the environment), the embedded model only when asked for (``--summarizer local``
or ``--local-model``), else the extractive summarizer, whether or not the ``local`` extra
is installed: a tiny model's summaries state facts the row does not (issue 23), and the
extractive ones, taken from the row, cannot. A config in the Hermes schema names no
backend and means `openai`, as in Hermes (`CompressionConfig`'s default).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

from ..core.config import BUNDLED_LOCAL_MODEL, DEFAULT_BASE_URL, CompressionConfig
from ..core.local_models import DEFAULT_LOCAL_MODEL, LOCAL_MODELS
from ..core.redact import strip_url_credentials
from .dotenv import key_environ

AUTO = "auto"
# What `python -m llama_cpp.server` imports (the ``[server]`` extra of llama-cpp-python),
# and the package that ships the default GGUF: together, the ``local`` extra.
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context",
                  "pydantic_settings")
BUNDLED_MODEL_PACKAGE = LOCAL_MODELS[DEFAULT_LOCAL_MODEL].module

FindSpec = Callable[[str], Any]


def local_extra_installed(find_spec: FindSpec = importlib.util.find_spec) -> bool:
    """Whether the ``local`` extra can be imported (checked without importing it)."""
    try:
        return all(find_spec(name) is not None
                   for name in (*SERVER_MODULES, BUNDLED_MODEL_PACKAGE))
    except (ImportError, ValueError):  # a half-installed package: not usable either
        return False


def default_summarizer(
    config: CompressionConfig,
    environ: Mapping[str, str] | None = None,
    *,
    local_installed: Callable[[], bool] = local_extra_installed,
) -> tuple[str, str]:
    """The backend ``config`` runs with, and why (a clause for a person to read).

    ``summarization.backend`` (or ``--summarizer``) decides unless it is `auto`. For
    `auto`: `local` when a model is named (``--local-model``); `openai` when an
    endpoint is named (``--base-url``, ``summarization.endpoints``, a
    ``summarization.base_url`` other than the default) or the key variable is set in
    ``environ`` (default: the environment, then the ``.env`` files the `openai` backend
    reads keys from); else `extractive`. ``local_installed`` only changes the reason:
    with the ``local`` extra installed it says how to use it.
    """
    if config.summarizer != AUTO:
        return config.summarizer, "set by --summarizer or summarization.backend"
    env = key_environ() if environ is None else environ
    key_env = config.api_key_env
    if config.local_model:
        return "local", "--local-model names a model"
    if config.endpoints:
        return "openai", "--base-url or summarization.endpoints names an endpoint"
    if config.base_url.rstrip("/") != DEFAULT_BASE_URL:
        return "openai", f"summarization.base_url is {strip_url_credentials(config.base_url)}"
    if key_env and env.get(key_env):
        return "openai", f"{config.summarization_model} at {DEFAULT_BASE_URL}; {key_env} is set"
    unset = f"{key_env} unset" if key_env else "no key variable"
    if local_installed():
        return "extractive", (f"no endpoint named, {unset}; the 'local' extra is installed "
                              f"but {BUNDLED_LOCAL_MODEL} runs only when asked for: "
                              "--summarizer local")
    return "extractive", f"no model; no endpoint named, {unset}"


def resolve_summarizer(
    config: CompressionConfig,
    environ: Mapping[str, str] | None = None,
    *,
    local_installed: Callable[[], bool] = local_extra_installed,
) -> CompressionConfig:
    """``config`` with `auto` replaced by the backend `default_summarizer` picks."""
    if config.summarizer != AUTO:
        return config
    name, _ = default_summarizer(config, environ, local_installed=local_installed)
    return config.replace(summarizer=name)
