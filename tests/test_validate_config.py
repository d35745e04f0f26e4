"""`validate --config X` wins over the run's recorded settings and says so, but keeps the
run's counting mode and chat-template file unless X sets them; a chat-template file that is
gone is an error (issue 40 item 1: planted bugs there survived every test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import invoke_cli
from tests.sample_files import sample_head
from tests.template_tokenizer import CHATML, make_tokenizer_dir

TARGET = 2000


@pytest.fixture(scope="module")
def template_run(tmp_path_factory):
    """The OpenAI sample's first rows compressed with chat-template counting (a tokenizer
    folder and a .jinja file of our own) at a target that leaves rows over it."""
    tmp = tmp_path_factory.mktemp("tpl")
    tok = make_tokenizer_dir(tmp / "tok", chat_template=None)
    template = tmp / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    src = sample_head("openai_messages.jsonl", tmp, rows=6)
    out = tmp / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), "--tokenizer", str(tok),
                        "--token-counting", "chat_template", "--chat-template", str(template),
                        "--target-max-tokens", str(TARGET), "--summary-target-tokens", "200",
                        "--summarizer", "extractive", "--no-cache", "-q", "--no-config")
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp / "out_metrics.json").read_text())
    assert metrics["summary"]["trajectories_still_over_limit"] > 0
    return out, tok, template, metrics


def _config(folder: Path, text: str) -> Path:
    path = folder / "check.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_run_recorded_its_template_file_and_validate_counts_with_it(template_run):
    out, tok, template, metrics = template_run
    assert metrics["settings"]["tokenizer"]["chat_template"] == str(template.resolve())
    result = invoke_cli("validate", str(out), "--no-config")
    closing = result.stdout.strip().splitlines()[-1]
    assert f"counting chat_template with {template.name}, tokenizer {tok}; settings from " \
        "out_metrics.json)" in closing, closing
    over = metrics["summary"]["trajectories_still_over_limit"]
    assert f"{over} row{'s' * (over != 1)} over the target {TARGET:,}" in closing
    assert result.returncode == 1


def test_a_config_wins_over_the_recorded_settings_and_says_so(template_run, tmp_path):
    out, tok, template, _ = template_run
    config = _config(tmp_path, f"tokenizer:\n  name: {tok}\ncompression:\n"
                               "  target_max_tokens: 1000000\n")
    result = invoke_cli("validate", str(out), "--config", str(config))
    # Its target, not the run's 2,000: nothing is over it.
    assert result.returncode == 0, (result.stdout, result.stderr)
    closing = result.stdout.strip().splitlines()[-1]
    assert closing.startswith("6 rows checked, 0 problems (target 1,000,000, summary 750, ")
    # ... but the run's counting mode and template, which the config does not set.
    assert (f"counting chat_template with {template.name}, tokenizer {tok}; settings from "
            f"--config {config} (over the run's own), with the run's counting mode and chat "
            "template)") in closing, closing


def test_a_config_that_sets_the_counting_mode_wins_there_too(template_run, tmp_path):
    out, tok, _, _ = template_run
    config = _config(tmp_path, f"tokenizer:\n  name: {tok}\n  counting: turns\n"
                               "compression:\n  target_max_tokens: 1000000\n")
    result = invoke_cli("validate", str(out), "--config", str(config))
    closing = result.stdout.strip().splitlines()[-1]
    assert f"counting turns, tokenizer {tok}; settings from --config {config} (over the " \
        "run's own), with the run's chat template (differs from the run's counting mode " \
        "and chat template)" in closing, closing


def test_a_missing_template_file_is_an_error(template_run, tmp_path):
    out, _, template, _ = template_run
    moved = template.with_suffix(".moved")
    template.rename(moved)
    try:
        result = invoke_cli("validate", str(out), "--no-config")
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert f"the chat-template file {template.resolve()} to count with is missing" \
            in result.stderr
        given = invoke_cli("validate", str(out), "--no-config", "--chat-template", str(moved))
        assert given.returncode == 1, given.stderr  # rows over the run's target
        assert f"with {moved.name}" in given.stdout
    finally:
        moved.rename(template)
