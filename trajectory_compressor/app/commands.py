"""Whole runs for the CLI: `compress_input`, `analyze_input` (dry run), `report_output`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.config import CompressionConfig
from ..core.counted import counted
from ..core.errors import ConfigError, InputError, RowError
from ..core.terminal import inert
from ..counting.tokens import TokenCounter
from ..dialects import row_turns
from ..engine.job import compress_dataset
from ..engine.local import RunResult
from ..engine.options import RunOptions
from ..engine.ours import is_analysis, is_report_page, refuse_foreign
from ..engine.paths import check_written_file, recorded_inputs
from ..formats import jsonio
from ..formats.base import write_atomic
from ..formats.links import resolve
from .strategy_text import strategy_lines
from .textfmt import one_line, reject_lines

if TYPE_CHECKING:
    from ..inspect.analyze import Prices
    from .gates import Gate
    from .report import RunReport


def compress_input(
    input_spec: str,
    output: str | None,
    config: CompressionConfig,
    options: RunOptions,
    *,
    gates: list[Gate] | None = None,
) -> int:
    """Compress ``input_spec`` into its outputs as `compress_dataset` does with
    ``options``; print the summary unless they are quiet; return the exit code.

    ``gates`` (CI gates) are checked once everything is written: one line each on stderr
    that failed, and exit code 3. A run none of whose summaries came from the LLM exits 2
    unless ``config.allow_fallback`` (`no_llm`); 2 wins over 3.
    """
    result = compress_dataset(input_spec, output, config, options=options)
    if not options.quiet:
        print(inert(format_summary(result)))
    code = result.exit_code
    metrics = result.metrics.to_dict()
    if config.max_fallback_share is not None and not any(
            g.what == "fallback_share" for g in gates or ()):
        from .gates import parse_gate

        # summarization.max_fallback_share; the flag, when given, replaces it.
        gates = [*(gates or ()), parse_gate("fallback_share", str(config.max_fallback_share))]
    if gates:
        from .gates import apply_gates, counts_of

        code = apply_gates(gates, counts_of(metrics), code)
    if not config.allow_fallback:
        from .no_llm import NO_LLM_EXIT, never_answered

        why = never_answered(metrics)
        if why is not None:
            sys.stdout.flush()
            print(inert(f"error: {why}"), file=sys.stderr, flush=True)
            return NO_LLM_EXIT
    return code


def format_summary(result: RunResult) -> str:
    """The final plain-text block (fits 80 columns)."""
    m = result.metrics
    d = m.to_dict()
    total = max(m.total_trajectories, 1)

    def pct(n: int) -> str:
        return f"{100 * n / total:5.1f}%"

    outputs = list(dict.fromkeys(p.parent if len(result.layout.outputs) > 1 else p
                                 for p in result.layout.outputs.values()))
    lines = [
        "Trajectory compression finished" + (" (resumed)" if result.resumed else ""),
        f"  rows             {m.total_trajectories:>10,}   rejected {m.rows_rejected:,}",
        f"  compressed       {m.trajectories_compressed:>10,}  {pct(m.trajectories_compressed)}",
        f"  skipped (under)  {m.trajectories_skipped_under_target:>10,}  "
        f"{pct(m.trajectories_skipped_under_target)}",
        f"  still over limit {m.trajectories_still_over_limit:>10,}  "
        f"{pct(m.trajectories_still_over_limit)}",
        f"  failed           {m.trajectories_failed:>10,}",
        f"  tokens           {m.total_tokens_before:>10,} -> {m.total_tokens_after:,} "
        f"(ratio {d['tokens']['overall_compression_ratio']:.4f})",
        f"  summaries        {sum(m.summaries_by_source.values()):>10,}  "
        + " ".join(f"{k}={v}" for k, v in m.summaries_by_source.items() if v),
        f"  API calls        {m.total_summarization_calls:>10,}   errors "
        f"{m.total_summarization_errors:,}",
        f"  time             {m.processing_duration_seconds:>9.1f}s",
    ]
    lines[-1:-1] = strategy_lines(d.get("strategy"))
    lines += [f"  output           {_shown(p)}" for p in outputs]
    lines += [
        f"  metrics          {_shown(result.layout.metrics)}",
        f"  over limit       {_shown(result.layout.over_limit)}",
        f"  rejects          {_shown(result.layout.rejects)}",
    ]
    first, total = _first_rejects(result.layout.rejects)
    rejects = reject_lines(first, total, _shown(result.layout.rejects))
    return "\n".join(lines + (["", *rejects] if rejects else []))


def _first_rejects(path: Path, keep: int = 5) -> tuple[list[tuple[str, str]], int]:
    """The first ``keep`` entries of a rejects file as (location, reason), and how many
    entries it holds."""
    first: list[tuple[str, str]] = []
    total = 0
    prefix = os.getcwd() + os.sep
    try:
        with path.open("rb") as f:
            for line in f:
                if not line.strip():
                    continue
                total += 1
                if len(first) < keep:
                    try:
                        entry = jsonio.loads(line)
                    except ValueError:
                        continue
                    if isinstance(entry, dict):
                        where = str(entry.get("location", "?")).removeprefix(prefix)
                        first.append((where, str(entry.get("error", "rejected"))))
    except OSError:
        return [], 0
    return first, total


def _shown(path: Path) -> str:
    """``path`` relative to the working folder when it lies below it (shorter lines)."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith("..") else relative


def analyze_input(
    input_spec: str,
    config: CompressionConfig,
    options: RunOptions,
    *,
    targets: list[int] | None = None,
    prices: Prices | None = None,
    json_path: str | None = None,
    probe: int | None = None,
    seconds_per_call: float | None = None,
    overwrite: bool = False,
) -> int:
    """A dry run: count and plan every row ``options`` selects, print what compression
    would do and how long it would take; return the exit code: 1 when every row was
    rejected (said in one line on stderr), else 0.

    Nothing is written unless ``json_path`` is given (``-`` prints the JSON instead).
    ``probe`` requests are sent to time the summarizer (`inspect.analyze.analyze`).
    """
    from ..inspect.analyze import analyze
    from .analysis import format_analysis

    if json_path not in (None, "-"):
        if not Path(json_path).parent.is_dir():
            raise ConfigError(f"--json {json_path}: folder {Path(json_path).parent} does not "
                              "exist")
        check_written_file(Path(json_path), input_spec, "--json file")
        refuse_foreign(Path(json_path), "--json file", is_analysis, overwrite=overwrite)
    analysis = analyze(input_spec, config, targets=targets, options=options,
                       probe_requests=probe, seconds_per_call=seconds_per_call)
    if json_path == "-":
        sys.stdout.write(inert(jsonio.dumps_pretty(analysis.to_dict(prices)).decode("utf-8")))
    else:
        if json_path is not None:
            write_atomic(Path(json_path), jsonio.dumps_pretty(analysis.to_dict(prices)))
        sys.stdout.write(inert(format_analysis(analysis, prices)) + "\n")
    if analysis.rows or not analysis.rejected:
        return 0
    where, why = analysis.first_rejects[0]
    sys.stdout.flush()
    sys.stderr.write(inert(f"error: all {analysis.rejected:,} rows were rejected, nothing "
                           f"to analyze (the first: {one_line(f'{where}: {why}')})\n"))
    return 1


def report_output(
    output: str,
    config: CompressionConfig | None,
    overrides: dict[str, Any] | None = None,
    *,
    show: str | None = None,
    as_json: bool = False,
    limit: int | None = 50,
    fallback: Callable[[], CompressionConfig] = CompressionConfig,
    html: str | None = None,
    max_rows: int = 200,
    gates: list[Gate] | None = None,
    overwrite: bool = False,
) -> int:
    """Print a finished run's figures and flagged rows, or one row's timeline (``show``);
    return the exit code: 3 when one of ``gates`` failed (one line each on stderr), else 0.

    Without ``config`` the run's recorded settings are used (``fallback()`` for runs that
    recorded none); ``overrides`` (None values ignored) apply on top. ``html`` also writes
    the run as one page there, with the ``max_rows`` worst flagged rows.
    """
    from .gates import evaluate, finish
    from .report import (
        find_row,
        format_found,
        format_report,
        found_to_dict,
        load_report,
        report_counts,
        settle_fixes,
    )

    report = load_report(output)
    disagreements = _sidecar_warnings(report)
    checked = evaluate(gates, report_counts(report)) if gates else []
    if config is None:
        from .sidecar import recorded_config

        recorded = (recorded_config(report.metrics, report.layout.metrics)
                    if report.metrics is not None else None)
        config = recorded if recorded is not None else fallback()
    config = config.replace(**(overrides or {}))
    if show is None:
        settle_fixes(report, config)
    if html is not None:
        if show is not None:
            raise ConfigError("give --html or --show, not both (the page holds the timeline "
                              "of every row it lists)")
        _write_html(report, config, Path(html), max_rows, quiet=as_json, overwrite=overwrite)
        if not as_json:
            return finish(checked)
    if show is None:
        data = {**report.to_dict(), "sidecar_disagreements": disagreements,
                **({"gates": [r.to_dict() for r in checked]} if gates else {})}
        text = (jsonio.dumps_pretty(data).decode("utf-8") if as_json
                else format_report(report, limit) + "\n")
        sys.stdout.write(inert(text))
        return finish(checked)
    from .timeline import build_timeline
    found = find_row(report, show)
    try:
        turns = row_turns(found.row, config)
    except RowError as exc:
        raise InputError(f"{found.location}: {exc.reason}") from None
    counter = TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    timeline = build_timeline(turns, counter.count_many([t["value"] for t in turns]),
                              found.metrics, config)
    sys.stdout.write(inert(jsonio.dumps_pretty(found_to_dict(found, timeline)).decode("utf-8")
                           if as_json else format_found(found, timeline) + "\n"))
    return finish(checked)


def _sidecar_warnings(report: RunReport) -> list[str]:
    """Where the output disagrees with the metrics file beside it (another run's, or an
    output changed since its run committed it): one warning line each on stderr."""
    from ..engine.committed import sidecar_disagreements

    found = sidecar_disagreements(report.output, report.metrics, report.layout.metrics)
    for message in found:
        sys.stderr.write(inert(f"warning: {report.output}: {message}") + "\n")
    return found


def _write_html(report: RunReport, config: CompressionConfig, path: Path, max_rows: int,
                quiet: bool = False, overwrite: bool = False) -> None:
    """``report --html``: check the path, gather the page's data, write it atomically."""
    from .html_report import render_html
    from .report_data import collect_report_data

    if not path.parent.is_dir():
        raise ConfigError(f"--html {path}: folder {path.parent} does not exist")
    layout = report.layout
    for sidecar in (layout.metrics, layout.over_limit, layout.rejects):
        if resolve(path, "--html file") == resolve(sidecar):
            raise ConfigError(f"--html {path} would overwrite the run's {sidecar.name}; "
                              "choose another file name")
    # The run's own inputs too: its metrics name them, and the page must not replace one.
    check_written_file(path, str(report.output), "--html file",
                       protected=recorded_inputs(report.metrics))
    # Whatever the metrics say (disabled, deleted): only a page of ours is replaced.
    refuse_foreign(path, "--html file", is_report_page, overwrite=overwrite)
    counter = TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
    data = collect_report_data(report, config, counter, max_rows)
    write_atomic(path, render_html(data).encode("utf-8"))
    if not quiet:
        print(inert(f"wrote {_shown(path)}: {data.rows:,} rows, {len(data.shown):,} of "
                    f"{data.flagged_total:,} over-limit or failed rows listed with their "
                    "timelines"))


def validate_output_text(output: str, base: CompressionConfig | None,
                         overrides: dict[str, Any], default: tuple[str, CompressionConfig], *,
                         base_keys: frozenset[str] = frozenset(), base_name: str = "--config",
                         quiet: bool = False, as_json: bool = False,
                         allow_over_limit: bool = False,
                         gates: list[Gate] | None = None) -> int:
    """Print one line per problem of ``output`` and a closing line that names every kind
    of problem found and the settings it checked against (or, ``as_json``, one JSON
    object); return 0 when there is none, 1 when a row breaks a rule, the output holds no
    row though its run wrote some, the output disagrees with its metrics file, or a row is
    over the target (unless ``allow_over_limit``, or a --max-over-limit gate decides), 3
    when one of ``gates`` failed.

    The settings are ``base`` (a --config file) when given, else those the run recorded in
    its metrics file, else ``default`` (label, config); ``overrides`` (flag -> value,
    None: not given) apply on top (`sidecar.check_settings`).
    """
    from ..inspect.validate import Problem, Validation, validate_output
    from .sidecar import check_settings

    settings = check_settings(Path(output), base, overrides, default, base_keys=base_keys,
                              base_name=base_name)
    gate_name = "--max-over-limit"
    if not gates and settings.metrics is not None:
        gates = _recorded_gates(settings.metrics)
        gate_name = "the run's own --max-over-limit"
    gate_decides = any(g.what == "over_limit" for g in gates or [])
    over_allowed = allow_over_limit or gate_decides
    found = Validation()
    listed: list[Problem] = []
    for problem in validate_output(output, settings.config, found, metrics=settings.metrics,
                                   metrics_path=settings.path,
                                   own_counting=settings.same_counting):
        if problem.kind == "over_target" and over_allowed:
            continue  # counted for the closing line and the gate, not a failure
        listed.append(problem)
        if not as_json:
            sys.stdout.write(inert(f"{problem.location}: {problem.message}\n"))
    if found.rows == 0:
        empty = _empty_output_problem(output, settings.metrics)
        if empty is not None:
            problem = found.add(Problem(output, empty.removeprefix(f"{output}: "), "empty"))
            listed.append(problem)
            if not as_json:
                sys.stdout.write(inert(empty) + "\n")
    failing = sum(n for kind, n in found.kinds.items()
                  if kind != "over_target" or not over_allowed)
    code = 1 if failing else 0
    checked: list[Any] = []
    if gates:
        from .gates import Counts, evaluate

        counts = Counts(found.rows - found.unreadable, found.over_limit, found.failed,
                        found.unreadable, found.fallbacks, found.summaries)
        checked = evaluate(gates, counts)
    closing = closing_line(found, settings.config.target_max_tokens, over_allowed,
                           gate_name if gate_decides else "--allow-over-limit")
    if as_json:
        data = {"output": output, "rows": found.rows, "problems": failing,
                "kinds": dict(found.kinds),
                "over_target": {"rows": found.over_limit, "flagged": found.flagged,
                                "target": settings.config.target_max_tokens,
                                "allowed": over_allowed},
                "settings": settings.describe(), "summary": closing,
                "problem_list": [p.to_dict() for p in listed],
                **({"gates": [r.to_dict() for r in checked]} if gates else {})}
        sys.stdout.write(inert(jsonio.dumps_pretty(data).decode("utf-8")))
    elif not quiet:
        sys.stdout.write(inert(f"{closing} ({settings.describe()})") + "\n")
    if gates:
        from .gates import finish

        return finish(checked, code)
    return code


def _recorded_gates(metrics: dict[str, Any]) -> list[Gate]:
    """The CI gates the run was given (its metrics file's ``gates``), for `validate` to
    apply when given none: rows over the target are then the run's gate's to judge."""
    from .gates import parse_gate

    recorded = metrics.get("gates")
    if not isinstance(recorded, dict):
        return []
    found = []
    for what in ("over_limit", "failed", "rejected", "fallback_share"):
        value = recorded.get(what)
        if isinstance(value, str):
            try:
                found.append(parse_gate(what, value))
            except ConfigError:
                continue  # a damaged entry: as if the run had no such gate
    return found


def closing_line(found: Any, target: int, over_allowed: bool, allowed_by: str) -> str:
    """``30 rows checked, 15 problems: 13 rows over the target 4,000, flagged
    still_over_limit by the run; 2 rows with a tool call no result answers``; rows over
    the target that ``over_allowed`` lets pass follow as ``; allowed (...): ...``."""
    from ..inspect.validate import KINDS

    parts, allowed = [], ""
    for kind, noun in KINDS.items():
        n = found.kinds.get(kind, 0)
        if not n:
            continue
        if kind != "over_target":
            parts.append(f"{n:,} {noun}" if n != 1 else f"1 {_singular(noun)}")
            continue
        text = f"{counted(n, 'row')} over the target {target:,}"
        if found.flagged == n:
            text += ", flagged still_over_limit by the run"
        elif found.flagged:
            text += (f" ({found.flagged:,} flagged still_over_limit by the run, "
                     f"{n - found.flagged:,} not)")
        else:
            text += ", not flagged by the run"
        if over_allowed:
            allowed = f"; allowed by {allowed_by}: {text}"
        else:
            parts.append(text)
    failing = sum(n for kind, n in found.kinds.items()
                  if kind != "over_target" or not over_allowed)
    head = f"{counted(found.rows, 'row')} checked, {counted(failing, 'problem')}"
    return head + (": " + "; ".join(parts) if parts else "") + allowed


def _singular(noun: str) -> str:
    for plural in ("rows", "disagreements", "outputs"):
        if plural in noun:
            return noun.replace(plural, plural[:-1], 1)
    return noun


def _empty_output_problem(output: str, metrics: dict[str, Any] | None) -> str | None:
    """The problem of an output without rows: none only when its run's metrics say the run
    had no rows to write."""
    written = None if metrics is None else metrics["summary"].get("total_trajectories")
    if written == 0:
        return None
    if written is None:
        return (f"{output}: no rows, and no metrics file says its run wrote none "
                "(an empty or truncated output?)")
    return f"{output}: no rows, but its run's metrics say it wrote {written:,}"
