"""The dry run's estimate of how long `compress` would take, as plain text (issue 25)."""

from __future__ import annotations

from ..core.counted import counted
from ..inspect.estimate import BATCH_WINDOW, TimeEstimate
from .textfmt import clip, num, pad

_LABEL_W = 36
_VALUE_W = 13
_COLUMNS = 3  # targets side by side, as in the analysis's target blocks


def duration(seconds: float | None) -> str:
    """``0.42 s``, ``12.3 s``, ``4 min 05 s``, ``2 h 07 min``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 0.995:
        return f"{seconds:.2f} s"
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60:,} h {minutes % 60:02d} min"


def time_lines(estimate: TimeEstimate) -> list[str]:
    """The estimate at every target, and what it rests on, in 80 columns."""
    name = estimate.summarizer
    lines = [f"Time compress would take: an estimate ({name} summaries)"]
    work = f"  work timed here on {num(estimate.rows)} rows as analyze read them"
    if estimate.whole_input_records is not None:
        work = f"  work timed here on the {num(estimate.rows)} rows of the sample"
    if estimate.basis == "measured":
        lines.append(work + ", summaries included")
    elif estimate.basis == "batch_window":
        lines += [work + ";", "  the requests wait for the provider's batch"]
    else:
        per_call = f"{estimate.seconds_per_call:,.2f} s per call"
        if estimate.basis == "probed":
            assert estimate.probe is not None
            lines += [work + ";", f"  {per_call}, measured by --probe ({_probed(estimate)})"]
            started = estimate.probe.startup_seconds
            if started >= 0.5:  # the local servers; an HTTP session starts at once
                lines.append(f"  starting the summarizer: {duration(started)} (once a run)")
        else:
            lines += [work + ";", f"  {per_call} assumed (--seconds-per-call)"]
            if estimate.probe is not None:
                lines.append("  --probe sent nothing: no row needs a summary at the first "
                             "target")
        calls = "call" if estimate.concurrency == 1 else "calls"
        at_once = f"  {num(estimate.concurrency)} {calls} at once"
        if estimate.requests_per_second:
            at_once += (f", at most {estimate.requests_per_second * 60:,.0f} a minute "
                        "(the endpoints' rpm)")
        lines.append(at_once)
    for start in range(0, len(estimate.targets), _COLUMNS):
        lines += _block(estimate, start)
    if estimate.basis == "assumed" and estimate.probe is None:
        lines.append("  --probe N times N real requests instead (each costs what a run's "
                     "does)")
    elif estimate.basis == "batch_window":
        lines.append(f"  plus the provider's batch window ({BATCH_WINDOW})")
    return [clip(line, 80) for line in lines]


def _probed(estimate: TimeEstimate) -> str:
    """``3 requests: 0.21 s to 0.26 s, 1 failed``."""
    probe = estimate.probe
    assert probe is not None
    calls = len(probe.seconds)
    low, high = duration(min(probe.seconds)), duration(max(probe.seconds))
    text = f"{counted(calls, 'request')}: " + (
        low if low == high else f"{low} to {high}")
    if probe.failures:
        text += f", {num(len(probe.failures))} failed"
    return text


def _block(estimate: TimeEstimate, start: int) -> list[str]:
    targets = estimate.targets[start:start + _COLUMNS]

    def line(label: str, values: list[str]) -> str:
        return "  " + pad(label, _LABEL_W) + "".join(pad(v, _VALUE_W, right=True)
                                                    for v in values)

    out = [line("target_max_tokens", [num(t.target) for t in targets])]
    whole = estimate.whole_input_records
    if estimate.basis == "measured":
        out.append(line("rows summarized (extractive)", [num(t.summarized) for t in targets]))
        out.append(line("estimated total", [duration(t.seconds) for t in targets]))
        if whole is not None:
            out.append(line(f"whole input ({num(whole)} rows)",
                            [duration(t.whole_input_seconds) for t in targets]))
        return out
    out.append(line("local work (read, count, assemble)",
                    [duration(t.local_seconds) for t in targets]))
    out.append(line("summary calls", [num(t.calls) for t in targets]))
    if estimate.basis == "batch_window":
        return out
    out.append(line("waiting for them", [duration(t.wait_seconds) for t in targets]))
    out.append(line("estimated total", [duration(t.seconds) for t in targets]))
    if whole is not None:
        out.append(line(f"whole input ({num(whole)} rows)",
                        [duration(t.whole_input_seconds) for t in targets]))
    return out
