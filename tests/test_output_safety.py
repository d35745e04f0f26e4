"""Never destroy a file, never lose output (issue 13 item 1, issue 15 item 2, SPEC §7/§12).

Through the real CLI (in this process; as a subprocess where a mistake would block or
kill the process), on real files: every clash between what a run writes and its
inputs is refused before a byte is written (exit 2, naming both paths); an existing
output is replaced only by a rerun of the run that wrote it, or with --overwrite; exit
codes follow SPEC §7. The rows are small and under the target, so the expected output
rows are the input rows themselves.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli_helpers import ROOT, invoke_cli, read_jsonl, run_cli

FAST = ("--summarizer", "extractive", "--quiet", "--target-max-tokens", "3000",
        "--summary-target-tokens", "200")


def _rows(tag: str, n: int = 3) -> list[dict]:
    return [{"id": f"{tag}-{i}", "conversations": [
        {"from": "human", "value": f"question {i} from {tag}"},
        {"from": "gpt", "value": f"answer {i}"}]} for i in range(n)]


def _write(path: Path, rows: list[dict]) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.write_bytes(data)
    return data


# clashes between what a run writes and its inputs


def test_glob_over_two_folders_with_output_into_one_of_them_is_refused(tmp_path):
    a, b = tmp_path / "a" / "x.jsonl", tmp_path / "b" / "z.jsonl"
    _write(a, _rows("x"))
    z_bytes = _write(b, _rows("z"))
    proc = invoke_cli("compress", str(tmp_path / "*" / "*.jsonl"), "-o", str(tmp_path / "b"),
                   *FAST)
    assert proc.returncode == 2, proc.stderr
    assert f"would overwrite the input {b}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert b.read_bytes() == z_bytes
    assert sorted(os.listdir(tmp_path / "b")) == ["z.jsonl"]
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]  # no sidecar either


def test_an_input_named_like_a_side_file_is_refused(tmp_path):
    src = tmp_path / "data_rejects.jsonl"
    data = _write(src, _rows("r"))
    proc = invoke_cli("compress", str(src), "-o", str(tmp_path / "data.jsonl"), *FAST)
    assert proc.returncode == 2, proc.stderr
    assert f"{src} (the rejects file) would overwrite the input {src}" in proc.stderr
    assert src.read_bytes() == data
    assert sorted(os.listdir(tmp_path)) == ["data_rejects.jsonl"]


def test_a_cache_path_equal_to_an_input_is_refused(tmp_path):
    src = tmp_path / "in.jsonl"
    data = _write(src, _rows("c"))
    # An LLM backend (so the cache is used); the endpoint is never contacted.
    proc = invoke_cli("compress", str(src), "--cache-path", str(src), "--summarizer", "openai",
                   "--base-url", "http://127.0.0.1:9/v1", "--quiet")
    assert proc.returncode == 2, proc.stderr
    assert f"{src} (the summary cache) would overwrite the input {src}" in proc.stderr
    assert src.read_bytes() == data
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_an_output_that_is_a_symlink_to_the_input_is_refused(tmp_path):
    src = tmp_path / "in.jsonl"
    data = _write(src, _rows("s"))
    link = tmp_path / "out.jsonl"
    link.symlink_to(src)
    proc = invoke_cli("compress", str(src), "-o", str(link), *FAST)
    assert proc.returncode == 2, proc.stderr
    assert f"{link} (the output of {src}) would overwrite the input {src}" in proc.stderr
    assert "through a symbolic link" in proc.stderr
    assert src.read_bytes() == data and link.is_symlink()


def test_an_output_that_is_a_hard_link_to_the_input_is_refused(tmp_path):
    src = tmp_path / "in.jsonl"
    data = _write(src, _rows("h"))
    twin = tmp_path / "twin.jsonl"
    os.link(src, twin)
    proc = invoke_cli("compress", str(src), "-o", str(twin), *FAST)
    assert proc.returncode == 2, proc.stderr
    assert f"would overwrite the input {src} (the same file, through a hard link)" \
        in proc.stderr
    assert src.read_bytes() == data and os.stat(src).st_nlink == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can replace /dev/null")
def test_dev_null_as_output_is_refused_and_stays_a_device(tmp_path):
    src = tmp_path / "in.jsonl"
    _write(src, _rows("d"))
    proc = invoke_cli("compress", str(src), "-o", "/dev/null", *FAST)
    assert proc.returncode == 2, proc.stderr
    assert "/dev/null (the output of" in proc.stderr and "character device" in proc.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not Path("/dev/null_metrics.json").exists()


def test_a_fifo_as_output_is_refused_without_opening_it(tmp_path):
    src = tmp_path / "in.jsonl"
    _write(src, _rows("f"))
    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    proc = run_cli("compress", str(src), "-o", str(fifo), *FAST, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"{fifo} (the output of {src}) is a FIFO" in proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_analyze_json_onto_its_input_is_refused(tmp_path):
    src = tmp_path / "in.jsonl"
    data = _write(src, _rows("j"))
    proc = invoke_cli("analyze", str(src), "--json", str(src), "--summarizer", "extractive")
    assert proc.returncode == 2, proc.stderr
    assert f"{src} (the --json file) would overwrite the input {src}" in proc.stderr
    assert src.read_bytes() == data


# never lose output


def test_json_and_jsonl_inputs_of_one_stem_never_meet(tmp_path):
    """One sidecar rule for every container (issue 40 item 5): `data_compressed.json` and
    `data_compressed.jsonl` would share `data_compressed_metrics.json`, so the second run
    refuses rather than replace the first's sidecars, and -o keeps both."""
    jsonl_rows, json_rows = _rows("lines"), _rows("json", 2)
    _write(tmp_path / "data.jsonl", jsonl_rows)
    _write(tmp_path / "data.json", json_rows)
    first = invoke_cli("compress", str(tmp_path / "data.jsonl"), *FAST)
    second = invoke_cli("compress", str(tmp_path / "data.json"), *FAST)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 2, second.stderr
    assert "belongs to the run over the input" in second.stderr and "-o" in second.stderr
    assert not (tmp_path / "data_compressed.json").exists()
    third = invoke_cli("compress", str(tmp_path / "data.json"), "-o",
                       str(tmp_path / "data_json_compressed.json"), *FAST)
    assert third.returncode == 0, third.stderr
    assert read_jsonl(tmp_path / "data_compressed.jsonl") == jsonl_rows
    assert json.loads((tmp_path / "data_json_compressed.json").read_text()) == json_rows
    first_metrics = json.loads((tmp_path / "data_compressed_metrics.json").read_text())
    second_metrics = json.loads((tmp_path / "data_json_compressed_metrics.json").read_text())
    assert first_metrics["summary"]["total_trajectories"] == 3
    assert second_metrics["summary"]["total_trajectories"] == 2
    assert first_metrics["run"]["inputs"] == [str((tmp_path / "data.jsonl").resolve())]
    assert second_metrics["run"]["inputs"] == [str((tmp_path / "data.json").resolve())]


def test_a_rerun_of_the_same_command_replaces_its_output_silently(tmp_path):
    src = tmp_path / "in.jsonl"
    rows = _rows("again")
    _write(src, rows)
    out = tmp_path / "in_compressed.jsonl"
    assert invoke_cli("compress", str(src), *FAST).returncode == 0
    with out.open("a") as f:
        f.write('{"stale": true}\n')  # proves the rerun really wrote the file anew
    proc = invoke_cli("compress", str(src), *FAST)
    assert proc.returncode == 0, proc.stderr
    assert "error" not in proc.stderr
    assert read_jsonl(out) == rows


def test_another_input_into_an_existing_output_needs_overwrite(tmp_path):
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    _write(one, _rows("one"))
    _write(two, _rows("two", 4))
    out = tmp_path / "out.jsonl"
    assert invoke_cli("compress", str(one), "-o", str(out), *FAST).returncode == 0
    before = out.read_bytes()
    proc = invoke_cli("compress", str(two), "-o", str(out), *FAST)
    assert proc.returncode == 2, proc.stderr
    assert (f"{out} holds the output of the input {one.resolve()}; this run would replace "
            f"it with the output of {two.resolve()}") in proc.stderr
    assert "--overwrite" in proc.stderr
    assert out.read_bytes() == before
    proc = invoke_cli("compress", str(two), "-o", str(out), *FAST, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert read_jsonl(out) == _rows("two", 4)


def test_other_settings_into_an_existing_output_need_overwrite(tmp_path):
    src = tmp_path / "in.jsonl"
    _write(src, _rows("set"))
    assert invoke_cli("compress", str(src), *FAST).returncode == 0
    other = [a if a != "3000" else "4000" for a in FAST]
    proc = invoke_cli("compress", str(src), *other)
    assert proc.returncode == 2, proc.stderr
    assert "with other settings (compression.target_max_tokens was 3000, now 4000)" \
        in proc.stderr
    assert invoke_cli("compress", str(src), *other, "--overwrite").returncode == 0


def test_an_output_without_a_metrics_file_is_not_replaced(tmp_path):
    src = tmp_path / "in.jsonl"
    _write(src, _rows("m"))
    mine = tmp_path / "in_compressed.jsonl"
    mine.write_text("my own file\n")
    proc = invoke_cli("compress", str(src), *FAST)
    assert proc.returncode == 2, proc.stderr
    assert f"{mine} already exists, and there is no metrics file" in proc.stderr
    assert mine.read_text() == "my own file\n"


# configuration and I/O errors: one sentence, the right exit code


def test_an_output_suffix_with_a_slash_is_a_config_error(tmp_path):
    src = tmp_path / "in.jsonl"
    _write(src, _rows("sl"))
    config = tmp_path / "c.yaml"
    config.write_text('output:\n  output_suffix: "/../escaped"\n')
    proc = invoke_cli("compress", str(src), "--config", str(config), *FAST)
    assert proc.returncode == 2, proc.stderr
    assert "output.output_suffix" in proc.stderr and "cannot contain '/'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_empty_output_suffix_is_a_config_error(tmp_path):
    src = tmp_path / "in.jsonl"
    data = _write(src, _rows("em"))
    config = tmp_path / "c.yaml"
    config.write_text('output:\n  output_suffix: ""\n')
    proc = invoke_cli("compress", str(src), "--config", str(config), *FAST)
    assert proc.returncode == 2, proc.stderr
    assert "output.output_suffix is empty" in proc.stderr
    assert src.read_bytes() == data


def test_a_binary_config_file_is_a_config_error(tmp_path):
    src = tmp_path / "in.jsonl"
    _write(src, _rows("bin"))
    config = tmp_path / "c.yaml"
    config.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    proc = invoke_cli("compress", str(src), "--config", str(config), *FAST)
    assert proc.returncode == 2, proc.stderr
    assert f"config file {config} is not a YAML text file (byte 0x89 at offset 0" \
        in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_output_under_a_regular_file_says_it_cannot_write(tmp_path):
    src = tmp_path / "in.jsonl"
    _write(src, _rows("nd"))
    blocker = tmp_path / "plain"
    blocker.write_text("a file, not a folder\n")
    out = blocker / "out.jsonl"
    proc = invoke_cli("compress", str(src), "-o", str(out), *FAST)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot write {out}: {blocker} is not a folder" in proc.stderr
    assert "resume" not in proc.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_unwritable_output_folder_says_permission_denied(tmp_path):
    src = tmp_path / "in.jsonl"
    _write(src, _rows("ro"))
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        proc = invoke_cli("compress", str(src), "-o", str(locked / "out.jsonl"), *FAST)
    finally:
        locked.chmod(0o700)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot write {locked / 'out.jsonl'}: permission denied" in proc.stderr
    assert "resume" not in proc.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE behaviour")
def test_an_io_failure_mid_run_exits_4_in_one_sentence(tmp_path):
    import resource

    src = tmp_path / "big.jsonl"
    rows = [{"id": i, "conversations": [{"from": "human", "value": "word " * 200},
                                        {"from": "gpt", "value": "ok"}]} for i in range(300)]
    _write(src, rows)  # about 300 KB; a file may grow to 64 KB only

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "trajectory_compressor", "compress", str(src), "-o", str(out),
         *FAST], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300, preexec_fn=limit_file_size)
    assert proc.returncode == 4, proc.stderr
    assert "error: I/O error" in proc.stderr and "File too large" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_an_unexpected_exception_exits_4_without_a_traceback(monkeypatch, tmp_path):
    from trajectory_compressor.app import cli, commands

    def boom(*args, **kwargs):
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr(commands, "compress_input", boom)
    src = tmp_path / "in.jsonl"
    _write(src, _rows("x"))
    result = CliRunner().invoke(cli.app, ["compress", str(src), *FAST])
    assert result.exit_code == 4
    assert ("internal error (RuntimeError: something nobody foresaw); the run stopped; "
            "--debug shows the traceback") in result.output
    assert "Traceback" not in result.output


def test_help_lists_the_exit_codes():
    proc = invoke_cli("--help")
    assert proc.returncode == 0
    for line in ("0    done", "2    usage or configuration error",
                 "4    the run stopped on an I/O or internal error"):
        assert line in proc.stdout
