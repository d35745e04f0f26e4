"""A local llama.cpp server that dies is named as dead (issue 36, item 4).

The real thing: on a machine whose CPU advertises instructions its sandbox refuses, the
llama.cpp server died by SIGILL on its first request, and the run said only "the server
closed the connection", wrote fallbacks for every row and exited 0.

Here the CLI runs as a user runs it (``--summarizer local --local-model FILE``), with a
stand-in ``llama_cpp.server`` package first on the path: a real process that answers
``/v1/models`` with the alias it is given, writes a few log lines and then kills itself
with a real signal on its first chat request (or while starting). The modules of the
extra this machine lacks are empty packages, so the backend's checks pass.
"""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.cli_helpers import read_jsonl, run_cli
from tests.test_local_server import processes_with
from trajectory_compressor.summarizers.choice import SERVER_MODULES
from trajectory_compressor.summarizers.local_server import how_it_ended

ROOT = Path(__file__).resolve().parent.parent
REBUILD = ('CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --force-reinstall --no-cache-dir '
           "llama-cpp-python")

# argv as LocalServer.command gives it: --model M --model_alias A --host H --port P ...
# The signal and when to die come from the environment of the test.
STAND_IN = textwrap.dedent("""
    import http.server, json, os, resource, signal, sys
    args = sys.argv[1:]
    opt = dict(zip(args[::2], args[1::2]))
    alias, port = opt["--model_alias"], int(opt["--port"])
    sig = getattr(signal, os.environ["TC_STAND_IN_SIGNAL"])
    when = os.environ["TC_STAND_IN_WHEN"]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from the test
    print("llama_model_loader: loaded meta data from stand-in", flush=True)
    print("system_info: n_threads = 1 | AVX512 = 1 | AMX_INT8 = 1", flush=True)
    if when == "start":
        os.kill(os.getpid(), sig)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": alias}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            print("llama_decode: first chat request, entering ggml_graph_compute", flush=True)
            os.kill(os.getpid(), sig)

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
""")


@pytest.fixture
def stand_in_site(tmp_path: Path) -> Path:
    """A folder holding the stand-in ``llama_cpp.server`` and empty packages for the
    extra's other modules this machine lacks."""
    site = tmp_path / "stand_in_site"
    server = site / "llama_cpp" / "server"
    server.mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("")
    (server / "__init__.py").write_text("")
    (server / "__main__.py").write_text(STAND_IN)
    for name in SERVER_MODULES:
        if name != "llama_cpp" and importlib.util.find_spec(name) is None:
            (site / name).mkdir()
            (site / name / "__init__.py").write_text("")
    return site


def rows(folder: Path, n: int = 3) -> Path:
    """``n`` rows over a 300-token target: each needs one summary."""
    lines = []
    for i in range(n):
        turns = [{"from": "system", "value": "You are a coding agent."},
                 {"from": "human", "value": f"Fix bug {i} in the parser."}]
        for k in range(8):
            turns.append({"from": "gpt", "value": f"Step {k}: I run the tests again. " * 12})
            turns.append({"from": "tool", "value": f"FAILED test_{k}.py line {k} " * 12})
        turns.append({"from": "gpt", "value": "Done."})
        lines.append(json.dumps({"id": f"r{i}", "conversations": turns}))
    source = folder / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return source


def run_local(site: Path, folder: Path, signal_name: str, when: str, *args: str):
    model = folder / "stand-in.gguf"
    model.write_bytes(b"GGUF stand-in")
    cfg = folder / "run.yaml"
    cfg.write_text("compression:\n  target_max_tokens: 300\n  summary_target_tokens: 60\n"
                   "summarization:\n  retry_delay: 0.01\n  request_timeout: 20\n")
    marker = f"tc-test-{os.getpid()}-{signal_name}-{when}"
    proc = run_cli("compress", str(rows(folder)), "-o", str(folder / "out.jsonl"),
                   "--config", str(cfg), "--summarizer", "local", "--local-model", str(model),
                   *args,
                   env={"PYTHONPATH": f"{ROOT}{os.pathsep}{site}",
                        "TC_STAND_IN_SIGNAL": signal_name, "TC_STAND_IN_WHEN": when,
                        "TC_TEST_MARKER": marker})
    return proc, marker


def test_a_server_killed_by_sigill_on_its_first_request_stops_the_run(tmp_path, stand_in_site):
    proc, marker = run_local(stand_in_site, tmp_path, "SIGILL", "request")
    assert proc.returncode == 2, proc.stderr
    error = proc.stderr[proc.stderr.index("error: "):]
    assert error.startswith(
        "error: the local llama.cpp server for stand-in.gguf died while the run was using "
        "it (killed by signal SIGILL (illegal instruction)): the llama.cpp build uses CPU "
        "instructions this machine refuses")
    assert f"rebuild it portably with {REBUILD}; its last log lines:\n" in error
    # Its log, quoted: the last line is the one it wrote before dying.
    assert error.rstrip().endswith(
        "    system_info: n_threads = 1 | AVX512 = 1 | AMX_INT8 = 1\n"
        "    llama_decode: first chat request, entering ggml_graph_compute")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()  # stopped: nothing committed
    assert processes_with(marker) == []


def test_another_signal_is_named_without_the_rebuild_advice(tmp_path, stand_in_site):
    proc, marker = run_local(stand_in_site, tmp_path, "SIGSEGV", "request")
    assert proc.returncode == 2, proc.stderr
    assert ("error: the local llama.cpp server for stand-in.gguf died while the run was "
            "using it (killed by signal SIGSEGV (segmentation fault)); its last log "
            "lines:\n") in proc.stderr
    assert "GGML_NATIVE" not in proc.stderr
    assert processes_with(marker) == []


def test_sigill_while_starting_gives_the_rebuild_advice_too(tmp_path, stand_in_site):
    proc, marker = run_local(stand_in_site, tmp_path, "SIGILL", "start")
    assert proc.returncode == 2, proc.stderr
    assert processes_with(marker) == []
    assert ("error: the local llama.cpp server for stand-in.gguf exited while starting "
            "(killed by signal SIGILL (illegal instruction)): the llama.cpp build uses CPU "
            f"instructions this machine refuses (it was compiled for another CPU, or for "
            f"every instruction this CPU advertises); rebuild it portably with {REBUILD}; "
            "its last log lines:\n") in proc.stderr
    assert "    system_info: n_threads = 1 | AVX512 = 1 | AMX_INT8 = 1" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_with_allow_fallback_the_death_is_said_once_and_rows_fall_back(tmp_path,
                                                                        stand_in_site):
    proc, marker = run_local(stand_in_site, tmp_path, "SIGILL", "request", "--allow-fallback",
                             "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("killed by signal SIGILL") == 1, proc.stderr
    assert "--allow-fallback: every row left gets the extractive fallback" in proc.stderr
    out = read_jsonl(tmp_path / "out.jsonl")
    assert [r["id"] for r in out] == ["r0", "r1", "r2"]
    assert [r["compression_metrics"]["summary_source"] for r in out] == ["fallback"] * 3
    assert processes_with(marker) == []


def test_how_it_ended_reads_a_returncode():
    assert how_it_ended(-4) == "killed by signal SIGILL (illegal instruction)"
    assert how_it_ended(-9) == "killed by signal SIGKILL (killed)"
    assert how_it_ended(1) == "exit code 1"
    assert how_it_ended(0) == "exit code 0"
    assert how_it_ended(-200) == "killed by signal 200"
