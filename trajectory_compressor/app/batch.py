"""`compress --summarizer batch`: the two phases for the CLI, and what they print (§17)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ..core.config import CompressionConfig
from ..core.counted import counted
from ..core.errors import ConfigError
from ..core.terminal import inert
from ..engine.batch import BatchLimits, ExportResult, export_batch, finish_batch, has_endpoint
from ..engine.options import RunOptions
from ..summarizers.batch import ImportReport
from .commands import format_summary

if TYPE_CHECKING:
    from ..inspect.analyze import Prices


def batch_input(
    input_spec: str,
    output: str | None,
    config: CompressionConfig,
    options: RunOptions,
    *,
    batch_dir: str | None,
    results: list[str] | None,
    limits: BatchLimits,
    prices: Prices | None = None,
) -> int:
    """Phase 1 (no ``results``: write the requests) or phase 2 (finish the run from the
    results, with ``options``); print what was done and what comes next, unless
    ``options`` are quiet; return the exit code."""
    if config.summarizer != "batch":
        raise ConfigError("--batch-dir and --batch-results go with --summarizer batch")
    if config.engine != "local":
        raise ConfigError("--summarizer batch runs on the local engine (--engine local): "
                          "its two phases write and read request files, and the provider "
                          "does the summarizing; use --engine ray with an online summarizer")
    if batch_dir is None:
        raise ConfigError("--summarizer batch needs --batch-dir DIR: the folder for the "
                          "request files and their manifest (phase 1), read again with "
                          "--batch-results (phase 2)")
    if not results:
        export = export_batch(input_spec, output, config, batch_dir, limits=limits,
                              options=options)
        if not options.quiet:
            print(inert(format_export(export, prices)))
        return 0
    if prices is not None:
        raise ConfigError("--price-in/--price-out project the cost of the requests phase 1 "
                          "writes; give them without --batch-results")
    report, result = finish_batch(input_spec, output, config, batch_dir, results,
                                  options=options)
    if not options.quiet:
        print(inert(format_import(report, online=has_endpoint(config))))
        print(inert(format_summary(result)))
    return result.exit_code


def format_export(export: ExportResult, prices: Prices | None = None) -> str:
    """What phase 1 wrote, its projected cost, and the commands that come next."""
    s = export.stats
    folder = export.folder
    lines = [
        f"Batch requests written: {s.requests:,} in {counted(len(export.files), 'file')} "
        f"under {folder} (model {export.model})",
        f"  rows             {export.rows:>10,}   rejected {export.rows_rejected:,}",
        f"  to summarize     {s.summaries:>10,}   sharing another row's request "
        f"{s.duplicates:,}, already in the summary cache {s.cached:,}",
    ]
    lines += [f"  {f.name:<24} {f.requests:>8,} requests {f.bytes / 1e6:>9.1f} MB"
              for f in export.files]
    lines.append(f"  input tokens     {s.prompt_tokens:>10,}   (the prompts, counted with the "
                 "run's tokenizer)")
    lines.append(f"  output tokens    {s.max_output_tokens:>10,}   (at most: max_tokens)")
    if prices is not None:
        cost = prices.cost(s.prompt_tokens, s.max_output_tokens)
        lines.append(f"  projected cost   ${cost:>9,.2f}   at most, at ${prices.input:g} in / "
                     f"${prices.output:g} out per million tokens")
    lines.append(f"  manifest         {folder / 'manifest.json'}")
    if not export.files:
        lines += ["", "Nothing to send: run the same command with --batch-results and no "
                  "file, or compress without --summarizer batch."]
        return "\n".join(lines)
    first = export.files[0].name
    request = shlex.quote(str(folder / first))
    answer = shlex.quote(str(folder / first.replace("requests-", "results-")))
    key = '-H "Authorization: Bearer $OPENAI_API_KEY"'
    lines += [
        "",
        "Next: have every request file answered, then run the same command again with",
        f"--batch-results {shlex.quote(str(folder / 'results-*.jsonl'))} (output and error "
        "files; repeat the flag or use a pattern).",
        "  OpenAI Batch API (about half the online price, within 24 h), for each file:",
        f"    curl https://api.openai.com/v1/files {key} -F purpose=batch -F file=@{request}",
        f"    curl https://api.openai.com/v1/batches {key} -H 'Content-Type: application/json' "
        "-d '{\"input_file_id\": \"FILE_ID\", \"endpoint\": \"/v1/chat/completions\", "
        "\"completion_window\": \"24h\"}'",
        f"    curl https://api.openai.com/v1/files/OUTPUT_FILE_ID/content {key} > {answer}",
        "    (and the same for the batch's error_file_id, if it has one)",
        "  vLLM on your own GPUs (no server needed), for each file:",
        f"    vllm run-batch -i {request} -o {answer} --model {shlex.quote(export.model)}",
    ]
    return "\n".join(lines)


def format_import(report: ImportReport, online: bool) -> str:
    """What the results files held, and where the unanswered requests go."""
    failed = sum(report.failed.values())
    kinds = ", ".join(f"{k} {n:,}" for k, n in report.failed.most_common())
    lines = [f"Batch results: {counted(report.lines, 'line')} in "
             f"{counted(len(report.files), 'file')}; "
             f"{counted(report.accepted, 'summary', 'summaries')} accepted, {failed:,} failed"
             + (f" ({kinds})" if kinds else "")]
    if report.missing:
        lines.append(f"  {counted(report.missing, 'exported request')} "
                     f"{'has' if report.missing == 1 else 'have'} no result")
    if report.unknown:
        lines.append(f"  {report.unknown:,} results answer requests this export does not hold "
                     "(loaded into the cache anyway)")
    if report.unreadable:
        lines.append(f"  {len(report.unreadable):,} lines unreadable, the first: "
                     f"{report.unreadable[0]}")
    if failed or report.missing:
        where = ("go to the configured endpoints" if online else
                 "get the extractive fallback (summary_source \"fallback\"); give --base-url "
                 "to send them online instead")
        lines.append(f"  rows whose request failed or has no result {where}")
    return "\n".join(lines)

