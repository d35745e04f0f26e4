"""The "also fix" list of issue 36 about files and config: a compressed file named
`.jsonl`, duplicate YAML keys, a base URL with a query string, symbolic link loops."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pytest

from tests.cli_helpers import invoke_cli, read_jsonl, run_cli
from tests.fake_llm_server import FakeLLMServer
from tests.fixtures_runs import long_hermes_row
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError
from trajectory_compressor.summarizers.endpoint import chat_url

SMALL = ("--summarizer", "extractive", "--target-max-tokens", "150",
         "--summary-target-tokens", "10", "--no-cache")


def _lines(n: int = 3) -> bytes:
    return "".join(json.dumps(long_hermes_row(f"r{i}")) + "\n" for i in range(n)).encode()


# A gzip file named .jsonl is read as what it is; other compressions get a hint.

@pytest.mark.parametrize("name", ["in.jsonl", "in.json", "IN.JSONL"])
def test_a_gzip_file_named_jsonl_is_read_and_written_as_plain_json_lines(tmp_path, name):
    src = tmp_path / name
    src.write_bytes(gzip.compress(_lines()))
    out = tmp_path / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:1] == b"{"  # plain text, as its name says
    assert [r["id"] for r in read_jsonl(out)] == ["r0", "r1", "r2"]
    analysis = invoke_cli("analyze", str(src), "--target-max-tokens", "150",
                          "--summary-target-tokens", "10")
    assert analysis.returncode == 0 and "Traceback" not in analysis.stderr


@pytest.mark.parametrize("kind", ["zstd", "xz", "bzip2"])
def test_a_file_compressed_otherwise_is_one_located_reject_with_a_hint(tmp_path, kind):
    src = tmp_path / "in.jsonl"
    if kind == "zstd":  # a zstd frame's magic and header (no zstd module needed)
        src.write_bytes(b"\x28\xb5\x2f\xfd\x24\x05\x29\x00\x00hello")
    elif kind == "xz":
        src.write_bytes(lzma.compress(_lines()))
    else:
        src.write_bytes(bz2.compress(_lines()))
    out = tmp_path / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    [reject] = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert reject["file"] == str(src) and "line" not in reject
    assert f"{kind}-compressed" in reject["error"] and "in.jsonl" in reject["error"]
    assert read_jsonl(out) == []


# YAML: a key given twice is an error naming both lines.

@pytest.mark.parametrize("text, key, lines", [
    ("compression:\n  target_max_tokens: 1000\n  summary_target_tokens: 10\n"
     "  target_max_tokens: 2000\n", "target_max_tokens", (2, 4)),
    ("compression:\n  target_max_tokens: 1000\nprocessing:\n  batch_rows: 8\n"
     "compression:\n  summary_target_tokens: 10\n", "compression", (1, 5)),
])
def test_a_yaml_key_given_twice_names_both_lines(tmp_path, text, key, lines):
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        CompressionConfig.from_yaml(path)
    message = str(caught.value)
    assert f"'{key}' is given twice, on line {lines[0]} and on line {lines[1]}" in message
    result = invoke_cli("compress", str(tmp_path / "x.jsonl"), "--config", str(path))
    assert result.returncode == 2 and f"line {lines[1]}" in result.stderr


def test_the_same_key_in_two_sections_and_an_anchor_merge_are_no_duplicates(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("compression:\n  target_max_tokens: 1000\n  summary_target_tokens: 10\n"
                    "summarization:\n  summary_target_tokens: 10\n", encoding="utf-8")
    try:
        config = CompressionConfig.from_yaml(path)
    except ConfigError as exc:  # an unknown key there is another error, never a duplicate
        assert "twice" not in str(exc)
    else:
        assert config.target_max_tokens == 1000


# A base URL's query string stays after the path.

@pytest.mark.parametrize("base, url", [
    ("https://h.example/v1?api-version=2024-06-01",
     "https://h.example/v1/chat/completions?api-version=2024-06-01"),
    ("https://h.example/openai/deployments/d/?api-version=1&x=y#frag",
     "https://h.example/openai/deployments/d/chat/completions?api-version=1&x=y"),
    ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1/chat/completions"),
])
def test_the_chat_url_keeps_the_query_after_the_path(base, url):
    assert chat_url(base) == url


def test_a_run_through_a_base_url_with_a_query_reaches_the_server(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(_lines(2))
    out = tmp_path / "out.jsonl"
    key, env = "sk-query-4c1e9a7b3d5f0e2a6c8bKEY", "TC_TEST_QUERY_KEY"
    with FakeLLMServer(api_key=key).in_thread() as server:
        result = run_cli("compress", str(src), "-o", str(out), "--base-url",
                         server.url + "?api-version=2024-06-01", "--model", "m",
                         "--api-key-env", env, "--target-max-tokens", "150",
                         "--summary-target-tokens", "10", "--no-cache",
                         # The fake's replies are longer than 10 tokens allow: every summary
                         # falls back, which is not what this test is about.
                         "--allow-fallback", env={env: key})
        requests = server.requests
    assert result.returncode == 0, result.stderr
    # Before, the path was the query's tail (/v1?api-version=...), the server said 404
    # and the run stopped with exit 2 before a single request reached its route.
    assert requests >= 2


# A symbolic link loop is called a loop.

@pytest.mark.parametrize("where", ["input", "folder member", "output", "sidecar",
                                   "report", "html"])
def test_a_symbolic_link_loop_is_called_a_loop(tmp_path, where):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    src = tmp_path / "in.jsonl"
    src.write_bytes(_lines(1))
    out = tmp_path / "out.jsonl"
    if where == "input":
        args = ["compress", str(tmp_path / "a"), "-o", str(out), *SMALL]
    elif where == "folder member":
        folder = tmp_path / "d"
        folder.mkdir()
        (folder / "x.jsonl").symlink_to(tmp_path / "a")
        args = ["compress", str(folder), "-o", str(tmp_path / "o"), *SMALL]
    elif where == "output":
        args = ["compress", str(src), "-o", str(tmp_path / "a"), *SMALL]
    elif where == "sidecar":
        (tmp_path / "out_rejects.jsonl").symlink_to(tmp_path / "a")
        args = ["compress", str(src), "-o", str(out), *SMALL]
    elif where == "report":
        args = ["report", str(tmp_path / "a")]
    else:
        assert invoke_cli("compress", str(src), "-o", str(out), *SMALL).returncode == 0
        args = ["report", str(out), "--html", str(tmp_path / "a")]
    result = invoke_cli(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "symbolic link loop" in result.stderr and "Traceback" not in result.stderr
    assert "internal error" not in result.stderr
