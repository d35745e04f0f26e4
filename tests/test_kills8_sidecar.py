"""`app/sidecar.py`, the metrics file read back and the settings `validate` checks with
(issue 40 items 1 and 8: the validate-settings bugs lived here, outside the mutation
tool's scope). Each test asserts what the function returns or says, from its docstring:
a damaged metrics file named with what is wrong, the run's recorded settings, and a
``--config`` that wins over them but for the run's counting mode and chat-template file.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from trajectory_compressor.app.sidecar import (
    CheckSettings,
    check_settings,
    check_template,
    metrics_problem,
    over_limit_entry_problem,
    read_metrics,
    recorded_config,
    recorded_template,
    shape_mismatch,
)
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.core.errors import ConfigError, InputError
from trajectory_compressor.core.metrics import AggregateMetrics, TrajectoryMetrics
from trajectory_compressor.counting.identity import tokenizer_identity

DEFAULT = ("built-in defaults", CompressionConfig(target_max_tokens=1111))


def _metrics(**sections: Any) -> dict[str, Any]:
    return {**AggregateMetrics().to_dict(), **sections}


def _run(tmp_path: Path, config: CompressionConfig | None, *, tokenizer: bool = True,
         **extra: Any) -> Path:
    """An output file with the metrics file a run with ``config`` writes beside it."""
    out = tmp_path / "out.jsonl"
    out.write_text("", encoding="utf-8")
    data = _metrics(**extra)
    if config is not None:
        data["settings"] = config.run_settings()
        if tokenizer:
            data["tokenizer"] = tokenizer_identity(config)
    (tmp_path / "out_metrics.json").write_text(json.dumps(data), encoding="utf-8")
    return out


def _template(tmp_path: Path, name: str = "chatml.jinja") -> Path:
    path = tmp_path / name
    path.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}", encoding="utf-8")
    return path


# -- the metrics file, checked ---------------------------------------------------------------

def test_read_metrics_none_when_missing_and_the_data_when_sound(tmp_path):
    assert read_metrics(tmp_path / "none.json") is None
    path = tmp_path / "m.json"
    data = _metrics()
    path.write_text(json.dumps(data), encoding="utf-8")
    assert read_metrics(path) == data


@pytest.mark.parametrize("text, said", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "the top level is a list, not an object"),
    ('"x"', "the top level is a string, not an object"),
    ('{"tokens": {}}', "no 'summary' section"),
])
def test_read_metrics_names_the_file_and_what_is_wrong(tmp_path, text, said):
    path = tmp_path / "m.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_metrics(path)
    assert said in str(caught.value) and str(path) in str(caught.value)
    assert "delete it or compress again" in str(caught.value)


def test_read_metrics_of_no_regular_file_is_an_input_error(tmp_path):
    folder = tmp_path / "out_metrics.json"
    folder.mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        read_metrics(folder)


def test_read_metrics_that_cannot_be_opened_is_an_input_error(tmp_path, monkeypatch):
    # A Unix socket: it exists, and opening it fails (ENXIO) before any type check.
    monkeypatch.chdir(tmp_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("out_metrics.json")
        with pytest.raises(InputError) as caught:
            read_metrics(tmp_path / "out_metrics.json")
    finally:
        server.close()
    assert str(caught.value) == (f"cannot read the metrics file {tmp_path / 'out_metrics.json'}"
                                 ": No such device or address")


@pytest.mark.parametrize("change, said", [
    ({"tokens": []}, "'tokens' is a list, not an object"),
    ({"run": 3}, "'run' is a number, not an object"),
    ({"settings": None}, "'settings' is null, not an object"),
    ({"summary": {"total_trajectories": -1}}, "summary.total_trajectories is -1, not a count"),
    ({"summary": {"rows_rejected": True}}, "summary.rows_rejected is True, not a count"),
    ({"summary": {"trajectories_failed": 1.5}}, "summary.trajectories_failed is 1.5, not a count"),
    ({"summarization": {"summaries_by_source": []}},
     "summarization.summaries_by_source is a list, not an object"),
    ({"over_limit": {"reasons": ["no_split"]}}, "over_limit.reasons is a list, not an object"),
    ({"over_limit": {"reasons": "no_split"}}, "over_limit.reasons is a string, not an object"),
    ({"over_limit": {"reasons": {"no_split": "many"}}},
     "over_limit.reasons.no_split is 'many', not a count"),
    ({"over_limit": {"reasons": {"no_split": True}}},
     "over_limit.reasons.no_split is True, not a count"),
    ({"distributions": {"tokens_before": [1]}},
     "distributions.tokens_before is a list, not an object"),
    ({"tokens": {"total_before": "3"}}, "tokens.total_before is '3', not a number"),
    ({"distributions": {"tokens_before": {"max": 2.5}}},
     "distributions.tokens_before.max is 2.5, not a count"),
    ({"distributions": {"tokens_before": {"max": False}}},
     "distributions.tokens_before.max is False, not a number or null"),
    ({"tokenizer": {"counting": 7}}, "tokenizer.counting is 7, not a name"),
    # A null count is not skipped as a count, but the shape check still refuses it.
    ({"summary": {"total_trajectories": None}},
     "summary.total_trajectories is None, not a number"),
])
def test_metrics_problem_names_the_first_thing_wrong(change, said):
    assert metrics_problem({"summary": {}, **change}) == said


@pytest.mark.parametrize("data", [
    {"summary": {}},
    {"summary": {"total_trajectories": 0, "rows_rejected": 0}},  # 0 is a count
    {"summary": {}, "over_limit": {"reasons": {"no_split": 2, "x": 0.5}}},
    {"summary": {}, "summarization": {"summaries_by_source": {}}},
    {"summary": {}, "distributions": {"tokens_before": {"max": 40}}},
    {"summary": {}, "tokenizer": {"counting": "turns"}},
    {"summary": {}, "unknown_section": [1, 2]},
])
def test_metrics_problem_none_for_what_compress_writes(data):
    assert metrics_problem(data) is None


def test_shape_mismatch_by_kind():
    template = {"n": 0, "f": 1.0, "t": "", "b": False, "o": {"x": 0}, "z": None,
                "summary_source": None}
    assert shape_mismatch(template, {"n": 2.5, "f": 3, "t": "a", "b": True, "o": {"x": 1},
                                     "z": None, "summary_source": "llm", "other": []}) is None
    assert shape_mismatch(template, {"n": True}) == "n is True, not a number"
    assert shape_mismatch(template, {"t": 3}) == "t is 3, not text"
    assert shape_mismatch(template, {"b": 0}) == "b is 0, not true or false"
    assert shape_mismatch(template, {"o": 1}) == "o is a number, not an object"
    assert shape_mismatch(template, {"o": {"x": "1"}}, "m.") == "m.o.x is '1', not a number"
    assert shape_mismatch(template, {"z": "text"}) == "z is 'text', not a number or null"
    assert shape_mismatch(template, {"z": 4}) is None
    assert shape_mismatch(template, {"summary_source": 4}) is None
    assert shape_mismatch(template, {"summary_source": []}) == \
        "summary_source is [], not a number or null"
    # The first wrong key in the template's order, once a nested object is fine.
    assert shape_mismatch(template, {"o": {"x": 1}, "z": "a", "t": 1}) == "t is 1, not text"


def test_over_limit_entry_problem():
    row = TrajectoryMetrics().to_dict()
    assert over_limit_entry_problem({"metrics": row, "reason_numbers": {"a": 1}}) is None
    assert over_limit_entry_problem({}) is None
    assert over_limit_entry_problem([1]) == "the line is a list, not an object"
    assert over_limit_entry_problem({"metrics": "x"}) == "'metrics' is a string, not an object"
    assert over_limit_entry_problem({"metrics": {**row, "was_compressed": 1}}) == \
        "metrics.was_compressed is 1, not true or false"
    assert over_limit_entry_problem({"metrics": row, "reason_numbers": [1]}) == \
        "'reason_numbers' is a list, not an object"
    # The metrics' own problem is said first.
    assert over_limit_entry_problem({"metrics": {"tokens_saved": "a"},
                                     "reason_numbers": [1]}) == \
        "metrics.tokens_saved is 'a', not a number"


# -- the recorded settings -----------------------------------------------------------------------

def test_recorded_config_reads_the_settings_and_the_counting_mode(tmp_path):
    config = CompressionConfig(target_max_tokens=3000, summary_target_tokens=200)
    metrics = _metrics(settings=config.run_settings(), tokenizer={"counting": "chat_template"})
    found = recorded_config(metrics, tmp_path / "m.json")
    assert found is not None
    assert (found.target_max_tokens, found.summary_target_tokens, found.token_counting) == \
        (3000, 200, "chat_template")
    assert recorded_config(_metrics(), tmp_path / "m.json") is None
    plain = recorded_config(_metrics(settings=config.run_settings()), tmp_path / "m.json")
    assert plain is not None and plain.token_counting == "turns"
    with pytest.raises(ConfigError, match=r"metrics file .*m\.json"):
        recorded_config(_metrics(settings=config.run_settings(),
                                 tokenizer={"counting": "words"}), tmp_path / "m.json")


def test_recorded_template_and_its_check(tmp_path):
    assert recorded_template({"tokenizer": {"template_sha256": "ab12"}}) == "ab12"
    assert recorded_template({"tokenizer": {"template_sha256": "tokenizer"}}) is None
    assert recorded_template({"tokenizer": {"template_sha256": 5}}) is None
    assert recorded_template({}) is None
    counted = {"tokenizer": {"template_sha256": "ab12"}}
    bare = CompressionConfig(token_counting="chat_template")
    with pytest.raises(ConfigError) as caught:
        check_template(counted, tmp_path / "m.json", bare)
    assert "sha256 ab12" in str(caught.value) and "--chat-template" in str(caught.value)
    check_template(counted, tmp_path / "m.json", CompressionConfig(token_counting="turns"))
    check_template({"tokenizer": {"template_sha256": "tokenizer"}}, tmp_path / "m.json", bare)
    given = CompressionConfig(token_counting="chat_template",
                              chat_template=str(_template(tmp_path)))
    check_template(counted, tmp_path / "m.json", given)


# -- check_settings: what validate checks against ------------------------------------------------

def test_no_metrics_file_checks_against_the_default(tmp_path):
    out = tmp_path / "out.jsonl"
    found = check_settings(out, None, {}, DEFAULT)
    assert found.config.target_max_tokens == 1111 and found.metrics is None
    assert found.origin == "no metrics file beside it: built-in defaults"
    assert found.path == tmp_path / "out_metrics.json" and found.same_counting is False


def test_a_metrics_file_without_settings_checks_against_the_default(tmp_path):
    out = _run(tmp_path, None)
    found = check_settings(out, None, {}, DEFAULT)
    assert found.config.target_max_tokens == 1111 and found.metrics is not None
    assert found.origin == "out_metrics.json records no settings: built-in defaults"
    assert found.same_counting is False


def test_the_recorded_settings_are_used_and_count_as_the_run_did(tmp_path):
    out = _run(tmp_path, CompressionConfig(target_max_tokens=3000, summary_target_tokens=200))
    found = check_settings(out, None, {}, DEFAULT)
    assert (found.config.target_max_tokens, found.config.summary_target_tokens) == (3000, 200)
    assert found.origin == "settings from out_metrics.json" and found.same_counting is True
    assert found.describe().startswith("target 3,000, summary 200, counting turns, tokenizer ")
    assert found.describe().endswith("; settings from out_metrics.json")


def test_without_the_tokenizer_section_the_count_is_not_the_runs(tmp_path):
    out = _run(tmp_path, CompressionConfig(target_max_tokens=3000), tokenizer=False)
    found = check_settings(out, None, {}, DEFAULT)
    assert found.config.target_max_tokens == 3000 and found.same_counting is False
    assert found.origin == "settings from out_metrics.json"


def test_the_command_line_goes_on_top_and_is_named(tmp_path):
    out = _run(tmp_path, CompressionConfig(target_max_tokens=3000))
    found = check_settings(out, None, {"--target-max-tokens": 5000, "--tokenizer": None,
                                       "--summary-target-tokens": 100}, DEFAULT)
    assert (found.config.target_max_tokens, found.config.summary_target_tokens) == (5000, 100)
    assert found.origin == ("settings from out_metrics.json, --target-max-tokens, "
                            "--summary-target-tokens from the command line")
    assert found.same_counting is True
    counting = check_settings(out, None, {"--token-counting": "chat_template"}, DEFAULT)
    assert counting.config.token_counting == "chat_template"
    assert counting.origin.endswith("from the command line (differs from the run's counting "
                                    "mode)")
    assert counting.same_counting is False


def test_a_config_wins_but_keeps_the_runs_counting_mode_and_template(tmp_path):
    template = _template(tmp_path)
    run = CompressionConfig(target_max_tokens=3000, token_counting="chat_template",
                            chat_template=str(template))
    out = _run(tmp_path, run)
    base = CompressionConfig(target_max_tokens=5000)
    found = check_settings(out, base, {}, DEFAULT, base_name="--config x.yaml")
    assert found.config.target_max_tokens == 5000
    assert found.config.token_counting == "chat_template"
    assert found.config.chat_template == str(template.resolve())
    assert found.origin == ("settings from --config x.yaml (over the run's own), with the "
                            "run's counting mode and chat template")
    assert found.same_counting is True
    assert "counting chat_template with chatml.jinja" in found.describe()


def test_what_the_config_sets_is_not_replaced(tmp_path):
    template = _template(tmp_path)
    run = CompressionConfig(token_counting="chat_template", chat_template=str(template))
    out = _run(tmp_path, run)
    base = CompressionConfig(target_max_tokens=5000, token_counting="turns")
    found = check_settings(out, base, {}, DEFAULT,
                           base_keys=frozenset({"tokenizer.counting"}))
    assert found.config.token_counting == "turns"
    assert found.config.chat_template == str(template.resolve())
    assert found.origin == ("settings from --config (over the run's own), with the run's "
                            "chat template (differs from the run's counting mode and chat "
                            "template)")
    assert found.same_counting is False
    both = check_settings(out, base, {}, DEFAULT, base_keys=frozenset(
        {"tokenizer.counting", "tokenizer.chat_template"}))
    assert (both.config.token_counting, both.config.chat_template) == ("turns", None)


def test_a_config_that_counts_as_the_run_did_says_nothing_kept(tmp_path):
    out = _run(tmp_path, CompressionConfig(target_max_tokens=3000))
    found = check_settings(out, CompressionConfig(target_max_tokens=4000), {}, DEFAULT)
    assert found.config.target_max_tokens == 4000
    assert found.origin == "settings from --config (over the run's own)"
    assert found.same_counting is True
    # No metrics file: the config as it is.
    alone = check_settings(tmp_path / "other.jsonl", CompressionConfig(target_max_tokens=4000),
                           {}, DEFAULT)
    assert alone.origin == "settings from --config (over the run's own)"
    assert alone.metrics is None and alone.same_counting is False


def test_a_missing_template_file_is_an_error_naming_where_it_was_recorded(tmp_path):
    template = _template(tmp_path)
    out = _run(tmp_path, CompressionConfig(token_counting="chat_template",
                                           chat_template=str(template)))
    template.unlink()
    with pytest.raises(ConfigError) as caught:
        check_settings(out, None, {}, DEFAULT)
    assert str(caught.value) == (
        f"the chat-template file {template.resolve()} to count with is missing (the run "
        "recorded it in out_metrics.json); give the same template with --chat-template")
    gone = str(tmp_path / "gone.jinja")
    with pytest.raises(ConfigError) as alone:
        check_settings(tmp_path / "other.jsonl", None, {"--token-counting": "chat_template",
                                                         "--chat-template": gone}, DEFAULT)
    assert str(alone.value) == (f"the chat-template file {gone} to count with is missing (the "
                                "run recorded it); give the same template with --chat-template")
    # Counting by turns never reads the file: no error.
    found = check_settings(tmp_path / "other.jsonl", None, {"--chat-template": gone}, DEFAULT)
    assert found.config.chat_template == gone


def test_a_run_that_counted_with_an_unnamed_template_file_wants_it_again(tmp_path):
    out = _run(tmp_path, CompressionConfig(token_counting="chat_template"), tokenizer=False)
    data = json.loads((tmp_path / "out_metrics.json").read_text())
    data["tokenizer"] = {"counting": "chat_template", "template_sha256": "ab12"}
    (tmp_path / "out_metrics.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="sha256 ab12"):
        check_settings(out, None, {}, DEFAULT)


def test_another_tokenizer_is_said_once(tmp_path):
    out = _run(tmp_path, CompressionConfig(target_max_tokens=3000))
    data = json.loads((tmp_path / "out_metrics.json").read_text())
    data["tokenizer"]["name"] = "some/other-tokenizer"
    data["tokenizer"]["files_sha256"] = "0000"
    (tmp_path / "out_metrics.json").write_text(json.dumps(data), encoding="utf-8")
    found = check_settings(out, None, {}, DEFAULT)
    assert found.origin == ("settings from out_metrics.json (differs from the run's "
                            "tokenizer)")
    assert found.same_counting is False
    # Only the files differ: said as such.
    data["tokenizer"]["name"] = tokenizer_identity(CompressionConfig())["name"]
    (tmp_path / "out_metrics.json").write_text(json.dumps(data), encoding="utf-8")
    assert check_settings(out, None, {}, DEFAULT).origin == (
        "settings from out_metrics.json (differs from the run's tokenizer files)")


def test_describe_without_a_template_file():
    settings = CheckSettings(CompressionConfig(target_max_tokens=12000,
                                               token_counting="chat_template"), None, "here")
    assert settings.describe() == (f"target 12,000, summary 750, counting chat_template, "
                                   f"tokenizer {CompressionConfig().tokenizer_name}; here")


def test_check_settings_are_frozen(tmp_path):
    found = check_settings(tmp_path / "out.jsonl", None, {}, DEFAULT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.origin = "elsewhere"  # type: ignore[misc]
