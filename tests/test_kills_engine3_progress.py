"""The progress bar (`engine/progress.py`) on a real terminal, in this process (issue 26,
item 5: the bar is drawn only when stderr is a terminal, which only tests that started the
CLI under a pty had).

The terminal is a pseudo-terminal opened here (``os.openpty``; no process): stderr is its
slave end, the test reads what was drawn from the master end. What the bar must do comes
from the module (rows done out of the total, live counters, silent with --quiet or off a
terminal) and its comments (a terminal that reports no size gets 80 columns and 24 lines;
a total given as a function is counted only when the bar is shown).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import re
import select
import struct
import sys
import termios
from collections.abc import Iterator

import pytest

from trajectory_compressor.core.metrics import AggregateMetrics, TrajectoryMetrics
from trajectory_compressor.engine.progress import Progress


class Screen:
    """What was drawn on the terminal, read from its master end."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.text = ""

    def read(self) -> str:
        while self.master >= 0 and select.select([self.master], [], [], 0.05)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the slave end is closed and nothing is left
                break
            if not chunk:
                break
            self.text += chunk.decode("utf-8")
        return self.text

    def draws(self) -> list[str]:
        """Each state the bar was drawn in (tqdm starts each redraw with a carriage return)."""
        return [d.rstrip("\r\n") for d in self.read().split("\r") if d.strip()]


@contextlib.contextmanager
def terminal(columns: int | None, wrap=None) -> Iterator[Screen]:
    """stderr on a fresh pseudo-terminal ``columns`` wide (None: one that reports no size,
    0 by 0, as a new pty does)."""
    master, slave = os.openpty()
    if columns is not None:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    stream = open(slave, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    before = sys.stderr
    sys.stderr = wrap(stream) if wrap else stream
    screen = Screen(master)
    try:
        yield screen
    finally:
        sys.stderr = before
        stream.flush()
        screen.read()
        stream.close()
        os.close(slave)
        os.close(master)
        screen.master = -1


def rows(progress: Progress, n: int, **fields: bool) -> None:
    for _ in range(n):
        progress.row(TrajectoryMetrics(**fields))


def test_the_bar_counts_rows_out_of_a_total_counted_only_when_shown():
    asked = []

    def total() -> int:
        asked.append(1)
        return 5

    Progress(quiet=True, total=total).close()
    assert asked == []  # a quiet run does not count its input
    with terminal(100) as screen:
        progress = Progress(total=total)
        rows(progress, 3)
        progress.close()
        progress.close()  # closing twice draws nothing more
        draws = screen.draws()
    assert asked == [1]
    assert re.match(r"\s*0%\|.*\| 0/5 \[", draws[0]), draws
    assert re.match(r"\s*60%\|.*\| 3/5 \[", draws[-1]), draws
    assert screen.text.endswith("\r\n")  # closed: the bar's line is finished
    assert len(draws) == 2


def test_a_quiet_run_or_one_off_a_terminal_draws_nothing(capsys):
    for progress in (Progress(quiet=True, total=3), Progress(total=3)):  # stderr: captured
        rows(progress, 2)
        progress.write("a note")
        progress.close()
    assert capsys.readouterr().err == "a note\na note\n"
    with terminal(100) as screen:
        progress = Progress(quiet=True, total=3)
        rows(progress, 2)
        progress.close()
    assert screen.text == ""


@pytest.mark.parametrize("columns, widths", [(None, {80}), (40, {39, 40}), (100, {99, 100})])
def test_the_bar_fills_the_terminal_or_80_columns_when_it_reports_no_size(columns, widths):
    # A sized terminal's bar follows its width (tqdm may leave the last column empty, so
    # that the line does not wrap); one that reports no size gets exactly 80 columns.
    with terminal(columns) as screen:
        progress = Progress(total=4)
        progress.close()
        first = screen.draws()[0]
    assert len(first) in widths, first


def test_a_terminal_one_column_wide_is_a_sized_terminal():
    # One column has a size: the bar follows it (no room for the bar itself), not the 80
    # columns of a terminal that reports none.
    with terminal(1) as screen:
        Progress(total=4).close()
        first = screen.draws()[0]
    assert "|" not in first and len(first) < 80, first


class ConsoleWithoutDescriptor(io.TextIOBase):
    """A terminal reached through a console object that has no file descriptor of its
    own (``fileno`` raises, as io streams without one do): its size cannot be asked."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")

    def write(self, text: str) -> int:
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def test_a_terminal_whose_size_cannot_be_asked_gets_80_columns():
    with terminal(100, wrap=ConsoleWithoutDescriptor) as screen:
        progress = Progress(total=4)
        rows(progress, 1)
        progress.close()
        first = screen.draws()[0]
    assert len(first) == 80, first


def test_the_counters_ride_along_without_forcing_a_redraw():
    # The counters are handed to tqdm without a refresh of their own: rows drawn within
    # tqdm's minimum interval draw nothing until the bar is next drawn (here: its close).
    with terminal(200) as screen:
        progress = Progress(total=10)
        progress._bar.mininterval = 3600
        rows(progress, 2, was_compressed=True)
        rows(progress, 1, still_over_limit=True)
        assert len(screen.draws()) == 1  # the bar's first draw only
        progress.close()
        last = screen.draws()[-1]
    assert len(screen.draws()) == 2
    assert re.search(r"\| 3/10 \[.*compressed=2, skipped=0, over_limit=1, failed=0, "
                     r"rejected=0, api_calls=0, in_flight=0\]$", last), last


def test_a_resumed_run_starts_from_the_interrupted_runs_counts():
    done = AggregateMetrics(total_trajectories=6, trajectories_compressed=3,
                            trajectories_skipped_under_target=1,
                            trajectories_still_over_limit=1, trajectories_failed=1,
                            rows_rejected=2, total_summarization_calls=4)
    progress = Progress(quiet=True)
    progress.restore(done)
    assert progress.counters == {"compressed": 3, "skipped": 1, "over_limit": 1, "failed": 1,
                                 "rejected": 2, "api_calls": 4, "in_flight": 0}
    progress.row(TrajectoryMetrics(was_compressed=True, summarization_api_calls=2))
    progress.rejected()
    assert progress.counters == {"compressed": 4, "skipped": 1, "over_limit": 1, "failed": 1,
                                 "rejected": 3, "api_calls": 6, "in_flight": 0}
    with terminal(200) as screen:
        progress = Progress(total=12)
        progress.restore(done)
        progress.close()
        last = screen.draws()[-1]
    # 6 rows and 2 rejected lines were done before the cut.
    assert re.search(r"\| 8/12 \[.*compressed=3, skipped=1, over_limit=1, failed=1, "
                     r"rejected=2, api_calls=4, in_flight=0\]$", last), last


def test_close_finishes_the_bar_even_while_something_else_holds_it():
    # close() ends the bar's line itself, not whenever the bar object happens to be freed
    # (here a reference is kept, as a debugger or an exception's traceback would).
    with terminal(100) as screen:
        progress = Progress(total=2)
        held = progress._bar
        rows(progress, 2)
        progress.close()
        closed = screen.read()
        assert closed.endswith("\r\n"), closed
        assert re.search(r"100%\|.*\| 2/2 \[", screen.draws()[-1])
        # After the close: a note is a plain line, rows draw nothing.
        progress.write("after")
        rows(progress, 1)
        progress.close()
        assert screen.read() == closed + "after\r\n"
    del held


def test_each_row_counts_under_its_outcome_and_live_counters_replace_the_sums():
    progress = Progress(quiet=True)
    rows(progress, 1, was_compressed=True, summarization_api_calls=2)
    rows(progress, 2, skipped_under_target=True)
    progress.row(TrajectoryMetrics(still_over_limit=True, error="compression failed: x"))
    progress.rejected()
    progress.in_flight(3)
    assert progress.counters == {"compressed": 1, "skipped": 2, "over_limit": 1, "failed": 1,
                                 "rejected": 1, "api_calls": 2, "in_flight": 3}
    progress.live({})  # a summarizer with nothing to say changes nothing
    rows(progress, 1, summarization_api_calls=1)
    assert progress.counters["api_calls"] == 3
    # Counters straight from the summarizer replace the per-row sums from then on.
    progress.live({"api_calls": 9})
    rows(progress, 1, was_compressed=True, summarization_api_calls=4)
    progress.in_flight(0)
    assert progress.counters == {"compressed": 2, "skipped": 2, "over_limit": 1, "failed": 1,
                                 "rejected": 1, "api_calls": 9, "in_flight": 0}


class Clock:
    """`time.monotonic` for the progress module, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_the_counters_shown_are_refreshed_at_most_every_quarter_second(monkeypatch):
    from trajectory_compressor.engine import progress as progress_module

    clock = Clock()
    monkeypatch.setattr(progress_module, "time", clock)
    with terminal(200) as screen:
        progress = Progress(total=10)
        bar = progress._bar
        rows(progress, 1, was_compressed=True)
        assert "compressed=1," in bar.postfix  # the first row shows them at once
        clock.now += 0.1
        rows(progress, 1, was_compressed=True)
        progress.rejected()
        assert "compressed=1," in bar.postfix and "rejected=0" in bar.postfix
        clock.now += 0.15  # 0.25 s since the last refresh
        progress.rejected()
        assert "compressed=2," in bar.postfix and "rejected=2" in bar.postfix
        clock.now += 0.25
        rows(progress, 1, was_compressed=True)
        assert "compressed=3," in bar.postfix
        progress.close()
        last = screen.draws()[-1]
    assert re.search(r"\| 5/10 \[.*compressed=3, .*rejected=2", last), last


def test_a_resumed_bar_shows_the_counts_before_its_next_draw():
    done = AggregateMetrics(total_trajectories=2, trajectories_compressed=2, rows_rejected=1)
    with terminal(200) as screen:
        progress = Progress(total=6)
        progress._bar.mininterval = 3600  # only what forces a draw draws
        progress.restore(done)
        assert "compressed=2," in progress._bar.postfix and "rejected=1" in progress._bar.postfix
        assert len(screen.draws()) == 1  # restoring forces no draw of its own
        progress.close()


def test_a_note_goes_above_the_bar():
    with terminal(100) as screen:
        progress = Progress(total=3)
        rows(progress, 1)
        progress.write("note: \x1b[31mred\x1b[0m is data")
        progress.close()
    assert "note: " in screen.text and "is data\r\n" in screen.text
    assert "\x1b[31m" not in screen.text  # data reaches the terminal inert


def test_a_terminal_that_reports_no_size_has_24_lines():
    # tqdm hides the bars past a terminal's last line: with 24 lines, the 24th open bar
    # (position 23) is where it says so.
    with terminal(None) as screen:
        bars = [Progress(total=1) for _ in range(24)]
        for progress in reversed(bars):
            progress.close()
    assert "(more hidden)" in screen.text
