"""Reading a finished run back: its aggregate metrics, over-limit and failed rows (§9).

The sidecar files are found by the same naming rules `compress` wrote them with
(`layout.finished_layout`). Failed rows are normally in the over-limit file (a failed
row is left unchanged, hence over the target); only when the metrics count more
failures than that file holds is the output itself scanned for them.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import reasons
from ..core.config import CompressionConfig
from ..core.conversation import Row
from ..core.errors import InputError
from ..core.metrics import METRICS_KEY, TrajectoryMetrics
from ..counting.tokens import TokenCounter
from ..dialects.base import row_id
from ..engine.layout import OutputLayout, finished_layout
from ..engine.paths import recorded_inputs
from ..engine.replan import WhatWouldFix
from ..formats import jsonio
from ..formats.base import Location
from ..formats.bounded import SidecarUnreadable, bounded_lines
from ..formats.links import LOOP, is_link_loop
from ..formats.registry import discover_inputs, read_records
from ..inspect.run_fixes import Flagged, run_fixes
from .fixes import fix_lines
from .gates import Counts, counts_of
from .sidecar import over_limit_entry_problem, read_metrics
from .strategy_text import strategy_lines
from .textfmt import Column, clip, num, one_line, reason_order, short_reason, table
from .timeline import Timeline, format_timeline


@dataclass
class FlaggedRow:
    """A row that is still over the limit or failed: where it came from and why."""

    location: Location
    id: Any
    reason: str  # the sentence (or the row's error)
    metrics: TrajectoryMetrics
    metrics_dict: dict[str, Any]
    row: Row | None = None  # the row itself when the run did not keep it in the output
    code: str = ""  # the reason's code (`core.reasons`)
    numbers: dict[str, int] = field(default_factory=dict)  # `core.explain`
    order: int = 0  # its place in the over-limit file (the run's order)

    @property
    def failed(self) -> bool:
        return self.metrics.failed

    @property
    def short_location(self) -> str:
        """The location with the file's name only (the folder is the run's)."""
        return str(Location(Path(self.location.file).name, self.location.line,
                            self.location.row))

    def to_dict(self) -> dict[str, Any]:
        return {"location": str(self.location), **self.location.to_dict(), "id": self.id,
                "reason": self.code, "reason_text": self.reason,
                "reason_numbers": self.numbers, "failed": self.failed,
                "metrics": self.metrics_dict}


@dataclass
class RunReport:
    """A finished run: its output, aggregate metrics, and flagged rows, worst first."""

    output: Path
    layout: OutputLayout
    metrics: dict[str, Any] | None
    rows: list[FlaggedRow] = field(default_factory=list)
    fixes: WhatWouldFix | None = None  # what would fix the rows over the limit, if asked
    # Where the table comes from: "stored" (computed by compress), or why it was re-planned
    # here and how long that took.
    fixes_source: str = ""

    def figures(self) -> dict[str, Any]:
        """The run's counts for scripts: rows, compressed, skipped, over the limit,
        failed, rejected, and the over-limit and failed rows per reason code."""
        s = (self.metrics or {}).get("summary") or {}
        recorded = ((self.metrics or {}).get("over_limit") or {}).get("reasons")
        by_code: dict[str, int] = {}
        for r in self.rows:
            by_code[r.code] = by_code.get(r.code, 0) + 1
        return {
            "rows": s.get("total_trajectories"),
            "compressed": s.get("trajectories_compressed"),
            "skipped_under_target": s.get("trajectories_skipped_under_target"),
            "over_limit": s.get("trajectories_still_over_limit",
                                sum(r.metrics.still_over_limit for r in self.rows)),
            "failed": s.get("trajectories_failed", sum(r.failed for r in self.rows)),
            "rejected": s.get("rows_rejected"),
            "reasons": dict(recorded) if isinstance(recorded, dict) else by_code,
        }

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able data (``--json``)."""
        return {"output": str(self.output), "metrics_file": str(self.layout.metrics),
                "over_limit_file": str(self.layout.over_limit), "figures": self.figures(),
                "metrics": self.metrics, "rows": [r.to_dict() for r in self.rows],
                "remedies": None if self.fixes is None else self.fixes.to_dict(),
                "remedies_source": self.fixes_source or None}


def load_report(output: str | Path) -> RunReport:
    """Read the run that wrote ``output`` (its compressed file or folder).

    Raises `InputError` when ``output`` or both of its sidecars are missing.
    """
    output = Path(output)
    if not output.exists():
        if is_link_loop(output):
            raise InputError(f"{output} is {LOOP}; give the file or folder compress wrote")
        raise InputError(f"output not found: {output}")
    layout = finished_layout(output)
    if not layout.metrics.exists() and not layout.over_limit.exists():
        raise InputError(f"{output} has no {layout.metrics.name} or {layout.over_limit.name} "
                         "beside it; give the file or folder that compress wrote")
    metrics = read_metrics(layout.metrics)
    rows = list(_over_limit_rows(layout.over_limit))
    failed_seen = sum(r.failed for r in rows)
    failed_total = ((metrics or {}).get("summary") or {}).get("trajectories_failed", 0)
    if failed_total > failed_seen:
        rows += [r for r in _failed_in_output(output) if not r.metrics.still_over_limit]
    rows.sort(key=lambda r: (-r.metrics.compressed_tokens, -r.metrics.original_tokens))
    return RunReport(output, layout, metrics, rows)


def _over_limit_rows(path: Path) -> Iterator[FlaggedRow]:
    if not path.exists():
        return
    for number, line in _bounded(path, "over-limit file"):
        if not line.strip():
            continue
        try:
            entry = jsonio.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}:{number}: not a JSON line ({exc})") from None
        problem = over_limit_entry_problem(entry)
        if problem is not None:
            raise InputError(f"{path}:{number}: {problem}; the file is damaged, edited or "
                             "not one compress wrote")
        metrics = entry.get("metrics") or {}
        flagged = TrajectoryMetrics.from_dict(metrics)
        # `reason` is the code since §16 (with `reason_text`); before, the sentence.
        raw = str(entry.get("reason") or "")
        text = str(entry.get("reason_text") or raw)
        numbers = entry.get("reason_numbers")
        yield FlaggedRow(
            Location(entry.get("file", entry.get("location", "?")), entry.get("line"),
                     entry.get("row")),
            entry.get("id"), text, flagged, metrics, entry.get("trajectory"),
            code_of(raw or text, flagged.failed),
            dict(numbers) if isinstance(numbers, dict) else {}, number,
        )


def _bounded(path: Path, what: str) -> Iterator[tuple[int, bytes]]:
    """`formats.bounded.bounded_lines`, its refusal (or an unreadable file) an
    `InputError`."""
    try:
        yield from bounded_lines(path, what)
    except SidecarUnreadable as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def output_rows(output: Path) -> Iterator[tuple[Location, Row]]:
    """Every row of a run's output file or folder, in order, with its location."""
    for source in discover_inputs(str(output)):
        for record in read_records(source):
            if record.error is None and isinstance(record.row, dict):
                yield record.location, record.row


def _failed_in_output(output: Path) -> Iterator[FlaggedRow]:
    for location, row in output_rows(output):
        metrics = row.get(METRICS_KEY)
        if isinstance(metrics, dict) and metrics.get("error"):
            yield FlaggedRow(location, row_id(row), metrics["error"],
                             TrajectoryMetrics.from_dict(metrics), metrics,
                             code=code_of(str(metrics["error"]), True))


def settle_fixes(report: RunReport, config: CompressionConfig) -> None:
    """``report.fixes``: the table `compress` stored with the run when it was computed
    under ``config``'s settings (no re-planning), else re-planned here (`find_fixes`),
    with ``report.fixes_source`` saying which, why, and the CPU seconds it took."""
    from ..engine.stored_fixes import stored_fixes

    stored, why = stored_fixes(report.metrics, config)
    if stored is not None:
        report.fixes, report.fixes_source = stored, "stored"
        return
    started = time.process_time()
    report.fixes = find_fixes(report, config)
    report.fixes_source = (f"re-planned here in {time.process_time() - started:.1f} s CPU: "
                           f"{why}")


def find_fixes(report: RunReport, config: CompressionConfig,
               counter: TokenCounter | None = None) -> WhatWouldFix | None:
    """What would fix the run's rows still over the limit (`inspect.run_fixes`), re-planned
    under ``config`` (counted with ``counter``, or the config's tokenizer); None when no
    row is over the limit (failed rows aside)."""
    if not any(r.metrics.still_over_limit and not r.failed for r in report.rows):
        return None
    flagged = [Flagged(r.location, r.id, r.code, r.metrics_dict, r.row)
               for r in sorted(report.rows, key=lambda r: r.order)]
    return run_fixes(report.output, flagged, config, recorded_inputs(report.metrics),
                     counter)


def report_counts(report: RunReport) -> Counts:
    """What the CI gates look at (`app.gates`), from the run's metrics file, or, for a run
    that wrote none, from its over-limit, rejects and output files."""
    if report.metrics is not None:
        return counts_of(report.metrics)
    rejected = 0
    if report.layout.rejects.exists():
        rejected = sum(1 for _, line in _bounded(report.layout.rejects, "rejects file")
                       if line.strip())
    moved = sum(r.row is not None for r in report.rows)
    return Counts(sum(1 for _ in output_rows(report.output)) + moved,
                  sum(r.metrics.still_over_limit for r in report.rows),
                  sum(r.failed for r in report.rows), rejected)


def code_of(reason: str, failed: bool) -> str:
    """The code of a reason given as a code or a sentence (``failed``: an error text)."""
    known = reasons.reason_of(reason)
    if known is not None:
        return known.code
    return (reasons.FAILED if failed else reasons.OVER_TARGET).code


@dataclass
class FoundRow:
    """One trajectory picked by ``--show``: the row as written, its metrics and why."""

    location: Location
    row: Row
    metrics: TrajectoryMetrics | None
    reason: str = ""
    numbers: dict[str, int] = field(default_factory=dict)
    code: str = ""


def find_row(report: RunReport, key: str) -> FoundRow:
    """The row named by ``key``: an id, a location, or a 0-based index in the output.

    Raises `InputError` when nothing matches.
    """
    for flagged in report.rows:
        names = {str(flagged.location), flagged.short_location}
        if flagged.id is not None:
            names.add(str(flagged.id))
        if key in names:
            return _resolve(report, flagged)
    index = int(key) if key.isdigit() else None
    for i, (location, row) in enumerate(output_rows(report.output)):
        if str(row_id(row)) == key or i == index:
            raw = row.get(METRICS_KEY)
            metrics = TrajectoryMetrics.from_dict(raw) if isinstance(raw, dict) else None
            return FoundRow(location, row, metrics)
    raise InputError(f"no row with id, location or index {key!r} in {report.output}")


def _resolve(report: RunReport, flagged: FlaggedRow) -> FoundRow:
    if flagged.row is not None:
        return FoundRow(flagged.location, flagged.row, flagged.metrics, flagged.reason,
                        flagged.numbers, flagged.code)
    # The entry records the input location; find the written row by its id and metrics.
    for _location, row in output_rows(report.output):
        if row_id(row) != flagged.id:
            continue
        written = row.get(METRICS_KEY)
        # Without an id only the metrics tell rows apart.
        if _same_metrics(written, flagged.metrics_dict) or (
                written is None and flagged.id is not None):
            return FoundRow(flagged.location, row, flagged.metrics, flagged.reason,
                            flagged.numbers, flagged.code)
    raise InputError(f"{flagged.location} is listed as over the limit but its row is not in "
                     f"{report.output}")


def _same_metrics(written: Any, listed: dict[str, Any]) -> bool:
    """Metrics equal apart from absent keys: a Parquet struct column gives every row every
    field (``error: null`` on rows that did not fail)."""
    if not isinstance(written, dict):
        return False

    def present(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if v is not None}

    return present(written) == present(listed)


def format_report(report: RunReport, limit: int | None = 50) -> str:
    """The aggregate figures, then the flagged rows worst first, in 80 columns."""
    lines = ["Run output " + clip(str(report.output), 69, left=True)]
    m = report.metrics
    if m is None:
        lines.append(f"  (no {report.layout.metrics.name}: metrics were off for this run)")
    else:
        s, tok = m.get("summary", {}), m.get("tokens", {})
        total = max(s.get("total_trajectories", 0), 1)

        def count(label: str, key: str, share: bool = True) -> str:
            n = s.get(key, 0)
            return f"  {label:<17}{n:>10,}" + (f"  {100 * n / total:5.1f}%" if share else "")

        summ = m.get("summarization", {})
        by_source = " ".join(f"{k}={v}" for k, v in summ.get("summaries_by_source", {}).items()
                             if v)
        lines += [
            f"  {'rows':<17}{s.get('total_trajectories', 0):>10,}   rejected "
            f"{num(s.get('rows_rejected', 0))}",
            count("compressed", "trajectories_compressed"),
            count("skipped (under)", "trajectories_skipped_under_target"),
            count("still over limit", "trajectories_still_over_limit"),
            count("failed", "trajectories_failed", share=False),
            f"  {'tokens':<17}{tok.get('total_before', 0):>10,} -> "
            f"{num(tok.get('total_after', 0))} (ratio "
            f"{tok.get('overall_compression_ratio', 1.0):.4f})",
            f"  {'summaries':<17}{sum(summ.get('summaries_by_source', {}).values()):>10,}  "
            f"{by_source}",
            f"  {'API calls':<17}{summ.get('total_api_calls', 0):>10,}   errors "
            f"{num(summ.get('total_errors', 0))}, retries {num(summ.get('retries', 0))}",
        ]
        usage = m.get("usage", {})
        if usage.get("total_tokens"):
            lines.append(f"  {'usage':<17}{usage['prompt_tokens']:>10,} prompt + "
                         f"{num(usage['completion_tokens'])} completion tokens")
        lines += _fidelity_lines(m.get("fidelity"))
        lines += distill_lines(m.get("distill"))
        lines += windows_lines(m.get("windows"))
        lines += strategy_lines(m.get("strategy"))
        dists = m.get("distributions", {})
        if dists:
            keys = ("min", "median", "p90", "p99", "max")
            lines += ["", "Tokens per row"]
            lines += table([Column(""), *(Column(k, right=True) for k in keys)],
                           [[name.replace("tokens_", ""), *(num(d.get(k)) for k in keys)]
                            for name, d in dists.items()])
    lines.append("")
    if not report.rows:
        lines.append("No row is still over the limit, and none failed.")
        return "\n".join(lines)
    failed = sum(r.failed for r in report.rows)
    lines += _reason_lines(report.rows)
    lines.append(f"Still over the limit or failed: {num(len(report.rows))} rows "
                 f"({num(failed)} failed), worst first")
    shown = report.rows if not limit else report.rows[:limit]
    lines += table(
        # Shrink the location first (clipped on the left, its line number stays), the
        # reason last.
        [Column("location", flex=True, clip_left=True), Column("id", flex=True, max_width=24,
                                                                priority=1),
         Column("before", right=True), Column("after", right=True),
         Column("reason", flex=True, priority=2)],
        [[r.short_location, "" if r.id is None else str(r.id), num(r.metrics.original_tokens),
          num(r.metrics.compressed_tokens), short_reason(r.reason)] for r in shown],
    )
    if len(shown) < len(report.rows):
        lines.append(f"  ... {num(len(report.rows) - len(shown))} more (--limit 0 shows all)")
    if report.fixes is not None:
        lines += ["", *fix_lines(report.fixes)]
        if report.fixes_source != "stored":
            lines += textwrap.wrap(f"({report.fixes_source})", 80, initial_indent="  ",
                                   subsequent_indent="   ")
    lines += ["", "See one row's turns: trajectory-compressor report OUTPUT --show ID"]
    return "\n".join(lines)


def _reason_lines(rows: list[FlaggedRow]) -> list[str]:
    """How many flagged rows each reason accounts for (its label and its code)."""
    by_code: dict[str, int] = {}
    for r in rows:
        by_code[r.code] = by_code.get(r.code, 0) + 1
    order = sorted(by_code, key=reason_order)
    return ["Why, by reason", *table(
        [Column("reason", flex=True), Column("code", flex=True), Column("rows", right=True)],
        [[short_reason(code), code, num(by_code[code])] for code in order]), ""]


def windows_lines(windows: Any) -> list[str]:
    """What `--output-mode windows` made (§20): each windowed source row became its
    windows, grouped by source (`<id>#w1..#wk`)."""
    if not isinstance(windows, dict) or not windows.get("windowed_rows"):
        return []
    rows = windows.get("windowed_rows", 0)
    made = windows.get("windows", 0)
    return [
        f"  {'windows':<17}{made:>10,}   from {num(rows)} source rows "
        f"({made / max(rows, 1):.1f} per row); rows out {num(windows.get('rows_out', 0))}",
        f"  {'window summaries':<17}{windows.get('summaries', 0):>10,}   assistant tokens "
        f"trained {num(windows.get('trained_assistant_tokens', 0))} of "
        f"{num(windows.get('assistant_tokens', 0))} ({windows.get('trained_share', 0):.0%})",
        *([f"  {'windows over':<17}{windows['windows_over']:>10,}   over the target; the "
           f"others train {num(windows.get('trained_within_target', 0))} "
           f"({windows.get('trained_within_target_share', 0):.0%})"]
          if windows.get("windows_over") else []),
    ]


def distill_lines(distill: Any) -> list[str]:
    """What distilling tool outputs saved before planning (§18), by rule."""
    if not isinstance(distill, dict) or not distill.get("turns"):
        return []
    level = (distill.get("level") or "").strip()
    lines = [f"  {'distill':<17}{distill.get('tokens_saved', 0):>10,}   tokens saved in "
             f"{num(distill.get('turns', 0))} tool turns of {num(distill.get('rows', 0))} rows"
             + (f" ({level})" if level else "")]
    rules = distill.get("saved_by_rule") or {}
    if rules:
        lines += textwrap.wrap("by rule: " + ", ".join(f"{k} {num(v)}" for k, v in rules.items()),
                               78, initial_indent=" " * 32, subsequent_indent=" " * 32)
    return lines


def _fidelity_lines(fidelity: Any) -> list[str]:
    """The run's summary fidelity (§15): the share of each region's identifiers its
    summary kept, and what the bar did."""
    if not isinstance(fidelity, dict):
        return []

    def share(key: str) -> str:
        value = fidelity.get(key)
        return f"{value:.2f}" if isinstance(value, (int, float)) else "-"

    lines = []
    if fidelity.get("count"):
        lines.append(f"  {'fidelity':<17}{share('mean_ratio'):>10}   mean; p10 "
                     f"{share('p10_ratio')}, min {share('min_ratio')}; tail items kept "
                     f"{share('mean_tail_ratio')}")
    if fidelity.get("count") and "invented_rows" in fidelity:
        lines.append(f"  {'model fidelity':<17}{share('mean_model_ratio'):>10}   mean of "
                     "its own text, without references")
        lines.append(f"  {'invented facts':<17}{num(fidelity['invented_rows']):>10}   rows "
                     f"({share('invented_share')} of summaries), "
                     f"{num(fidelity.get('invented_items', 0))} items")
    repairs, low = fidelity.get("repair_requests", 0), fidelity.get("low_fidelity_rows", 0)
    if repairs or low:
        lines.append(f"  {'low fidelity':<17}{num(low):>10}   rows below the bar after "
                     f"{num(repairs)} repair requests")
    return lines


def numbers_lines(numbers: dict[str, int]) -> list[str]:
    """The numbers behind a reason (`core.explain`), in two lines of 80 columns."""
    if not numbers:
        return []

    def n(key: str) -> str:
        return num(numbers.get(key))

    line = (f"  head {n('head_tokens')} + middle {n('middle_tokens')} + tail "
            f"{n('tail_tokens')} tokens; region {n('region_tokens')}")
    if "summary_tokens" in numbers:
        line += f" -> summary {n('summary_tokens')}"
    return [clip(line, 80), clip(f"  target {n('target')}, summary target "
                                 f"{n('summary_target')}", 80)]


def format_found(found: FoundRow, timeline: Timeline) -> str:
    """``--show``: what happened to the row, then its timeline."""

    name = "" if row_id(found.row) is None else f" {row_id(found.row)}"
    prefix = f"Trajectory{name} at "
    title = [prefix + clip(str(found.location), max(80 - len(prefix), 12), left=True)]
    m = found.metrics
    if m is None:
        status = "under the target: left as it was"
    elif m.failed:
        status = f"failed: {m.error}"
    elif m.still_over_limit:
        status = f"still over the limit: {found.reason or 'over the target'}"
    elif m.was_compressed:
        status = "compressed to fit the target"
    else:
        status = "left as it was"
    title += [clip(line, 80) for line in textwrap.wrap(
        one_line(status), 80, initial_indent="  ", subsequent_indent="    ")]
    if m is not None:
        title.append(f"  tokens {num(m.original_tokens)} -> {num(m.compressed_tokens)}, "
                     f"turns {num(m.original_turns)} -> {num(m.compressed_turns)}")
        title += numbers_lines(found.numbers)
        if m.compressed_tokens != timeline.total:
            title.append(f"  note: the run recorded {num(m.compressed_tokens)} tokens, counted "
                         f"here {num(timeline.total)}: another --tokenizer?")
        if m.still_over_limit != (m.compressed_tokens > timeline.target) and not m.failed:
            title.append(f"  note: the run judged this row against another target than "
                         f"{num(timeline.target)};")
            title.append("  give report the run's --config or --target-max-tokens")
    return "\n".join(format_timeline(timeline, title))


def found_to_dict(found: FoundRow, timeline: Timeline) -> dict[str, Any]:
    """``--show --json``: the row's location, metrics and timeline."""
    return {"location": str(found.location), **found.location.to_dict(),
            "id": row_id(found.row), "reason": found.code or None,
            "reason_text": found.reason, "reason_numbers": found.numbers,
            "metrics": None if found.metrics is None else found.metrics.to_dict(),
            "timeline": timeline.to_dict()}
