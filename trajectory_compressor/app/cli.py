"""The `trajectory-compressor` command: flags become a config, the library does the work."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Optional

import click
import typer

from ..core.config import CompressionConfig
from ..core.errors import CompressorError, ConfigError, FatalSummaryError, InputError
from ..core.terminal import inert
from .flags import HELP_FILLERS, FlagCommand, FlagGroup, Flags, reflowed, spread_flags
from .manual import manual_epilog
from .options import (
    Allowances,
    Batch,
    Budget,
    Cache,
    CIGates,
    ConfigOpt,
    DebugOpt,
    Endpoints,
    Engine,
    Fidelity,
    InputArg,
    NoConfigOpt,
    Protected,
    Reading,
    Rows,
    Run,
    Strategy,
    SummarizerRows,
    ToolOutputs,
    Windowing,
    config_overrides,
)

if TYPE_CHECKING:
    from ..inspect.analyze import Prices

app = typer.Typer(
    name="trajectory-compressor",
    help="Compress long multi-turn agent trajectories (ShareGPT JSONL/Parquet) to fit a "
    "training context window, replacing just enough middle turns with one summary turn.",
    no_args_is_help=True,
    add_completion=False,
    cls=FlagGroup,
    pretty_exceptions_enable=False,
)

EXIT_CODES = """Exit codes:
  0    done
  1    done, but some rows were rejected or failed (or --strict
       stopped the run)
  2    usage or configuration error (flags, config, output paths);
       also an endpoint that rejects the key or fails its first
       requests, a dead local server, a run whose lock was deleted,
       a run none of whose summaries came from the LLM (outputs
       written; --allow-fallback accepts the LLM cases)
  3    a CI gate (--max-over-limit, ...) failed; all was written;
       wins over 1
  4    the run stopped on an I/O or internal error (--debug shows
       the traceback)
  130  interrupted (Ctrl-C); --resume continues"""

# Shown in compress --help; HELP_NOW is filled in when the help is shown.
HELP_NOW = "{summarizer here and now}"
SUMMARIZER_DEFAULT = (
    "Default with no config file, or one that names no endpoint (backend: auto): openai when "
    "--base-url, a config's endpoint or $OPENROUTER_API_KEY names one; local only with "
    "--summarizer local or --local-model; else extractive (facts taken from the row, none "
    "invented), even with the 'local' extra installed. A config that names a model or base "
    "URL without summarization.backend (the Hermes schema) means openai. Here and now: "
    + HELP_NOW + ".")

SummarizerOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--summarizer", rich_help_panel=Endpoints.panel,
    help="openai (HTTP endpoints), extractive (no model, offline), local (a "
    "llama.cpp server on this machine; needs the 'local' extra) or batch (two phases through an "
    "OpenAI Batch API or vllm run-batch file: see --batch-dir). " + SUMMARIZER_DEFAULT)]
# analyze's: the summarizer whose work the dry run projects.
ProjectedSummarizerOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--summarizer", rich_help_panel=Endpoints.panel,
    help="openai, extractive or local. With extractive the dry run builds the "
    "same summaries compress would (exact figures); with an LLM it projects summaries of "
    "--summary-target-tokens tokens. Default: the one compress would use (see compress "
    "--help).")]


def _load_config(path: Path | None, no_config: bool = False) -> CompressionConfig:
    config = _read_config(path, no_config)
    for message in config.ignored_settings():
        typer.echo(inert(f"warning: {message}"), err=True)
    return config


def _read_config(path: Path | None, no_config: bool = False) -> CompressionConfig:
    """The named config, else the user's (`config_file.choose_config`); a config file
    without summarization.backend means openai when it names an endpoint (as in Hermes),
    auto otherwise."""
    from .config_file import choose_config

    return choose_config(path, no_config).config


def _fail(exc: BaseException, debug: bool) -> NoReturn:
    """One sentence on stderr (a traceback too with --debug) and the exit code of SPEC §7:
    2 usage or configuration, 1 a --strict stop, 4 an I/O or internal error."""
    if isinstance(exc, (typer.Exit, click.exceptions.Exit, click.ClickException,
                        click.exceptions.Abort)):
        raise exc
    from ..engine.writer import StrictStop

    if debug:
        traceback.print_exc()
    # A fatal summarizer error (a rejected API key) is a configuration problem too.
    if isinstance(exc, (ConfigError, InputError, FatalSummaryError)):
        code, message = 2, str(exc)
    elif isinstance(exc, StrictStop):
        code, message = 1, str(exc)
    elif isinstance(exc, CompressorError):
        code, message = 4, str(exc)
    elif isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        code, message = 4, f"I/O error: {where}{exc.strerror or exc}; the run stopped"
    else:
        text = " ".join(str(exc).split())[:300]
        code, message = 4, (f"internal error ({type(exc).__name__}: {text}); the run stopped"
                            + ("" if debug else "; --debug shows the traceback"))
    typer.echo(inert(f"error: {message or type(exc).__name__}"), err=True)
    raise typer.Exit(code)


def command(interrupted: str = "interrupted") -> Callable[[Callable[..., int]], Any]:
    """A command of `app`: its `Flags` groups spread into their options, the code it
    returns its exit code, an error one sentence and SPEC §7's exit code (`_fail`), Ctrl-C
    ``interrupted`` on stderr and exit code 130."""

    def register(run: Callable[..., int]) -> Any:
        @wraps(run)
        def exit_with(**flags: Any) -> NoReturn:
            try:
                code = run(**flags)
            except Exception as exc:
                _fail(exc, flags["debug"])
            except KeyboardInterrupt:
                typer.echo(interrupted, err=True)
                raise typer.Exit(130) from None
            raise typer.Exit(code)

        return app.command(cls=FlagCommand, help=reflowed(run.__doc__),
                           epilog=manual_epilog(run.__name__))(
            spread_flags(exit_with))

    return register


def _settings(path: Path | None, no_config: bool, *groups: Flags, endpoints: Endpoints,
              **flags: Any) -> CompressionConfig:
    """The config (`_load_config`) with what ``groups``, ``endpoints`` and ``flags`` give
    in place of its own settings."""
    config = _load_config(path, no_config).replace(**config_overrides(*groups, endpoints),
                                                   **flags)
    return endpoints.named(config)


@command("interrupted; nothing was committed under the final names; run the same command "
         "with --resume to continue")
def compress(
    input: InputArg,
    *,
    output: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--output", "-o", help="Output file (file input) or folder (folder/glob input). Default: "
        "<stem>_compressed.<ext> / <folder>_compressed/.")] = None,
    output_format: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--output-format", help="same (as the input; Parquet for Hugging Face datasets), jsonl "
        "or parquet.")] = None,
    config: ConfigOpt = None,
    no_config: NoConfigOpt = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Analyze only: no LLM call, "
                                          "nothing written.")] = False,
    run: Run,
    # The panels of --help in this order: what to fit, how, then where and how it runs.
    budget: Budget,
    strategy: Strategy,
    windowing: Windowing,
    summarizer_rows: SummarizerRows,
    tool_outputs: ToolOutputs,
    protected: Protected,
    summarizer: SummarizerOpt = None,
    endpoints: Endpoints,
    fidelity: Fidelity,
    cache: Cache,
    allowances: Allowances,
    batch: Batch,
    rows: Rows,
    reading: Reading,
    engine: Engine,
    gates: CIGates,
    debug: DebugOpt = False,
) -> int:
    """Compress trajectories over the target; write data, metrics, over-limit and rejects."""
    cfg = _settings(config, no_config, budget, protected, reading, tool_outputs, strategy,
                    cache, fidelity, allowances, engine, windowing, endpoints=endpoints,
                    summarizer=summarizer, output_format=output_format)
    cfg = _settle_summarizer(cfg, announce=not (run.quiet or dry_run or endpoints.base_url))
    if endpoints.base_url and cfg.summarizer == "local":
        raise ConfigError("--base-url names endpoints for --summarizer openai (or batch); "
                          "--summarizer local starts its own server: give one or the other")
    limits = gates.parsed()
    options = rows.options(**run.values(),
                           summarizer_rows=summarizer_rows.emit_summarizer_rows,
                           gates=tuple((g.what, g.shown_limit) for g in limits))
    engine.join()
    from .commands import analyze_input, compress_input

    if limits and (dry_run or cfg.summarizer == "batch" or batch.given):
        raise ConfigError("--max-over-limit/--max-failed/--max-rejected/--max-fallback-share "
                          "gate a finished run: not --dry-run; for --summarizer batch, give "
                          "them to report OUTPUT after phase 2")
    if dry_run:
        return analyze_input(input, cfg, options)
    if cfg.summarizer == "batch" or batch.given:
        from .batch import batch_input

        return batch_input(input, output, cfg, options, batch_dir=batch.batch_dir,
                           results=batch.batch_results, limits=batch.limits(),
                           prices=_prices(batch.price_in, batch.price_out))
    if batch.price_in is not None or batch.price_out is not None:
        raise ConfigError("--price-in/--price-out go with --summarizer batch (or analyze)")
    return compress_input(input, output, cfg, options, gates=limits)


@command()
def analyze(
    input: InputArg,
    *,
    config: ConfigOpt = None,
    no_config: NoConfigOpt = False,
    probe: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--probe", metavar="N", min=1, help="Time N real summary requests (regions of rows "
        "compress would summarize, through its summarizer and endpoints; N paid requests, no "
        "cache) for the time estimate. Without it the estimate assumes "
        "--seconds-per-call.")] = None,
    seconds_per_call: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--seconds-per-call", help="Seconds one summary request takes, for the time estimate "
        "without --probe (default: 10 for openai, 15 for local).")] = None,
    targets: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--targets", help="Compare several targets in one pass, e.g. 8192,16384,32768 (tokens "
        "are counted once).")] = None,
    price_in: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--price-in", help="USD per million summarizer input tokens (for the projected "
        "cost).")] = None,
    price_out: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--price-out", help="USD per million summarizer output tokens.")] = None,
    json_path: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--json", help="Also write the figures as JSON to this file ('-' prints the JSON instead "
        "of the text).")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an existing --json file that is not an analysis this "
        "tool wrote (without it such a file is never replaced).")] = False,
    debug: DebugOpt = False,
    # The panels of --help in compress's order.
    budget: Budget,
    strategy: Strategy,
    windowing: Windowing,
    tool_outputs: ToolOutputs,
    protected: Protected,
    summarizer: ProjectedSummarizerOpt = None,
    endpoints: Endpoints,
    rows: Rows,
    reading: Reading,
) -> int:
    """Dry run: token distribution, what compress would do and how long it would take;
    no LLM call (but --probe's), writes nothing."""
    # The time estimate's summarizer, endpoints and concurrency, as compress takes them.
    cfg = _settings(config, no_config, budget, protected, reading, tool_outputs, strategy,
                    windowing,
                    endpoints=endpoints, summarizer=summarizer)
    options = rows.options()
    target_list = _parse_targets(targets) if targets is not None else None
    if target_list and budget.target_max_tokens is not None:
        raise ConfigError("give either --target-max-tokens or --targets, not both")
    prices = _prices(price_in, price_out)
    from .commands import analyze_input

    return analyze_input(input, cfg, options, targets=target_list, prices=prices,
                         json_path=json_path, probe=probe, seconds_per_call=seconds_per_call,
                         overwrite=overwrite)


@command()
def report(
    output: Annotated[str, typer.Argument(help="The file or folder a compress run wrote; "
                                          "its _metrics.json and _over_limit.jsonl are "
                                          "found beside it.", show_default=False)],
    *,
    show: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--show", help="Print one trajectory's turns as a timeline: an id, a location "
        "(file:line) or a 0-based row index of the output.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
    = False,
    limit: Annotated[int, typer.Option("--limit", help="Rows listed in the table (0: all).",
                                       min=0)] = 50,
    html: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--html", help="Write the run as one self-contained HTML page to this file: charts, the "
        "over-limit table, each listed row's timeline.")] = None,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Over-limit and failed rows "
                                          "the --html page lists (the worst).", min=1)] = 200,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an existing --html file that is not a page this tool "
        "wrote (without it only an earlier report page is replaced).")] = False,
    config: ConfigOpt = None,
    no_config: NoConfigOpt = False,
    budget: Budget,
    gates: CIGates,
    debug: DebugOpt = False,
) -> int:
    """Inspect a finished run: figures, over-limit and failed rows, one row's turns.

    --show uses the settings the run recorded in its metrics file (target, protected
    turns, tokenizer); --config and the flags override them.
    """
    base = _load_config(config, no_config) if config is not None else None
    from .commands import report_output

    return report_output(output, base, budget.overrides(), show=show, as_json=as_json,
                         limit=limit, fallback=lambda: _load_config(None, no_config),
                         html=html, max_rows=max_rows, gates=gates.parsed(), overwrite=overwrite)


@command()
def validate(
    output: Annotated[str, typer.Argument(help="A compressed output (file or folder) to "
                                          "check.", show_default=False)],
    *,
    config: ConfigOpt = None,
    no_config: NoConfigOpt = False,
    budget: Budget,
    reading: Reading,
    allow_over_limit: Annotated[bool, typer.Option(
        "--allow-over-limit", help="Rows over the target do not fail the check (they are "
        "still counted in the closing line and --json). Without it any row over the target "
        "is a problem (exit 1), flagged still_over_limit by its run or not; a "
        "--max-over-limit gate given here, or else the one compress was given (recorded in "
        "the metrics file), decides instead (exit 3 past it).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (rows, "
                                          "problems by kind, each problem, the settings) "
                                          "instead of text.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the problems.")] = False,
    gates: CIGates,
    debug: DebugOpt = False,
) -> int:
    """Check every row against its dialect's rules, the target and its run's record;
    exit 1 on a problem.

    Rules: roles known; every tool call answered by a tool result right after it, and
    every tool result after the call it answers (Hermes <tool_call>/<tool_response>,
    OpenAI tool_calls/tool_call_id, LLaMA-Factory function_call/observation); tool
    arguments valid JSON; LLaMA-Factory turns alternating; at most one summary in a row;
    no row repeated (same id, or same content); a row's metrics agreeing with it (marked
    compressed only with a summary, its recorded token count its count); a compressed row
    no longer than the original; and the row's count (per turn, or with --token-counting
    chat_template as the trainer sees it) within the target. A row over the target is a
    problem of its own kind, flagged still_over_limit by its run or not: exit 1 unless
    --allow-over-limit allows it, or a --max-over-limit gate judges it (given here, or
    else the run's own, which compress records in the metrics file). The output is checked
    against its metrics file too: that file must be this output's run's (not another
    run's), the output unchanged since its run committed it (size and SHA-256), and its
    row count the run's. One line per problem (location and rule), then a closing line
    naming every kind of problem found.

    The target, summary size, counting mode, tokenizer and chat-template file are those
    the run recorded in its metrics file beside OUTPUT. --config wins over them, but for
    the counting mode and chat-template file it does not set (the run's are kept); each
    flag overrides both; without a metrics file, the defaults. A chat-template file that
    is gone is an error (exit 2). The closing line says which settings it used. An output
    without rows is a problem unless its run's metrics say it had none.
    """
    from .config_file import choose_config, config_keys

    base = _load_config(config, no_config) if config is not None else None
    chosen = choose_config(None, no_config)
    default = (chosen.origin if chosen.path is None else f"defaults from {chosen.origin}",
               chosen.config)
    from .commands import validate_output_text

    # Flag -> value, for the closing line to name the flags that override the settings.
    return validate_output_text(output, base, {**budget.by_flag(), **reading.by_flag()},
                                default, quiet=quiet, gates=gates.parsed(),
                                base_keys=config_keys(config) if config else frozenset(),
                                base_name=f"--config {config}", as_json=as_json,
                                allow_over_limit=allow_over_limit)


def _key_environ() -> Mapping[str, str]:
    """The environment, with API key variables it leaves unset read from `.env` files."""
    from ..summarizers.dotenv import key_environ

    return key_environ()


def _settle_summarizer(config: CompressionConfig, announce: bool) -> CompressionConfig:
    """``config`` with `auto` replaced by the backend this machine and folder call for;
    with ``announce``, one line on stderr says which and how to choose another."""
    from ..summarizers import AUTO, default_summarizer

    if config.summarizer != AUTO:
        return config
    name, why = default_summarizer(config, _key_environ())
    if announce:
        others = "|".join(n for n in ("local", "extractive", "openai") if n != name)
        typer.echo(f"summarizer: {name} ({why}); choose another with --summarizer {others} "
                   "or --base-url URL", err=True)
    return config.replace(summarizer=name)


def _summarizer_here_and_now() -> str:
    """The summarizer compress would use with no flags, run from this folder, and why."""
    from ..summarizers import AUTO, default_summarizer
    from .config_file import choose_config

    try:
        chosen = choose_config(None)
    except CompressorError as exc:
        return f"unknown ({exc})"
    config = chosen.config
    if config.summarizer != AUTO:
        return f"{config.summarizer} (summarization.backend in {chosen.origin})"
    name, why = default_summarizer(config, _key_environ())
    return f"{name} ({why})"


HELP_FILLERS[HELP_NOW] = _summarizer_here_and_now


def _parse_targets(text: str) -> list[int]:
    targets: list[int] = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not part.isdigit() or int(part) <= 0:
            raise ConfigError(f"--targets takes positive whole numbers separated by commas, "
                              f"got {text!r}")
        if int(part) not in targets:
            targets.append(int(part))
    return targets


def _prices(price_in: float | None, price_out: float | None) -> Prices | None:
    if price_in is None and price_out is None:
        return None
    for flag, value in (("--price-in", price_in), ("--price-out", price_out)):
        if value is not None and value < 0:
            raise ConfigError(f"{flag} must be >= 0, got {value:g}")
    from ..inspect.analyze import Prices

    return Prices(price_in or 0.0, price_out or 0.0)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"trajectory-compressor {version('trajectory-compressor')}")
        except PackageNotFoundError:
            typer.echo("trajectory-compressor (not installed: run bash scripts/setup.sh in "
                       "the clone)")
        raise typer.Exit()


@app.callback(epilog=EXIT_CODES + "\n\n" + manual_epilog())
def _root(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Compress long agent trajectories to fit a training context window."""


def main() -> None:
    """Console-script entry point."""
    app(prog_name="trajectory-compressor")
