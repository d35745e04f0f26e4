"""`LocalServer`: one llama.cpp OpenAI-compatible server process on loopback, for one run.

``python -m llama_cpp.server`` (from ``llama-cpp-python[server]``) is started on a free
127.0.0.1 port and is ready when ``GET /v1/models`` names it. No server may outlive the
run that started it:

- `stop` ends it (SIGTERM to its process group, SIGKILL after a grace period); the
  summarizer calls it when the run ends, normally, on an error or on Ctrl-C;
- it runs in its own session, so a Ctrl-C in the terminal reaches only us and we stop
  it in order (a half-dead server would turn the rows in flight into failures first);
- on Linux the kernel kills it when our process dies, even by SIGKILL
  (``PR_SET_PDEATHSIG``); an ``atexit`` hook covers an interpreter exit that skipped
  `stop`.

Its output goes to an anonymous temporary file (a pipe nobody reads could fill up and
stall it; a file without a name cannot be left behind); the last lines are quoted when
it fails to start.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import aiohttp

from ..core.errors import ConfigError

HOST = "127.0.0.1"
STARTUP_TIMEOUT = 120.0
STOP_GRACE = 3.0
BIND_ATTEMPTS = 3
POLL_INTERVAL = 0.1
LOG_LINES = 12
LOG_TAIL_BYTES = 16384
PR_SET_PDEATHSIG = 1
# How a llama.cpp build made for another CPU is rebuilt for any x86-64 (docs/summarizers.md).
PORTABLE_REBUILD = ('CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --force-reinstall '
                    '--no-cache-dir llama-cpp-python')


class LocalServerError(ConfigError):
    """The local server could not be started (a bad model file, no free port, too slow)."""


def free_port(host: str = HOST) -> int:
    """A port nobody listens on right now (another process may still take it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when its parent dies.

    Linux only. libc is resolved here, in the parent: after a fork only the call itself
    is safe. The signal fires when the *thread* that forked the child exits, so servers
    are started from the event loop's thread, which outlives the run.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class LocalServer:
    """A ``llama_cpp.server`` child process serving ``model`` on a loopback port."""

    def __init__(
        self,
        model: Path,
        *,
        n_ctx: int,
        threads: int,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self.model = model
        self.n_ctx = n_ctx
        self.threads = threads
        self.startup_timeout = startup_timeout
        # A name only this server answers to: a stranger that grabbed the port between
        # our probe for a free one and the server's bind must not pass for it.
        self.alias = f"trajectory-compressor-{os.getpid()}-{secrets.token_hex(4)}"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._started_at = 0.0

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The server's process id, while it has one."""
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        """Whether the server process is still running."""
        return self.process is not None and self.process.poll() is None

    def exit_status(self) -> int | None:
        """The server's exit status once it has ended (negative: the signal that ended
        it), None while it runs or when it was never started."""
        return self.process.poll() if self.process is not None else None

    def death(self) -> LocalServerError | None:
        """Why the server is dead, with its exit signal or code and its last log lines
        (None while it runs, or after `stop`)."""
        status = self.exit_status()
        if status is None:
            return None
        return self._error(f"died while the run was using it ({how_it_ended(status)})",
                           status)

    def command(self, port: int) -> list[str]:
        """The command line that starts the server on ``port``."""
        return [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model), "--model_alias", self.alias,
            "--host", HOST, "--port", str(port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
            # Penalties look back this far: SmolLM2's loops repeat whole sentences, longer
            # than the default 64 tokens.
            "--last_n_tokens_size", "512",
            # mlock fails without privileges and is only a warning anyway.
            "--use_mlock", "False",
            "--verbose", "False",
        ]

    async def start(self) -> None:
        """Launch the server and wait until it answers; raise `LocalServerError` if not.

        A port taken between choosing it and the server's bind is retried on another.
        """
        for attempt in range(1, BIND_ATTEMPTS + 1):
            self._launch(free_port())
            try:
                await self._wait_ready()
                return
            except LocalServerError:
                lost_port = "address already in use" in self.log_tail().lower()
                self.stop()
                if not lost_port or attempt == BIND_ATTEMPTS:
                    raise
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        """End the server and its process group, and drop its log; safe to repeat."""
        process, self.process = self.process, None
        atexit.unregister(self.stop)
        if process is not None:
            _end_group(process)
        log, self._log = self._log, None
        if log is not None:
            log.close()

    def log_tail(self, lines: int = LOG_LINES) -> str:
        """The last ``lines`` lines the server wrote (while it has a log)."""
        if self._log is None or not hasattr(os, "pread"):
            return ""
        try:
            fd = self._log.fileno()
            size = os.fstat(fd).st_size
            start = max(size - LOG_TAIL_BYTES, 0)
            # pread leaves the offset the server writes at alone.
            data = os.pread(fd, size - start, start)
        except (OSError, ValueError):
            return ""
        text = data.decode("utf-8", errors="replace")
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def _launch(self, port: int) -> None:
        # Closed by `stop`; it lives as long as the server.
        self._log = tempfile.TemporaryFile(prefix="trajectory-compressor-llama-")  # noqa: SIM115
        self.port = port
        # Idle OpenMP threads sleep instead of spinning: on a busy machine the spinning
        # threads take the cores the working ones need (BENCHMARKS.md, "Summary fidelity":
        # about 25% less time a summary under load). A value the user set wins.
        env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self.process = subprocess.Popen(
                self.command(port), stdin=subprocess.DEVNULL, stdout=self._log,
                stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=_die_with_parent(),
            )
        except OSError as exc:
            self.stop()
            raise LocalServerError(f"cannot start the local llama.cpp server: {exc}") from None
        self._started_at = time.monotonic()
        atexit.register(self.stop)

    async def _wait_ready(self) -> None:
        deadline = self._started_at + self.startup_timeout
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                process = self.process
                if process is None or process.poll() is not None:
                    code = process.returncode if process is not None else None
                    ended = how_it_ended(code) if code is not None else "no process"
                    raise self._error(f"exited while starting ({ended})", code)
                if await self._answers(session):
                    return
                if time.monotonic() >= deadline:
                    raise self._error(f"did not answer within {self.startup_timeout:g}s")
                await asyncio.sleep(POLL_INTERVAL)

    async def _answers(self, session: aiohttp.ClientSession) -> bool:
        """Whether the port answers with our alias (so it is ours, and it has bound)."""
        try:
            async with session.get(f"{self.base_url}/models") as response:
                if response.status != 200:
                    return False
                data = await response.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return False
        models = data.get("data") if isinstance(data, dict) else None
        return isinstance(models, list) and any(
            isinstance(m, dict) and m.get("id") == self.alias for m in models
        )

    def _error(self, what: str, status: int | None = None) -> LocalServerError:
        # Traceback underlines (^^^^) only take room from the lines that say something.
        lines = [line for line in self.log_tail(LOG_LINES * 2).splitlines()
                 if line.strip(" ^~")][-LOG_LINES:]
        quoted = "\n".join(f"    {line}" for line in lines) or "    (no output)"
        return LocalServerError(
            f"the local llama.cpp server for {self.model.name} {what}{advice(status)}; "
            f"its last log lines:\n{quoted}"
        )


def how_it_ended(status: int) -> str:
    """``killed by signal SIGILL (illegal instruction)`` or ``exit code 3``, from a
    `subprocess.Popen.returncode`."""
    if status >= 0:
        return f"exit code {status}"
    try:
        sig = signal.Signals(-status)
    except ValueError:
        return f"killed by signal {-status}"
    described = signal.strsignal(sig)
    return f"killed by signal {sig.name}" + (f" ({described.lower()})" if described else "")


def advice(status: int | None) -> str:
    """What to do about a server that ended with ``status``: for SIGILL, the portable
    rebuild of llama.cpp; nothing otherwise."""
    if status is not None and status == -signal.SIGILL:
        return (": the llama.cpp build uses CPU instructions this machine refuses (it was "
                "compiled for another CPU, or for every instruction this CPU advertises); "
                f"rebuild it portably with {PORTABLE_REBUILD}")
    return ""


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it after `STOP_GRACE`, and reap the process."""
    if process.poll() is None:
        _signal_group(process, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_GRACE)
    # Whatever it started goes too, even if the server itself is already gone.
    _signal_group(process, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(STOP_GRACE)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        # No group left (or, in theory, a recycled id): fall back to the process itself.
        with contextlib.suppress(ProcessLookupError):
            if process.poll() is None:
                process.send_signal(sig)
