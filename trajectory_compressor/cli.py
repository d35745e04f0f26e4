"""The `trajectory-compressor` command: flags become a config, the library does the work."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Annotated, Optional

import typer

from .config import CompressionConfig
from .errors import CompressorError, ConfigError, InputError

app = typer.Typer(
    name="trajectory-compressor",
    help="Compress long multi-turn agent trajectories (ShareGPT JSONL/Parquet) to fit a "
    "training context window, replacing just enough middle turns with one summary turn.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DEFAULT_CONFIG = Path("configs/default.yaml")

ConfigOpt = Annotated[
    Optional[Path],  # noqa: UP045 - typer needs Optional on 3.10
    typer.Option("--config", "-c", help="YAML config (the reference's schema plus extensions). "
                 "Default: configs/default.yaml when it exists, else built-in defaults."),
]
TargetOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--target-max-tokens", help="Token budget each trajectory must fit."),
]
SummaryTargetOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--summary-target-tokens", help="Approximate length of the summary turn."),
]
TokenizerOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--tokenizer", help="Tokenizer: 'deepseek-v4' (bundled, offline), a local "
                 "folder, or a hub name already in the local cache."),
]


def _load_config(path: Path | None) -> CompressionConfig:
    if path is not None:
        if not path.exists():
            raise ConfigError(f"config file not found: {path}")
        return CompressionConfig.from_yaml(path)
    if DEFAULT_CONFIG.exists():
        return CompressionConfig.from_yaml(DEFAULT_CONFIG)
    return CompressionConfig()


def _fail(exc: BaseException, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    message = str(exc) or type(exc).__name__
    typer.echo(f"error: {message}", err=True)
    code = 2 if isinstance(exc, (ConfigError, InputError)) else 1
    raise typer.Exit(code)


@app.command()
def compress(
    input: Annotated[str, typer.Argument(help="A .jsonl/.jsonl.gz/.parquet file, a folder "
                                         "of them, a glob, a Hugging Face save_to_disk "
                                         "folder, or a dataset name for datasets streaming.",
                                         show_default=False)],
    output: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--output", "-o", help="Output file (file input) or folder (folder/glob "
                     "input). Default: <stem>_compressed.<ext> / <folder>_compressed/."),
    ] = None,
    config: ConfigOpt = None,
    target_max_tokens: TargetOpt = None,
    summary_target_tokens: SummaryTargetOpt = None,
    tokenizer: TokenizerOpt = None,
    summarizer: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--summarizer", help="openai (HTTP endpoints), extractive (no model, "
                     "offline) or local (embedded llama.cpp)."),
    ] = None,
    sample_percent: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option("--sample-percent", help="Keep each row with this probability (0-100], "
                     "seeded, in input order."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --sample-percent.")] = 42,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Analyze only: no LLM call, "
                                          "nothing written.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run from "
                                         "its checkpoint beside the output (starts fresh "
                                         "when there is none).")] = False,
    output_format: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--output-format", help="same (as the input; Parquet for Hugging Face "
                     "datasets), jsonl or parquet."),
    ] = None,
    split: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--split", help="Hugging Face dataset split (default: every split)."),
    ] = None,
    data_files: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--data-files", help="Data files of a Hugging Face dataset, as "
                     "datasets.load_dataset takes them: PATTERN or SPLIT=PATTERN; repeatable. "
                     "E.g. INPUT json --data-files 'logs/*.jsonl'."),
    ] = None,
    checkpoint_every: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--checkpoint-every", help="Rows between resume checkpoints (they are "
                     "also written every processing.checkpoint_seconds)."),
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first bad or failed "
                                         "row (exit 1, no output committed).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or summary.")]
    = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Compress trajectories over the target; write data, metrics, over-limit and rejects."""
    try:
        cfg = _load_config(config).replace(
            target_max_tokens=target_max_tokens,
            summary_target_tokens=summary_target_tokens,
            tokenizer_name=tokenizer,
            summarizer=summarizer,
            output_format=output_format,
            checkpoint_rows=checkpoint_every,
        )
        if sample_percent is not None and not 0 < sample_percent <= 100:
            raise ConfigError(f"--sample-percent must be in (0, 100], got {sample_percent:g}")
        from .run import analyze_input, compress_input

        if dry_run:
            analyze_input(input, cfg, sample_percent=sample_percent, seed=seed)
            return
        code = compress_input(input, output, cfg, sample_percent=sample_percent, seed=seed,
                              strict=strict, quiet=quiet, resume=resume, split=split,
                              data_files=_data_files(data_files))
    except (CompressorError, OSError) as exc:
        _fail(exc, debug)
    except KeyboardInterrupt:
        typer.echo("interrupted; nothing was committed under the final names; run the same "
                   "command with --resume to continue", err=True)
        raise typer.Exit(130) from None
    raise typer.Exit(code)


def _data_files(values: list[str] | None) -> str | list[str] | dict[str, list[str]] | None:
    """``--data-files`` values as `datasets` takes them: one pattern, a list, or a mapping
    of split to patterns when given as ``SPLIT=PATTERN``."""
    if not values:
        return None
    by_split: dict[str, list[str]] = {}
    plain: list[str] = []
    for value in values:
        split, sep, pattern = value.partition("=")
        if sep and split.isidentifier() and not Path(value).exists():
            by_split.setdefault(split, []).append(pattern)
        else:
            plain.append(value)
    if by_split and plain:
        raise ConfigError("--data-files: give every pattern as SPLIT=PATTERN, or none")
    if by_split:
        return by_split
    return plain[0] if len(plain) == 1 else plain


@app.callback()
def _root() -> None:
    """Compress long agent trajectories to fit a training context window."""


def main() -> None:
    """Console-script entry point."""
    app(prog_name="trajectory-compressor")
