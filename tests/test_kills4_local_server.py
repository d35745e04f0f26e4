"""`LocalServer`'s promises about the process it owns, with stand-in server programs.

`test_local_server.py` covers readiness, a lost port, a stranger on the port, a timeout,
a cancelled start and death with our process. These add what its module docstring and
`stop` promise and nothing there checked: a server is asked to end (SIGTERM) before it
is killed, one that ignores the request is killed after the grace period and reaped,
whatever it started goes too, nothing is left open or registered after `stop`, the
error quotes the last 12 lines of the log read from its last 16 KiB, and the bind is
tried three times.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from tests.test_local_server import gone
from trajectory_compressor.summarizers import local_server
from trajectory_compressor.summarizers.local_server import LocalServer, LocalServerError

# argv: ALIAS PORT MODE FOLDER. Every mode but "exit" serves /v1/models under ALIAS.
PROGRAM = textwrap.dedent("""
    import http.server, json, os, signal, subprocess, sys, time
    alias, port, mode, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(os.path.join(folder, "launches"), "a") as f:
        f.write(mode + "\\n")
    if mode in ("exit", "underlined"):
        for i in range(1, 31):
            print(f"line {i}", flush=True)
        if mode == "underlined":
            for i in range(20):
                print("    ^^^^^^^^" if i % 2 else "  ~~~^^^", flush=True)
        sys.exit(5)
    started = time.monotonic()
    if mode == "taken":
        print("bind: address already in use", flush=True)
        sys.exit(3)
    if mode == "long":
        print("x" * 20000, flush=True)
    if mode == "graceful":
        def ended(*_):
            open(os.path.join(folder, "asked to end"), "w").close()
            os._exit(0)
        signal.signal(signal.SIGTERM, ended)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "spawner":
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "time.sleep(600)"])
        with open(os.path.join(folder, "child"), "w") as f:
            f.write(str(child.pid))

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": alias}]}).encode()
            status = 200
            if mode == "warming":  # our alias, but not ready for the first second
                with open(os.path.join(folder, "polls"), "a") as f:
                    f.write("poll\\n")
                if time.monotonic() - started < 1.0:
                    status = 503
                elif not os.path.exists(os.path.join(folder, "warm")):
                    open(os.path.join(folder, "warm"), "w").close()
                    print("warm", flush=True)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    print("ready", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Models).serve_forever()
""")


class Program(LocalServer):
    def __init__(self, folder: Path, mode: str, startup_timeout: float = 20) -> None:
        super().__init__(Path("stand-in.gguf"), n_ctx=512, threads=1,
                         startup_timeout=startup_timeout)
        self.folder, self.mode = folder, mode

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", PROGRAM, self.alias, str(port), self.mode,
                str(self.folder)]


def started(tmp_path: Path, mode: str) -> Program:
    server = Program(tmp_path, mode)
    asyncio.run(server.start())
    return server


def test_a_server_is_asked_to_end_before_it_is_killed(tmp_path):
    server = started(tmp_path, "graceful")
    process = server.process
    assert process is not None
    server.stop()
    assert (tmp_path / "asked to end").exists()
    assert process.returncode == 0  # it ended itself, on SIGTERM


def test_a_server_ignoring_the_request_is_killed_after_the_grace_and_reaped(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(local_server, "STOP_GRACE", 0.5)
    server = started(tmp_path, "stubborn")
    process = server.process
    assert process is not None
    begun = time.monotonic()
    server.stop()  # no TimeoutExpired escapes
    assert process.returncode == -signal.SIGKILL  # reaped: its status is known
    assert time.monotonic() - begun >= 0.5
    assert server.process is None


def test_what_the_server_started_goes_with_it(tmp_path, monkeypatch):
    monkeypatch.setattr(local_server, "STOP_GRACE", 0.5)
    server = started(tmp_path, "spawner")
    child = int((tmp_path / "child").read_text())
    assert not gone(child, within=0.2)
    server.stop()
    assert gone(child)


def test_stop_leaves_no_file_open_and_no_exit_hook(tmp_path):
    """While it runs, the interpreter's exit hooks hold the server (an exit that skipped
    `stop` still stops it); `stop` takes it out of them and closes its log."""
    import gc
    import weakref

    server = started(tmp_path, "serve")
    held = weakref.ref(server)
    del server
    gc.collect()
    server = held()
    assert server is not None and server.alive()  # kept by its exit hook
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        server.stop()  # closes its log (a file dropped unclosed says so)
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    server.stop()  # and again: nothing to do
    del server
    gc.collect()
    assert held() is None  # nothing holds it any more


def test_a_server_never_started_has_no_port_process_or_log():
    server = LocalServer(Path("m.gguf"), n_ctx=512, threads=1)
    assert server.port == 0
    assert server.pid is None and not server.alive()
    assert server.log_tail() == ""
    server.stop()  # safe before a start


def test_the_error_quotes_the_last_twelve_lines(tmp_path):
    server = Program(tmp_path, "exit")
    with pytest.raises(LocalServerError) as caught:
        asyncio.run(server.start())
    message = str(caught.value)
    quoted = message.split("its last log lines:\n", 1)[1].splitlines()
    assert quoted == [f"    line {i}" for i in range(19, 31)]
    assert "(exit code 5)" in message


def test_the_log_is_read_from_its_last_16_kib(tmp_path):
    server = started(tmp_path, "long")
    try:
        tail = server.log_tail(3).splitlines()
        # the log is 20,000 x's, "\n", "ready\n": its last 16,384 bytes hold 16,377 x's
        assert tail == ["x" * (16384 - len("\nready\n")), "ready"]
    finally:
        server.stop()


def test_a_port_lost_every_time_is_tried_three_times(tmp_path):
    server = Program(tmp_path, "taken")
    with pytest.raises(LocalServerError, match="address already in use"):
        asyncio.run(server.start())
    assert (tmp_path / "launches").read_text().splitlines() == ["taken"] * 3
    assert server.process is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_a_child_whose_parent_died_before_the_death_signal_was_set_exits():
    """The race `_die_with_parent` closes: when the child runs its ``preexec`` its parent
    (the process that built the function) may be gone already; then it exits at once.
    Here the function is built in this process and run in a grandchild, whose parent is
    not this process: it must exit 1. Run in a child of this process, it must go on."""
    preexec = local_server._die_with_parent()
    assert preexec is not None

    def status_of_running_it(in_grandchild: bool) -> int:
        pid = os.fork()
        if pid == 0:  # the child
            try:
                if in_grandchild:
                    inner = os.fork()
                    if inner == 0:
                        preexec()
                        os._exit(0)
                    os._exit(os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1]))
                preexec()
                os._exit(0)
            finally:
                os._exit(7)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    assert status_of_running_it(in_grandchild=False) == 0
    assert status_of_running_it(in_grandchild=True) == 1


def test_a_server_that_cannot_be_launched_is_one_error(tmp_path):
    class Missing(Program):
        def command(self, port: int) -> list[str]:
            return [str(tmp_path / "no-such-python"), "-m", "llama_cpp.server"]

    server = Missing(tmp_path, "serve")
    with pytest.raises(LocalServerError) as caught:
        asyncio.run(server.start())
    assert str(caught.value).startswith("cannot start the local llama.cpp server: ")
    assert "no-such-python" in str(caught.value)
    assert server.process is None and server.log_tail() == ""
    assert server._log is None  # its log is closed and dropped


def test_readiness_waits_for_a_200_and_polls_every_tenth_of_a_second(tmp_path):
    """A server that names our alias but answers 503 (still loading) is not ready; the
    port is asked about every `POLL_INTERVAL` seconds, not in a busy loop."""
    server = started(tmp_path, "warming")
    try:
        assert "warm" in server.log_tail().splitlines()  # ready only once it answered 200
        polls = len((tmp_path / "polls").read_text().splitlines())
        # about 1 s of 503s at one poll each 0.1 s (each poll waits for its answer too)
        assert 2 <= polls <= 15, polls
    finally:
        server.stop()


def test_underlines_do_not_take_the_place_of_quoted_lines(tmp_path):
    """Of the last 24 lines of the log (twice the 12 quoted), the traceback underlines are
    dropped; the lines that say something among them are quoted."""
    server = Program(tmp_path, "underlined")
    with pytest.raises(LocalServerError) as caught:
        asyncio.run(server.start())
    quoted = str(caught.value).split("its last log lines:\n", 1)[1].splitlines()
    assert quoted == [f"    line {i}" for i in range(27, 31)]
