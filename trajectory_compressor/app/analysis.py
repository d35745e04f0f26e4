"""The dry run as plain text: token distribution, and what `compress` would do per target."""

from __future__ import annotations

import textwrap

from ..core.config import STRATEGIES
from ..core.counted import counted
from ..core.metrics import bin_of
from ..inspect.analyze import Analysis, Prices, TargetAnalysis
from .fixes import fix_lines
from .textfmt import (
    Column,
    clip,
    histogram_lines,
    num,
    pad,
    reason_order,
    reject_lines,
    short_reason,
    table,
)
from .time_estimate import time_lines

_LABEL_W = 36
_VALUE_W = 13
_COLUMNS = 3  # targets side by side: 2 + 36 + 3 * 13 = 77 columns


def format_analysis(a: Analysis, prices: Prices | None = None) -> str:
    """The dry run as plain text, at most 80 columns wide."""
    probe = a.time.probe if a.time is not None else None
    lines = ["Dry run: no LLM call, nothing written" if probe is None else
             f"Dry run: nothing written; --probe sent {num(len(probe.seconds))} summary "
             "requests",
             "  input   " + clip(a.input, 70, left=True),
             f"  rows    {num(a.rows)}, rejected {num(a.rejected)}"]
    rejects = reject_lines(a.first_rejects, a.rejected, None)
    if rejects:
        lines += ["", *rejects]
    if a.rows == 0:
        lines += ["", "No rows to analyze."] if rejects else ["  no rows to analyze"]
        return "\n".join(lines)
    dist = a.tokens.summary()
    lines += ["", "Tokens per row"]
    lines += table([Column(k, right=True) for k in ("min", "p50", "p90", "p99", "max")],
                   [[num(v) for v in dist.values()]])
    edges, counts = a.histogram()
    marks: dict[int, list[str]] = {}
    for t in a.targets:
        i = bin_of(edges, t.target)
        if i is not None:
            marks.setdefault(i, []).append(num(t.target))
    lines.append("")
    lines += histogram_lines(edges, counts, {i: "<- target " + ", ".join(m)
                                             for i, m in marks.items()})
    for start in range(0, len(a.targets), _COLUMNS):
        lines += ["", *_target_block(a.targets[start:start + _COLUMNS], prices)]
    for start in range(0, len(a.targets), _COLUMNS):
        block = strategy_block(a.targets[start:start + _COLUMNS])
        if block:
            lines += ["", *block]
    for t in a.targets:
        fixes = [] if t.fixes is None else fix_lines(t.fixes, target_label=len(a.targets) > 1)
        if fixes:
            assert t.fixes is not None
            lines += ["", *fixes, f"  (re-planned {num(t.fixes.examined)} of the rows over the "
                      f"limit in {t.fixes_cpu_seconds:.1f} s CPU)"]
    if a.gap is not None and a.gap.rows:
        lines += ["", *_gap_block(a)]
    windowed = [t for t in a.targets if t.metrics.windowed_rows]
    if windowed:
        lines += ["", *_windows_block(windowed)]
    if a.distill is not None and a.distill.tool_tokens:
        lines += ["", *a.distill.lines()]
    if a.time is not None:
        lines += ["", *time_lines(a.time)]
    return "\n".join(lines)


def _windows_block(targets: list[TargetAnalysis]) -> list[str]:
    """`--output-mode windows` (§20): windows per row, summaries, trained tokens."""
    lines = ["Windows output (rows over the target become windows that each fit)"]
    for t in targets:
        w = t.metrics.windows_summary()
        rows = w["windowed_rows"]
        summaries = counted(w["summaries"], "summary", "summaries")
        lines += [f"  target {num(t.target)}: {counted(rows, 'row')} -> "
                  f"{counted(w['windows'], 'window')} "
                  f"({w['windows'] / max(rows, 1):.1f} per row), {summaries},",
                  f"    {num(w['trained_assistant_tokens'])} of "
                  f"{num(w['assistant_tokens'])} assistant tokens trained "
                  f"({w['trained_share']:.0%}); rows out {num(w['rows_out'])}"]
        if w["windows_over"]:
            lines.append(f"    {counted(w['windows_over'], 'window')} over the target; "
                         f"the others train {num(w['trained_within_target'])} "
                         f"({w['trained_within_target_share']:.0%})")
    return lines


def _gap_block(a: Analysis) -> list[str]:
    """Per-turn sum vs chat-template length: what the reference's count misses."""
    assert a.gap is not None
    gap = a.gap
    d = gap.difference.summary()
    lines = ["Counting: chat-template length minus the per-turn sum, per row"]
    lines += table([Column(k, right=True) for k in ("min", "p50", "p90", "p99", "max")],
                   [[num(v) for v in d.values()]])
    for target in gap.targets:
        under = gap.turns_under_template_over[target]
        lines += [f"  target {num(target)}: {counted(under, 'row')} under it by the per-turn sum "
                  f"{'is' if under == 1 else 'are'} over it",
                  f"  by the template; {num(gap.turns_over_template_under[target])} the "
                  "other way round"]
    return [clip(line, 80) for line in lines]


def _target_block(targets: list[TargetAnalysis], prices: Prices | None) -> list[str]:
    def line(label: str, values: list[str]) -> str:
        return "  " + pad(label, _LABEL_W) + "".join(pad(v, _VALUE_W, right=True)
                                                    for v in values)

    first = targets[0]
    summary_tokens = num(first.config.summary_target_tokens)
    if first.exact:
        title = "What compress would do (extractive summaries: exact)"
    else:
        title = (f"What compress would do ({first.config.summarizer}: projected, "
                 f"{summary_tokens}-token summaries)")
    out = [title, line("target_max_tokens", [num(t.target) for t in targets])]
    out.append(line("would skip (under the target)",
                    [num(t.metrics.trajectories_skipped_under_target) for t in targets]))
    out.append(line("would compress", [num(t.metrics.trajectories_compressed) for t in targets]))
    out.append(line("would stay over the limit",
                    [num(t.metrics.trajectories_still_over_limit) for t in targets]))
    reasons = sorted({r for t in targets for r in t.reasons}, key=reason_order)
    for reason in reasons:
        out.append(line("  " + short_reason(reason), [num(t.reasons[reason]) for t in targets]))
    if not first.exact:
        out.append(line("would stay over (extractive, exact)",
                        [num(t.extractive.trajectories_still_over_limit) for t in targets]))
    out.append(line("tokens after",
                    [num(t.metrics.total_tokens_after) for t in targets]))
    out.append(line("compression ratio",
                    [f"{t.metrics.to_dict()['tokens']['overall_compression_ratio']:.4f}"
                     for t in targets]))
    if any(t.extractive.fidelity_ratios.count for t in targets):
        # Exact whatever the summarizer: the extractive summaries are built and measured.
        shown = [t.extractive.fidelity_summary() for t in targets]
        out.append(line("fidelity, extractive: mean / p10",
                        [_shares(f["mean_ratio"], f["p10_ratio"]) for f in shown]))
        out.append(line("  items the tail needs, kept",
                        [_shares(f["mean_tail_ratio"]) for f in shown]))
        out.append(line("  rows with invented facts",
                        [num(f["invented_rows"]) for f in shown]))
    # Windows output: one summary, so one call, per window after the first.
    per = "window summary" if first.config.output_mode == "windows" else "compressed row"
    out += ["", (f"LLM summarization (projected: 1 call per {per}, "
                 f"{summary_tokens}-token summaries)")]
    if first.exact:
        out.append("  (--summarizer extractive makes no call; this is what an LLM would use)")
    out.append(line("calls", [num(t.llm.total_summarization_calls) for t in targets]))
    out.append(line("input tokens (region text only)",
                    [num(t.llm.prompt_tokens) for t in targets]))
    out.append(line("output tokens", [num(t.llm.completion_tokens) for t in targets]))
    if prices is not None:
        label = f"cost, USD (${prices.input:g}/M in, ${prices.output:g}/M out)"
        out.append(line(label if len(label) <= _LABEL_W else "cost, USD",
                        [f"{prices.cost(t.llm.prompt_tokens, t.llm.completion_tokens):,.2f}"
                         for t in targets]))
    return out


def strategy_block(targets: list[TargetAnalysis]) -> list[str]:
    """Summarize, mask and hybrid side by side on the rows over each target (§19)."""
    shown = [t for t in targets if t.strategies is not None and t.strategies.rows]
    if not shown:
        return []

    def line(label: str, values: list[str]) -> str:
        return "  " + pad(label, _LABEL_W) + "".join(pad(v, _VALUE_W, right=True)
                                                    for v in values)

    how = "exact" if shown[0].exact else "projected"
    out = [f"Strategies on the rows over the target ({how}; --strategy)",
           line("target_max_tokens", [num(t.target) for t in shown]),
           line("rows over the target", [num(t.strategies.rows) for t in shown
                                         if t.strategies is not None])]
    for name in STRATEGIES:
        figures = [t.strategies.figures[name] for t in shown if t.strategies is not None]
        out += [f"  {name}",
                line("  rows under / still over", [f"{num(f.under)} / {num(f.still_over)}"
                                                   for f in figures]),
                line("  summaries (LLM calls)", [num(f.summaries) for f in figures]),
                line("  tokens after", [num(f.tokens_after) for f in figures]),
                line("  assistant tokens kept", [f"{f.assistant_kept:.1%}" for f in figures])]
    for t in shown:
        assert t.strategies is not None
        prefix = f"target {num(t.target)}: " if len(shown) > 1 else ""
        out += textwrap.wrap(prefix + t.strategies.verdict(), 78, initial_indent="  ",
                             subsequent_indent="  ")
    return out


def _shares(*values: float | None) -> str:
    """``0.31 / 0.26``: shares with two decimals, ``-`` for none."""
    return " / ".join("-" if v is None else f"{v:.2f}" for v in values)
