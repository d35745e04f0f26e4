"""Hostile cases, round 2 (issue 24): paths a run writes, secrets, the terminal, config,
resume, checkpoints, batch results. One test per class of failure, each on a variant of the
case the trial found (not the case itself), run through the real CLI where a user would
meet it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.cli_helpers import invoke_cli, run_cli
from tests.fixtures_runs import HAND_CONFIG, HAND_ROWS, write_jsonl

HAND = ("--target-max-tokens", str(HAND_CONFIG["target_max_tokens"]),
        "--summary-target-tokens", str(HAND_CONFIG["summary_target_tokens"]),
        "--summarizer", "extractive")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def compressed(tmp_path: Path, rows: list | None = None) -> tuple[Path, Path]:
    """A finished run over ``rows`` (the hand rows): its input and output."""
    src = write_jsonl(tmp_path / "in.jsonl", rows if rows is not None else HAND_ROWS)
    out = tmp_path / "out" / "in_c.jsonl"
    out.parent.mkdir()
    proc = run_cli("compress", str(src), "-o", str(out), *HAND, "--quiet")
    assert proc.returncode == 0, proc.stderr
    return src, out


# 5. Every path a run writes is checked against every input (SPEC §12)

def test_batch_export_never_replaces_an_input_named_like_its_files(tmp_path):
    # The trial's input was requests-00001.jsonl; here the second file's name, and a
    # JSON-array input called manifest.json, each alone in the batch folder.
    folder = tmp_path / "b"
    folder.mkdir()
    for name in ("requests-00002.jsonl", "manifest.json"):
        src = folder / name
        if name.endswith(".json"):
            src.write_text(json.dumps(HAND_ROWS), encoding="utf-8")
        else:
            write_jsonl(src, HAND_ROWS)
        before = snapshot(tmp_path)
        proc = run_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"), *HAND,
                       "--summarizer", "batch", "--model", "m", "--batch-dir", str(folder))
        assert proc.returncode == 2, proc.stderr
        assert f"would overwrite the input {src}" in proc.stderr
        assert "--batch-dir" in proc.stderr and "Traceback" not in proc.stderr
        assert snapshot(tmp_path) == before
        src.unlink()


def test_report_html_never_replaces_the_runs_own_input(tmp_path):
    src, out = compressed(tmp_path)
    # The input by another spelling: a relative path with a detour, and a link to it.
    link = tmp_path / "page.html"
    link.symlink_to(src)
    before = snapshot(tmp_path)
    for page in (tmp_path / "out" / ".." / "in.jsonl", link):
        proc = run_cli("report", str(out), "--html", str(page))
        assert proc.returncode == 2, proc.stderr
        assert "would overwrite the input" in proc.stderr and str(src.name) in proc.stderr
        assert snapshot(tmp_path) == before
    # Anywhere else the page is written.
    proc = run_cli("report", str(out), "--html", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.html").read_text(encoding="utf-8").startswith("<!")
    assert src.read_bytes() == before["in.jsonl"]


# 10. Every string from data printed to a terminal is inert

# What a terminal acts on: ESC (OSC, CSI), BEL, C1 CSI, bidi overrides and isolates.
LIVE = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\r")


def assert_inert(text: str) -> None:
    assert not [ch for ch in LIVE if ch in text], repr(text)


def test_report_show_prints_a_hostile_row_id_inert(tmp_path):
    # OSC 52 ended by ST (not BEL, as in the trial), a C1 CSI, a right-to-left override.
    hostile = "r1\x1b]52;c;cm0gLXJmIH4=\x1b\\\u202e\x9b2J"
    row = {**HAND_ROWS[0], "id": hostile}
    _, out = compressed(tmp_path, [row, *HAND_ROWS[1:]])
    for key in ("0", hostile):
        proc = run_cli("report", str(out), "--show", key)
        assert proc.returncode == 0, proc.stderr
        assert_inert(proc.stdout + proc.stderr)
        # Still readable: every character is there, spelled out.
        assert "r1\\u001b]52;c;cm0gLXJmIH4=\\u001b\\\\u202e\\u009b2J" in proc.stdout
    proc = run_cli("report", str(out), "--show", "0", "--json")
    assert_inert(proc.stdout)
    assert json.loads(proc.stdout)["id"] == hostile  # the JSON keeps the exact value


def test_compress_summary_and_rejects_list_print_a_hostile_file_name_inert(tmp_path):
    # The trial's escape was in a row id; here also in the input's file name, which the
    # summary prints (the default output is named after it) and every reject's location
    # holds, and in a rejected row's id and role (its reason quotes the role).
    name = "d\x1b]52;c;QUJD\x07\u2066x\r.jsonl"
    bad = {"id": "\x1b]52;c;SUQ=\x07", "conversations": [
        {"from": "\x1b]52;c;Uk9MRQ==\x1b\\\u202e", "value": "x"}]}
    src = write_jsonl(tmp_path / name, [*HAND_ROWS[:2], bad], extra_lines=("{not json",))
    proc = run_cli("compress", str(src), *HAND)
    assert proc.returncode == 1, proc.stderr  # 1: rows were rejected
    assert "Rejected rows: 2" in proc.stdout
    assert_inert(proc.stdout + proc.stderr)
    assert "\\u2066x\\u000d_compressed.jsonl" in proc.stdout
    # Errors quoting a path are inert too.
    proc = run_cli("report", str(tmp_path / ("gone\x1b[2J\u202e.jsonl")))
    assert proc.returncode == 2 and "gone\\u001b[2J\\u202e.jsonl" in proc.stderr
    assert_inert(proc.stderr)


def test_analyze_validate_and_the_report_list_print_hostile_data_inert(tmp_path):
    # The other commands that print rows' ids, roles and locations: analyze's rejects
    # list, validate's problems (a row added to the output by hand) and report's table
    # of over-limit rows, on a file name, a row id and a role holding OSC 52, CSI, C1 CSI
    # and bidi controls.
    hostile = "\x1b]52;c;SEFDSw==\x07\x1b[2J\u202e\x9b31m\u2066"
    name = f"in{hostile}.jsonl"
    over = json.loads(json.dumps(HAND_ROWS[2]))  # "big-tail": stays over the limit
    over["id"] = "id" + hostile
    bad = {"id": "bad" + hostile, "conversations": [{"from": "hu" + hostile, "value": "x"}]}
    src = write_jsonl(tmp_path / name, [HAND_ROWS[0], over, bad])
    out = tmp_path / "out.jsonl"
    runs = [invoke_cli("analyze", str(src), *HAND),
            invoke_cli("compress", str(src), "-o", str(out), *HAND),
            invoke_cli("report", str(out))]
    with out.open("a", encoding="utf-8") as f:
        f.write(json.dumps(bad) + "\n")
    runs.append(invoke_cli("validate", str(out)))
    assert [r.returncode for r in runs] == [0, 1, 0, 1], [r.stderr for r in runs]
    for run in runs:
        assert_inert(run.stdout + run.stderr)
    assert "unknown role" in runs[0].stdout and "unknown role" in runs[3].stdout
    assert "SEFDSw==" in runs[2].stdout  # the over-limit row's id, still readable


# 9. Secrets: a key where a variable name goes, and keys in the prompt

def test_a_key_given_as_the_variable_name_is_refused_and_never_printed(tmp_path):
    # The trial gave `--api-key-env sk-…`; a GitHub token is a valid variable name, and a
    # config endpoint's api_key_env is another way in.
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    token = "ghp_" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
    config = tmp_path / "c.yaml"
    key = "sk-or-v1-" + "0123456789abcdef" * 4
    config.write_text("summarization:\n  backend: openai\n  endpoints:\n"
                      "    - base_url: http://127.0.0.1:9/v1\n      model: m\n"
                      f"      api_key_env: {key}\n", encoding="utf-8")
    for args, secret in (((*HAND, "--api-key-env", token), token),
                         (("--config", str(config)), key)):
        proc = run_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"), *args)
        assert proc.returncode == 2, proc.stderr
        assert "not the key itself" in proc.stderr and "(not shown" in proc.stderr
        assert secret not in proc.stdout + proc.stderr
        assert secret[:12] not in proc.stderr  # not even a prefix
        assert not (tmp_path / "o.jsonl").exists()


def test_keys_of_other_shapes_anywhere_in_a_config_are_never_printed(tmp_path):
    # Keys that are valid variable names and match no credential pattern: 64 hex digits
    # (Together), gsk_ (Groq), a long lowercase token; given on the command line, as
    # summarization.api_key_env, as an endpoint's api_key_env. Also a key pasted as a
    # section name or inside a wrong-typed value, which the messages quote.
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    keys = ["b7e2" + "0123456789abcdef" * 3 + "9a8b7c6d5e4f3a2b",
            "gsk_" + "q2w3e4r5t6y7u8i9o0p1a2s3d4f5g6h7j8k9l0z1x2c3v4b5n6m7",
            "qwertyuiop1234567890asdfghjkl"]
    endpoint = ("summarization:\n  endpoints:\n    - base_url: http://127.0.0.1:9/v1\n"
                "      model: m\n      api_key_env: {}\n")
    cases = []
    for key in keys:
        cases.append((("--summarizer", "openai", "--base-url", "http://127.0.0.1:9/v1",
                       "--api-key-env", key), key, "not the key itself"))
        cases.append((f"summarization:\n  backend: openai\n  api_key_env: {key}\n", key,
                      "not the key itself"))
        cases.append((endpoint.format(key), key, "not the key itself"))
    pasted = "sk-proj-" + "AbC123dEf456GhI789jKl012MnO345pQr678"
    cases.append((f"{pasted}: 1\n", pasted, "unknown section '[REDACTED]'"))
    cases.append((f"summarization:\n  model: {{a: {pasted}}}\n", pasted,
                  "summarization.model must be a string, got {'a': '[REDACTED]'}"))
    for number, (given, key, said) in enumerate(cases):
        if isinstance(given, str):
            config = tmp_path / f"c{number}.yaml"
            config.write_text(given, encoding="utf-8")
            given = ("--config", str(config))
        proc = invoke_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"), *HAND, *given)
        assert proc.returncode == 2, proc.stderr
        assert said in proc.stderr
        assert key[:12] not in proc.stdout + proc.stderr, proc.stderr
        assert not (tmp_path / "o.jsonl").exists()


def test_the_prompt_sent_to_the_endpoint_holds_no_key(tmp_path):
    from tests.fake_llm_server import FakeLLMServer, Recorder, default_reply

    key = "Zq9-local-proxy-token-4471"  # the run's key: no pattern would find it
    aws = "AKIA" + "Q3EXAMPLE7KEY2AB"  # a credential pattern, not the run's key
    rows = json.loads(json.dumps(HAND_ROWS))
    fits = rows[1]["conversations"]
    fits[4]["value"] += f" export TOKEN={key} done"
    fits[6]["value"] += f" aws_access_key_id {aws} set"
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    recorder = Recorder(default_reply)
    with FakeLLMServer(reply=recorder).in_thread() as server:
        proc = run_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"),
                       "--target-max-tokens", "100", "--summary-target-tokens", "20",
                       "--summarizer", "openai", "--base-url", server.url, "--model", "m",
                       "--api-key-env", "LOCAL_PROXY_KEY", "--quiet",
                       env={"LOCAL_PROXY_KEY": key})
    assert proc.returncode == 0, proc.stderr
    assert recorder.seen, "no summary was requested"
    sent = json.dumps(recorder.seen)
    assert key not in sent and aws not in sent
    assert "[REDACTED]" in sent and "export TOKEN=" in sent  # the rest of the turn went
    # The row itself keeps its turns (SPEC §12: values round-trip).
    assert src.read_text(encoding="utf-8").count(key) == 1


def test_batch_request_files_hold_no_key(tmp_path):
    # The batch variant of the prompt test: the requests a provider will read are files.
    key = "Zq9-batch-proxy-token-5582"
    github = "ghp_" + "Rt5yU8iO1pA4sD7fG0hJ3kL6zX9cV2bN5mQ8"
    rows = json.loads(json.dumps(HAND_ROWS))
    rows[1]["conversations"][4]["value"] += f" TOKEN={key} and {github} end"
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    folder = tmp_path / "batch"
    proc = invoke_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"),
                      "--target-max-tokens", "100", "--summary-target-tokens", "20",
                      "--summarizer", "batch", "--model", "m", "--batch-dir", str(folder),
                      "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "BATCH_KEY",
                      env={"BATCH_KEY": key})
    assert proc.returncode == 0, proc.stderr
    written = "".join(p.read_text(encoding="utf-8") for p in sorted(folder.iterdir()))
    assert "requests-00001.jsonl" in proc.stdout and "TOKEN=[REDACTED]" in written
    assert key not in written and github not in written


# Config values: quoted within bounds, and numbers that are numbers

def test_an_alias_bomb_in_a_wrong_typed_value_gives_a_short_message(tmp_path):
    # The trial's bomb was one wrong-typed value; here an endpoint's weight (a number) and
    # output.output_suffix (a string), each given nine levels of aliases.
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    for where in ("summarization:\n  endpoints:\n    - base_url: http://127.0.0.1:9/v1\n"
                  "      model: m\n      weight: *i\n",
                  "output:\n  output_suffix: *i\n"):
        config = tmp_path / "c.yaml"
        config.write_text(where.replace("*i", _inline_bomb()), encoding="utf-8")
        proc = run_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"),
                       "--config", str(config), timeout=60)
        assert proc.returncode == 2, proc.stderr[:500]
        assert "must be" in proc.stderr and len(proc.stderr) < 600, proc.stderr[:600]
        assert "..." in proc.stderr  # the value was cut, not spelled out


def _inline_bomb() -> str:
    """A flow sequence with nine levels of anchors and aliases: 9**9 strings if expanded."""
    value = '&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'
    for level in range(1, 10):
        value = f"&l{level} [{value}, " + ", ".join([f"*l{level - 1}"] * 8) + "]"
    return value


def test_an_endpoint_weight_that_is_not_a_finite_number_is_refused(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    for weight in (".nan", ".NaN", "-.inf", ".inf"):
        config = tmp_path / "c.yaml"
        config.write_text("summarization:\n  backend: openai\n  endpoints:\n"
                          "    - base_url: http://127.0.0.1:9/v1\n      model: m\n"
                          f"      weight: {weight}\n", encoding="utf-8")
        proc = run_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"),
                       "--config", str(config))
        assert proc.returncode == 2, proc.stderr
        assert "endpoints[0].weight must be positive and finite" in proc.stderr


# Inputs that are not what they seem

def test_a_fifo_or_device_key_file_never_blocks_the_run(tmp_path):
    # The trial's FIFO was ./.env; here $HERMES_HOME/.env is the FIFO and ./.env a link
    # to /dev/zero (endless): the key is simply not found in either.
    home = tmp_path / "hermes"
    home.mkdir()
    os.mkfifo(home / ".env")
    (tmp_path / ".env").symlink_to("/dev/zero")
    src = write_jsonl(tmp_path / "in.jsonl", HAND_ROWS)
    proc = run_cli("compress", str(src), "-o", str(tmp_path / "o.jsonl"), *HAND[:4],
                   "--summarizer", "openai", "--base-url", "http://127.0.0.1:9/v1",
                   "--model", "m", "--api-key-env", "HOSTILE_UNSET_KEY", cwd=tmp_path,
                   env={"HERMES_HOME": str(home), "HOSTILE_UNSET_KEY": ""}, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "HOSTILE_UNSET_KEY" in proc.stderr and "is not set" in proc.stderr


def test_a_fifo_input_is_named_for_what_it_is(tmp_path):
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    link = tmp_path / "gone.jsonl"
    link.symlink_to(tmp_path / "missing.jsonl")
    for spec, kind in ((fifo, "is a FIFO (named pipe)"), (link, "a symbolic link to nothing")):
        proc = run_cli("compress", str(spec), "-o", str(tmp_path / "o.jsonl"), *HAND,
                       timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert kind in proc.stderr and "not found" not in proc.stderr
    proc = run_cli("analyze", str(fifo), timeout=60)
    assert proc.returncode == 2 and "FIFO" in proc.stderr


def test_a_fifo_or_dead_link_among_a_folders_data_files_is_named_not_passed_over(tmp_path):
    # The single-file variant said what the input is; in a folder (or a glob) such files
    # were dropped without a word, exit 0. A subprocess: a FIFO that is opened would block.
    folder = tmp_path / "d"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", HAND_ROWS)
    cases = (("b.json", "is a FIFO (named pipe)"),
             ("c.jsonl.gz", "is a symbolic link to nothing"))
    for name, kind in cases:
        odd = folder / name
        if "FIFO" in kind:
            os.mkfifo(odd)
        else:
            odd.symlink_to(tmp_path / "moved-away.jsonl.gz")
        for spec in (str(folder), str(folder / "*")):
            proc = run_cli("compress", spec, "-o", str(tmp_path / "out"), *HAND, timeout=60)
            assert proc.returncode == 2, proc.stderr
            assert f"{odd} in {spec} {kind}" in proc.stderr, proc.stderr
            assert not (tmp_path / "out").exists()
        odd.unlink()
    # A FIFO that is no data file (by its name) is none of the run's business.
    os.mkfifo(folder / "notes.txt")
    proc = run_cli("compress", str(folder), "-o", str(tmp_path / "out"), *HAND, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_a_folder_input_passes_over_only_the_side_files_this_tool_wrote(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", HAND_ROWS)
    # An earlier run inside the folder: its output is data, its side files are not.
    proc = run_cli("compress", str(data / "a.jsonl"), "-o", str(data / "a_c.jsonl"), *HAND,
                   "--quiet")
    assert proc.returncode == 0, proc.stderr
    ours = sorted(p.name for p in data.iterdir() if p.name.startswith("a_c_"))
    assert "a_c_metrics.json" in ours and "a_c_over_limit.jsonl" in ours
    # Data files that only look like side files: no metrics file says a run wrote them.
    write_jsonl(data / "users_rejects.jsonl", HAND_ROWS[:2])
    (data / "team_metrics.json").write_text(json.dumps(HAND_ROWS[2:4]), encoding="utf-8")
    out = tmp_path / "out"
    proc = run_cli("compress", str(data), "-o", str(out), *HAND)
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in out.iterdir())
    assert written == ["a.jsonl", "a_c.jsonl", "team_metrics.json", "users_rejects.jsonl"]
    assert len((out / "users_rejects.jsonl").read_text().splitlines()) == 2
    assert len(json.loads((out / "team_metrics.json").read_text())) == 2
    note = " ".join(proc.stderr.split())
    assert f"{len(ours)} files in {data} passed over: side files of an earlier run" in note
    assert all(name in note for name in ours)


# Batch results: one answer per request

def _result(custom_id: str, text: str | None) -> str:
    """One results line: an answer, or (``text`` None) a provider's error."""
    if text is None:
        return json.dumps({"custom_id": custom_id, "response": None,
                           "error": {"code": "server_error", "message": "boom"}})
    body = {"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
    return json.dumps({"custom_id": custom_id,
                       "response": {"status_code": 200, "body": body}, "error": None})


def test_duplicate_custom_ids_in_batch_results_are_an_error_naming_them(tmp_path):
    import pytest

    from trajectory_compressor.core.errors import ConfigError
    from trajectory_compressor.core.redact import Scrubber
    from trajectory_compressor.summarizers.batch import import_results
    from trajectory_compressor.summarizers.cache import SummaryCache

    first, second = tmp_path / "r1.jsonl", tmp_path / "r2.jsonl"
    # The trial had one id answered twice in one file; here "k2" is answered in two
    # files and "k3" twice in the second (once failed), "k1" failed then answered (the
    # documented second batch for failed requests), "k4" failed twice.
    first.write_text("\n".join([_result("k1", None), _result("k2", "Two A."),
                                _result("k4", None)]) + "\n", encoding="utf-8")
    second.write_text("\n".join([_result("k1", "One."), _result("k2", "Two B."),
                                 _result("k3", None), _result("k3", "Three."),
                                 _result("k4", None)]) + "\n", encoding="utf-8")
    cache = SummaryCache(tmp_path / "c.sqlite")
    try:
        with pytest.raises(ConfigError) as caught:
            import_results([first, second], cache, "m", Scrubber(), "o")
        message = str(caught.value)
        assert message.startswith("2 custom_ids of the batch results have more than one")
        assert f"'k2' at {first}:2, {second}:2" in message
        assert f"'k3' at {second}:3, {second}:4" in message
        assert "'k1'" not in message and "'k4'" not in message
        assert cache.get_entry("k2") is None  # nothing stored before the error
        # Without the duplicates the same files import: k1's answer wins, k4 failed.
        second.write_text("\n".join([_result("k1", "One."), _result("k4", None)]) + "\n",
                          encoding="utf-8")
        report = import_results([first, second], cache, "m", Scrubber(), "o")
        assert report.accepted == 2 and set(report.failures) == {"k4"}
    finally:
        cache.close()


def test_retry_after_is_capped_where_the_manual_says():
    import email.utils
    import re
    import time

    from trajectory_compressor.summarizers.chat import MAX_RETRY_AFTER, parse_retry_after

    docs = Path(__file__).resolve().parent.parent / "docs"
    manual = "\n".join(p.read_text(encoding="utf-8") for p in sorted(docs.rglob("*.md")))
    stated = {float(n) for n in re.findall(r"`Retry-After`[^.|]*?honoured up to (\d+) s",
                                           manual)}
    assert stated == {MAX_RETRY_AFTER}, stated  # every mention, one figure
    now = time.time()
    # The trial sent delta-seconds; here an HTTP date a day ahead, and a huge number.
    assert parse_retry_after(email.utils.formatdate(now + 86400, usegmt=True), now) \
        == MAX_RETRY_AFTER
    assert parse_retry_after("1e12") == MAX_RETRY_AFTER
    assert parse_retry_after("7") == 7.0


# --token-counting chat_template without a usable jinja2

HIDE_JINJA2 = """\
import importlib.machinery as machinery

_find = machinery.PathFinder.find_spec


def _find_spec(name, path=None, target=None):
    if name == "jinja2" or name.startswith("jinja2."):
        return None
    return _find(name, path, target)


machinery.PathFinder.find_spec = staticmethod(_find_spec)
"""


def test_chat_template_counting_without_jinja2_stops_at_start_with_the_install_line(tmp_path):
    from tests.cli_helpers import ROOT
    from tests.template_tokenizer import CHATML

    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    src = tmp_path / "chat.jsonl"
    src.write_bytes((ROOT / "data_samples" / "openai_messages.jsonl").read_bytes())
    # The trial ran compress with jinja2 not installed (here hidden from the import
    # system, as when it is absent); analyze too must say so once, at start.
    folder = tmp_path / "nojinja"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(HIDE_JINJA2, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    counting = ("--token-counting", "chat_template", "--chat-template", str(template))
    for args in (("compress", str(src), "-o", str(out), *counting, "--summarizer",
                  "extractive"), ("analyze", str(src), *counting)):
        proc = run_cli(*args, env={"PYTHONPATH": f"{folder}:{ROOT}"})
        assert proc.returncode == 2, proc.stderr
        assert "jinja2 3.1 or later, which is not installed" in proc.stderr
        assert "pip install 'jinja2>=3.1'" in proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stdout == ""  # one line, no rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat.jsonl", "chatml.jinja",
                                                          "nojinja"]


# --resume: the bytes already read, and the checkpoint itself

RESUME = ("--summarizer", "extractive", "--target-max-tokens", "500",
          "--summary-target-tokens", "60", "--quiet", "--checkpoint-every", "100")


def interrupted(tmp_path: Path, rows: int = 1500) -> tuple[Path, Path, Path]:
    """An input, and a run over it killed after its first checkpoint (100 rows; 1,400 and
    some seconds of work still to go): input, output, checkpoint. The resumes that follow
    run in this process (`invoke_cli`): what they check is the checkpoint, not the
    process."""
    import signal

    from tests.cli_helpers import interrupt_when, start_cli
    from tests.datagen import write_jsonl as generated

    src = generated(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    checkpoint = tmp_path / ".out.checkpoint.json"
    proc = start_cli("compress", str(src), "-o", str(out), *RESUME)
    interrupt_when(proc, checkpoint.exists, signal.SIGKILL)
    return src, out, checkpoint


def edit_in_place(path: Path, line: int) -> None:
    """Change one character of line ``line`` (1-based); size and times stay."""
    st = path.stat()
    lines = path.read_bytes().split(b"\n")
    text = lines[line - 1]
    at = text.index(b'"value": "') + len(b'"value": "')  # in a turn's text: still JSON
    lines[line - 1] = text[:at] + (b"Q" if text[at:at + 1] != b"Q" else b"R") + text[at + 1:]
    path.write_bytes(b"\n".join(lines))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_resume_refuses_an_input_edited_in_place_where_it_was_read(tmp_path):
    src, out, checkpoint = interrupted(tmp_path)
    skip = json.loads(checkpoint.read_bytes())["skip"]
    assert 0 < skip < 1400, skip
    saved, st = src.read_bytes(), src.stat()
    # The trial edited the first row; here the last row before the cut.
    edit_in_place(src, skip)
    proc = invoke_cli("compress", str(src), "-o", str(out), *RESUME, "--resume")
    assert proc.returncode == 2, proc.stderr
    assert f"the input {src} changed in the part the interrupted run had already read" \
        in proc.stderr
    assert not out.exists() and checkpoint.exists()
    # An edit past the cut is the part not read yet: the resume goes on and reads it.
    src.write_bytes(saved)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    edit_in_place(src, 1490)
    proc = invoke_cli("compress", str(src), "-o", str(out), *RESUME, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_bytes().splitlines()) == 1500


def test_resume_refuses_a_damaged_checkpoint(tmp_path):
    src, out, checkpoint = interrupted(tmp_path)
    good = json.loads(checkpoint.read_bytes())
    # The trial set a counter out of range; here a wrong type, a cut moved forward (rows
    # would be lost), one moved back (rows written twice), a negative sidecar offset,
    # metrics that lost rows or hold a string, an input index past the inputs.
    damages = [({"skip": str(good["skip"])}, "skip is '"),
               ({"skip": good["skip"] + 7}, "its metrics count"),
               ({"skip": good["skip"] - 7}, "but its digest covers"),
               ({"rejects": -1}, "rejects is -1"),
               ({"metrics": {**good["metrics"],
                             "total_trajectories": good["metrics"]["total_trajectories"] - 5}},
                "its metrics count"),
               ({"metrics": {**good["metrics"], "rows_rejected": "0"}},
                "metrics rows_rejected is '0'"),
               ({"file_index": 3}, "file_index 3 is past the 1 inputs")]
    for change, said in damages:
        checkpoint.write_text(json.dumps({**good, **change}), encoding="utf-8")
        proc = invoke_cli("compress", str(src), "-o", str(out), *RESUME, "--resume")
        assert proc.returncode == 2, (change, proc.stderr)
        assert f"the checkpoint {checkpoint} is damaged" in proc.stderr and said in proc.stderr
        assert not out.exists()
    checkpoint.write_text(json.dumps(good), encoding="utf-8")
    proc = invoke_cli("compress", str(src), "-o", str(out), *RESUME, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_bytes().splitlines()) == 1500


def test_a_file_name_that_is_not_utf8_still_gets_its_metrics(tmp_path):
    # The trial gave one such file; here a folder holding a Latin-1 name beside a UTF-8
    # one, with a rejected row in it, run twice (the rerun must recognise its outputs).
    data = tmp_path / "data"
    data.mkdir()
    latin = Path(os.fsdecode(bytes(data) + b"/caf\xe9.jsonl"))
    write_jsonl(latin, HAND_ROWS[:3], extra_lines=("{not json",))
    write_jsonl(data / "plain.jsonl", HAND_ROWS[3:])
    out = tmp_path / "out"
    for _ in range(2):
        proc = run_cli("compress", str(data), "-o", str(out), *HAND)
        assert proc.returncode == 1, proc.stderr  # 1: the rejected row
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
        metrics = json.loads((tmp_path / "out_metrics.json").read_bytes())
        assert metrics["summary"]["total_trajectories"] == 5
        assert metrics["summary"]["rows_rejected"] == 1
        assert str(latin.resolve()) in metrics["run"]["inputs"]  # the same name read back
        assert sorted(os.listdir(bytes(out))) == [b"caf\xe9.jsonl", b"plain.jsonl"]
    assert "caf\\udce9.jsonl:4" in proc.stdout  # printed, spelled out
    report = run_cli("report", str(out))
    assert report.returncode == 0 and "rows" in report.stdout


def test_a_parquet_file_or_output_whose_name_is_not_utf8_is_read_and_written(tmp_path):
    # The JSONL variant above was fixed; a Parquet input so named stopped the run
    # ("internal error", exit 4, nothing written): pyarrow opens paths by their UTF-8.
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist(HAND_ROWS[:3]), tmp_path / "t.parquet")
    os.rename(tmp_path / "t.parquet", os.fsdecode(bytes(data) + b"/\xff\xfe.parquet"))
    write_jsonl(Path(os.fsdecode(bytes(data) + b"/caf\xe9.jsonl")), HAND_ROWS[3:])
    for output_format in ("same", "parquet"):
        out = tmp_path / f"out-{output_format}"
        proc = invoke_cli("compress", str(data), "-o", str(out), *HAND, "--output-format",
                          output_format)
        assert proc.returncode == 0, proc.stderr
        names = sorted(os.listdir(bytes(out)))
        assert names == sorted([b"\xff\xfe.parquet", b"caf\xe9" + (
            b".parquet" if output_format == "parquet" else b".jsonl")])
        latin_parquet = pq.read_table(pa.OSFile(bytes(out) + b"/\xff\xfe.parquet"))
        assert latin_parquet.column("id").to_pylist() == [r["id"] for r in HAND_ROWS[:3]]
        assert invoke_cli("validate", str(out), "--allow-over-limit").returncode == 0


# A DatasetDict's splits, every one of them back from datasets.load_dataset(OUTPUT)

def test_every_split_of_a_dataset_dict_comes_back_from_load_dataset(tmp_path):
    import datasets

    from tests.datagen import rows

    datasets.disable_progress_bars()
    # The trial's split was "holdout" (came back inside train); here also one whose name
    # holds a word datasets reads as another split ("my_eval.v2" came back as "test").
    sizes = {"train": 7, "holdout": 4, "my_eval.v2": 3}
    source = datasets.DatasetDict({
        name: datasets.Dataset.from_list(list(rows(n, start=100 * i)))
        for i, (name, n) in enumerate(sizes.items())})
    folder = tmp_path / "dd"
    source.save_to_disk(str(folder))
    out = tmp_path / "out"
    proc = run_cli("compress", str(folder), "-o", str(out), "--summarizer", "extractive",
                   "--target-max-tokens", "500", "--summary-target-tokens", "60", "--quiet")
    assert proc.returncode == 0, proc.stderr
    back = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    assert {name: back[name].num_rows for name in back} == sizes
    for i, (name, n) in enumerate(sizes.items()):
        assert back[name]["id"] == [r["id"] for r in rows(n, start=100 * i)]
    # A README.md the tool did not write is never replaced.
    (out / "README.md").write_text("# my notes\n", encoding="utf-8")
    proc = run_cli("compress", str(folder), "-o", str(out), "--summarizer", "extractive",
                   "--target-max-tokens", "500", "--summary-target-tokens", "60", "--quiet")
    assert proc.returncode == 2 and "was not written by trajectory-compressor" in proc.stderr
    assert (out / "README.md").read_text(encoding="utf-8") == "# my notes\n"


def test_a_folder_input_passes_over_an_interrupted_runs_checkpoint(tmp_path):
    # An interrupted run inside the folder leaves `.<stem>.checkpoint.json` (hidden, and
    # named like a JSON input): it is the run's record, not data. A JSON array that only
    # has that name is data.
    from trajectory_compressor.engine.checkpoint import Checkpoint
    from trajectory_compressor.formats.registry import discover_inputs

    data = tmp_path / "data"
    data.mkdir()
    write_jsonl(data / "a.jsonl", HAND_ROWS)
    Checkpoint(inputs=[{"path": "x"}], settings={"target_max_tokens": 1}).save(
        data / ".a_c.checkpoint.json")
    (data / ".rows.checkpoint.json").write_text(json.dumps(HAND_ROWS[:2]), encoding="utf-8")
    skipped: list[Path] = []
    found = discover_inputs(str(data), skipped=skipped)
    assert [f.path.name for f in found] == [".rows.checkpoint.json", "a.jsonl"]
    assert [p.name for p in skipped] == [".a_c.checkpoint.json"]
