"""Kill tests for `app.manual` (issue 40 item 8): the manual's ``--help`` epilogs and the
two reference pages it generates (every command and option of the command line, every
configuration key), word for word, from the real typer app and from small hand-made ones.

The expected pages were read against the app's options and `core.config`'s validation by
hand: each bound is the message validation gives for a value out of range."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import click
import typer

from trajectory_compressor.app.cli import HELP_NOW, app
from trajectory_compressor.app.manual import (
    CLI_PAGE,
    MANUAL_PAGES,
    _cell,
    _default,
    _help_text,
    _is_option,
    cli_reference,
    commands,
    config_keys,
    config_reference,
    key_bound,
    manual_epilog,
    option_names,
    setting_flags,
)
from trajectory_compressor.core.config import SECTIONS

GROUP = typer.main.get_command(app)

# --- the --help epilogs ----------------------------------------------------------------


def test_manual_epilog_names_each_commands_page_word_for_word():
    tail = ("(every option: docs/reference/cli.md); in the clone, `mkdocs serve` shows it in "
            "a browser (bash scripts/setup.sh dev,docs).")
    assert manual_epilog() == f"Manual: docs/index.md {tail}"
    assert manual_epilog("") == f"Manual: docs/index.md {tail}"
    assert manual_epilog("compress") == f"Manual: docs/getting-started.md {tail}"
    for command in ("analyze", "report", "validate"):
        assert manual_epilog(command) == f"Manual: docs/inspect.md {tail}"
    # A command without a page of its own points to the manual's home.
    assert manual_epilog("convert") == f"Manual: docs/index.md {tail}"
    assert CLI_PAGE == "docs/reference/cli.md"
    assert sorted(MANUAL_PAGES) == ["", "analyze", "compress", "report", "validate"]


def test_every_command_of_the_app_ends_its_help_with_its_epilog():
    for name, command in commands(GROUP):
        assert command.epilog.rstrip().endswith(manual_epilog(name)), name


# --- cells, option names, defaults ----------------------------------------------------


def test_cell_joins_whitespace_and_escapes_the_table_bar():
    assert _cell("  a\n b\t\tc  ") == "a b c"
    assert _cell("keep|extractive | off") == "keep\\|extractive \\| off"
    assert _cell(42) == "42"
    assert _cell("") == ""


def test_option_names_and_what_is_an_option():
    both = click.Option(["--protect-first-tool/--no-protect-first-tool"])
    short = click.Option(["-o", "--output"])
    argument = click.Argument(["input_file"])
    assert option_names(both) == ["--protect-first-tool", "--no-protect-first-tool"]
    assert option_names(short) == ["-o", "--output"]
    assert option_names(argument) == ["INPUT_FILE"]
    assert _is_option(both) and not _is_option(argument)
    assert not _is_option(object())  # a thing without param_type_name is no option


def test_default_shows_what_an_absent_option_means():
    def option(decls: list[str], **kwargs: Any) -> click.Option:
        return click.Option(decls, **kwargs)

    assert _default(option(["--n"], default=3)) == "3"
    assert _default(option(["--n"], default=0)) == "0"  # zero is a default, not none
    assert _default(option(["--name"], default="no")) == "no"
    assert _default(option(["--name"], default="")) == ""
    assert _default(option(["--n"], default=lambda: 3)) is None  # computed when run
    assert _default(option(["--n"], default=None)) is None
    assert _default(option(["--m"], default=(), multiple=True)) is None
    assert _default(option(["--m"], default=[], multiple=True)) is None
    assert _default(option(["--m"], default=("a",), multiple=True)) == "('a',)"
    # A flag given or not: no default shown, whichever it is.
    assert _default(option(["--loud"], is_flag=True, default=False)) is None
    assert _default(option(["--loud"], is_flag=True, default=True)) is None
    # A pair of spellings: the one that is the default.
    assert _default(option(["--keep/--drop"], default=True)) == "--keep"
    assert _default(option(["--keep/--drop"], default=False)) == "--drop"
    assert _default(option(["--keep/--drop"], default=None)) is None
    # A yes/no option that takes its value (not a flag): the value, as given.
    assert _default(option(["--sure"], type=bool, is_flag=False, default=False)) == "False"
    assert _default(option(["--keep/--drop"], default=1)) == "1"


def test_help_text_replaces_what_depends_on_the_machine():
    assert _help_text(f"Here and now: {HELP_NOW}.") == (
        "Here and now: shown by --help: it depends on the machine and folder.")
    assert _help_text("Nothing to fill.") == "Nothing to fill."


# --- commands and the command-line reference on a small app ----------------------------


class _WithAMissingCommand(typer.core.TyperGroup):
    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), "missing"]


def _small_app() -> Any:
    small = typer.Typer(add_completion=False, cls=_WithAMissingCommand,
                        help="A small   app |  of\n two commands.")

    @small.command(help="Squeeze the rows.", epilog="Read the   manual.\n\n")
    def compress(path: Annotated[str, typer.Argument(help="The | file.")],
                 level: Annotated[int, typer.Option("--level", "-l", help="How hard.")] = 3,
                 keep: Annotated[bool, typer.Option("--keep/--drop", help="Keep it.")] = True,
                 lose: Annotated[bool, typer.Option("--lose/--win")] = False,
                 loud: Annotated[bool, typer.Option("--loud", help="Shout.")] = False,
                 secret: Annotated[int, typer.Option("--secret", hidden=True)] = 1,
                 model: Annotated[Optional[str], typer.Option(  # noqa: UP045
                     "--model", "-m", help=f"Now: {HELP_NOW}")] = None,
                 ) -> None: ...

    @small.command(hidden=True)
    def ghost() -> None: ...

    @small.command()
    def other(no_cache: Annotated[bool, typer.Option("--no-cache")] = False,
              model: Annotated[Optional[str], typer.Option("--model")] = None,  # noqa: UP045
              ) -> None: ...

    @small.command()
    def report(n: Annotated[int, typer.Option("--n")] = 5,
               summarizer: Annotated[str, typer.Argument()] = "x") -> None:
        """Report    it."""

    return typer.main.get_command(small)


def test_commands_lists_the_root_then_each_shown_command_in_order():
    group = _small_app()
    assert [(name, command.name) for name, command in commands(group)] == [
        ("", group.name), ("compress", "compress"), ("other", "other"),
        ("report", "report")]
    assert [name for name, _ in commands(GROUP)] == [
        "", "compress", "analyze", "report", "validate"]


def test_cli_reference_of_a_small_app_word_for_word():
    assert cli_reference(_small_app(), prog="tool").split("\n") == [
        "## `tool`",
        "",
        "A small app | of two commands.",
        "",
        "Manual page: [index.md](../index.md).",
        "",
        "```",
        "tool [OPTIONS] COMMAND [ARGS]...",
        "```",
        "",
        "| option | default | what it does |",
        "| --- | --- | --- |",
        "| `--help` |  | Show this message and exit. |",
        "",
        "## `tool compress`",
        "",
        "Squeeze the rows.",
        "",
        "Manual page: [getting-started.md](../getting-started.md).",
        "",
        "```",
        "tool compress [OPTIONS] {path}",
        "```",
        "",
        "| option | default | what it does |",
        "| --- | --- | --- |",
        "| `PATH` |  | The \\| file. |",
        "| `-l, --level <int>` | `3` | How hard. [default: 3] |",
        "| `--keep / --drop` | `--keep` | Keep it. [default: keep] |",
        "| `--lose / --win` | `--win` | [default: win] |",
        "| `--loud` |  | Shout. |",
        "| `-m, --model <str>` |  | Now: shown by --help: it depends on the machine and "
        "folder |",
        "| `--help` |  | Show this message and exit. |",
        "",
        "```",
        "Read the   manual.",
        "```",
        "",
        "## `tool other`",
        "",
        "```",
        "tool other [OPTIONS]",
        "```",
        "",
        "| option | default | what it does |",
        "| --- | --- | --- |",
        "| `--no-cache` |  |  |",
        "| `--model <str>` |  |  |",
        "| `--help` |  | Show this message and exit. |",
        "",
        "## `tool report`",
        "",
        "Report it.",
        "",
        "Manual page: [inspect.md](../inspect.md).",
        "",
        "```",
        "tool report [OPTIONS] [summarizer]",
        "```",
        "",
        "| option | default | what it does |",
        "| --- | --- | --- |",
        "| `--n <int>` | `5` | [default: 5] |",
        "| `SUMMARIZER` |  |  |",  # an argument shows no default
        "| `--help` |  | Show this message and exit. |",
        "",
    ]


def test_cli_reference_default_program_name_and_the_real_apps_pages():
    page = cli_reference(GROUP)
    titles = [line for line in page.split("\n") if line.startswith("## ")]
    assert titles == ["## `trajectory-compressor`", "## `trajectory-compressor compress`",
                      "## `trajectory-compressor analyze`", "## `trajectory-compressor report`",
                      "## `trajectory-compressor validate`"]
    for line in [
        "Manual page: [index.md](../index.md).",
        "Manual page: [getting-started.md](../getting-started.md).",
        "trajectory-compressor [OPTIONS] COMMAND [ARGS]...",
        "trajectory-compressor compress [OPTIONS] {input}",
        "| `--version` |  | Print the version and exit. |",
        "| `-o, --output <str>` |  | Output file (file input) or folder (folder/glob input). "
        "Default: <stem>_compressed.<ext> / <folder>_compressed/. |",
        "| `--batch-max-requests <int>` | `50000` | Most requests per request file. "
        "[default: 50000] |",
        "| `--seed <int>` | `42` | Seed for --sample-percent. [default: 42] |",
        "| `--no-cache` |  | Do not read or write the summary cache. |",
        "| `OUTPUT` |  | A compressed output (file or folder) to check. |",
        "| `-q, --quiet` |  | Only the problems. |",
        "| `--on-low-fidelity <str>` |  | A summary still under --min-fidelity after its "
        "repair: keep it, use the extractive summary, or leave the row uncompressed "
        "(keep\\|extractive\\|uncompressed; default keep). |",
        "| `--verify-distill / --no-verify-distill` |  | Read every distilled row back and "
        "compare it with what a terminal showed for its original outputs "
        "(compression.verify_distill): a row that differs is written undistilled, the "
        "failure in its metrics (distill.verify_failed) and the run's warnings. Costs about "
        "one more pass over the tool outputs. |",
    ]:
        assert line in page.split("\n"), line
    # The machine-dependent part of --summarizer's help is never in the page.
    assert HELP_NOW not in page
    assert ("Here and now: shown by --help: it depends on the machine and folder. |"
            in page)
    # Each command's epilog closes its section, in a code block.
    for name in ["", "compress", "analyze", "report", "validate"]:
        assert f"{manual_epilog(name)}\n```\n" in page, name
    assert page.count("| option | default | what it does |") == 5


# --- the configuration reference -------------------------------------------------------


def test_config_keys_in_the_sections_order():
    keys = list(config_keys())
    assert keys[:3] == [("tokenizer", "name", "tokenizer_name"),
                        ("tokenizer", "trust_remote_code", "trust_remote_code"),
                        ("tokenizer", "counting", "token_counting")]
    assert keys[-1] == ("metrics", "output_file", "metrics_output_file")
    assert len(keys) == sum(len(k) for k in SECTIONS.values())
    assert ("summarization", "backend", "summarizer") in keys


def test_key_bound_in_validations_own_words():
    assert key_bound("target_max_tokens") == "must be positive"  # -1e9 and 0 said once
    assert key_bound("summary_target_tokens") == (
        "must be positive; must be smaller than compression.target_max_tokens")
    assert key_bound("temperature") == "must be between 0 and 2"
    assert key_bound("min_fidelity") == "must be between 0 and 1"
    assert key_bound("max_invented") == "must be a whole number >= 0"
    assert key_bound("max_retries") == "must be at least 1"
    assert key_bound("retry_delay") == "must be >= 0"
    assert key_bound("protect_last_n_turns") == "must be >= 0"
    assert key_bound("ray_actors") == "must be >= 1"
    assert key_bound("summarizer") == "must be one of openai, extractive, local, batch, auto"
    assert key_bound("token_counting") == "must be one of turns, chat_template"
    # A name checked for its shape, a text any value of which is kept, a flag, a list.
    assert key_bound("api_key_env") == ""
    assert key_bound("tokenizer_name") == ""
    assert key_bound("trust_remote_code") == ""
    assert key_bound("endpoints") == ""
    assert key_bound("max_fallback_share") == ""


def test_setting_flags_of_the_real_app():
    assert setting_flags(GROUP) == {
        "output_format": ["--output-format"],
        "target_max_tokens": ["--target-max-tokens"],
        "summary_target_tokens": ["--summary-target-tokens"],
        "tokenizer_name": ["--tokenizer"],
        "strategy": ["--strategy"],
        "mask_keep_last": ["--mask-keep-last"],
        "mask_exclude_tools": ["--mask-exclude-tools"],
        "output_mode": ["--output-mode"],
        "distill": ["--distill"],
        "verify_distill": ["--verify-distill", "--no-verify-distill"],
        "over_limit_strategy": ["--over-limit-strategy"],
        "protect_last_n_turns": ["--protect-last-n-turns"],
        "protect_first_system": ["--protect-first-system", "--no-protect-first-system"],
        "protect_first_human": ["--protect-first-human", "--no-protect-first-human"],
        "protect_first_gpt": ["--protect-first-gpt", "--no-protect-first-gpt"],
        "protect_first_tool": ["--protect-first-tool", "--no-protect-first-tool"],
        "summarizer": ["--summarizer"],
        "base_url": ["--base-url"],
        "summarization_model": ["--model"],
        "api_key_env": ["--api-key-env"],
        "max_concurrent_requests": ["--max-concurrent-requests"],
        "local_model": ["--local-model"],
        "summary_tolerance": ["--summary-tolerance"],
        "min_fidelity": ["--min-fidelity"],
        "on_low_fidelity": ["--on-low-fidelity"],
        "max_invented": ["--max-invented"],
        "summary_references": ["--summary-references"],
        "cache_enabled": ["--no-cache"],
        "cache_path": ["--cache-path"],
        "allow_fallback": ["--allow-fallback"],
        "allow_insecure_http": ["--allow-insecure-http"],
        "dataset_format": ["--format"],
        "token_counting": ["--token-counting"],
        "chat_template": ["--chat-template"],
        "checkpoint_rows": ["--checkpoint-every"],
        "engine": ["--engine"],
        "ray_actors": ["--ray-actors"],
        "max_fallback_share": ["--max-fallback-share"],
    }


def test_setting_flags_of_a_small_app():
    # --model and --no-cache set settings not named after them; a short spelling is no
    # flag of the reference; an argument named after a setting sets nothing; an option
    # in two commands is listed once.
    assert setting_flags(_small_app()) == {
        "summarization_model": ["--model"], "cache_enabled": ["--no-cache"]}


def test_config_reference_word_for_word_for_three_sections():
    page = config_reference(GROUP).split("\n")
    assert page[:8] == [
        "### `tokenizer`",
        "",
        "| key | type | default | allowed | flag |",
        "| --- | --- | --- | --- | --- |",
        "| `tokenizer.name` | str | `deepseek-v4` |  | `--tokenizer` |",
        "| `tokenizer.trust_remote_code` | bool | `false` | true or false |  |",
        "| `tokenizer.counting` | str | `turns` | must be one of turns, chat_template | "
        "`--token-counting` |",
        "| `tokenizer.chat_template` | str? | `null` |  | `--chat-template` |",
    ]
    start = page.index("### `protected_turns`")
    assert page[start - 1:start + 10] == [
        "",
        "### `protected_turns`",
        "",
        "| key | type | default | allowed | flag |",
        "| --- | --- | --- | --- | --- |",
        "| `protected_turns.first_system` | bool | `true` | true or false | "
        "`--protect-first-system`, `--no-protect-first-system` |",
        "| `protected_turns.first_human` | bool | `true` | true or false | "
        "`--protect-first-human`, `--no-protect-first-human` |",
        "| `protected_turns.first_gpt` | bool | `true` | true or false | "
        "`--protect-first-gpt`, `--no-protect-first-gpt` |",
        "| `protected_turns.first_tool` | bool | `true` | true or false | "
        "`--protect-first-tool`, `--no-protect-first-tool` |",
        "| `protected_turns.last_n_turns` | int | `4` | must be >= 0 | "
        "`--protect-last-n-turns` |",
        "",
    ]
    assert page[-8:] == [
        "### `metrics`",
        "",
        "| key | type | default | allowed | flag |",
        "| --- | --- | --- | --- | --- |",
        "| `metrics.enabled` | bool | `true` | true or false |  |",
        "| `metrics.per_trajectory` | bool | `true` | true or false |  |",
        "| `metrics.output_file` | str | `compression_metrics.json` | accepted, no effect: "
        "the aggregate metrics are always <output stem>_metrics.json beside the output, "
        "where `report` finds them |  |",
        "",
    ]


def test_config_reference_rows_of_each_kind():
    rows = config_reference(GROUP).split("\n")
    for row in [
        "| `compression.target_max_tokens` | int | `15250` | must be positive | "
        "`--target-max-tokens` |",
        "| `compression.summary_target_tokens` | int | `750` | must be positive; must be "
        "smaller than compression.target_max_tokens | `--summary-target-tokens` |",
        "| `compression.mask_exclude_tools` | list | `[]` |  | `--mask-exclude-tools` |",
        "| `summarization.model` | str | `google/gemini-3-flash-preview` |  | `--model` |",
        "| `summarization.temperature` | number? | `0.3` | must be between 0 and 2 |  |",
        "| `summarization.retry_delay` | number | `2.0` | must be >= 0 |  |",
        "| `summarization.backend` | str | `openai` | must be one of openai, extractive, "
        "local, batch, auto | `--summarizer` |",
        "| `summarization.endpoints` | list | `[]` | a list of mappings with base_url, model, "
        "api_key_env, weight, max_concurrency, rpm, tpm |  |",
        "| `summarization.cache` | bool | `true` | true or false | `--no-cache` |",
        "| `summarization.min_fidelity` | number? | `null` | must be between 0 and 1 | "
        "`--min-fidelity` |",
        "| `summarization.max_fallback_share` | gate? | `null` |  | `--max-fallback-share` |",
        "| `output.summary_notice_text` | str | `Some of your previous tool responses may be "
        "summarized to preserve context.` |  |  |",
        "| `processing.num_workers` | int | `4` | must be >= 1; accepted, no effect: rows "
        "are summarized "
        "concurrently in one process, up to processing.max_concurrent_requests requests, "
        "and tokens are counted in batches; there are no worker processes to size |  |",
        "| `processing.skip_under_target` | bool | `true` | true or false; accepted, no "
        "effect: a "
        "trajectory at or under compression.target_max_tokens is always written unchanged "
        "(summarizing a row that fits only loses data) |  |",
        "| `processing.checkpoint_rows` | int | `20000` | must be >= 1 | "
        "`--checkpoint-every` |",
        "| `metrics.output_file` | str | `compression_metrics.json` | accepted, no effect: "
        "the aggregate metrics are always <output stem>_metrics.json beside the output, "
        "where `report` finds them |  |",
    ]:
        assert row in rows, row
    assert [r for r in rows if r.startswith("### ")] == [f"### `{s}`" for s in SECTIONS]
    assert rows[-1] == "" and rows[-2].startswith("| `metrics.output_file` |")
