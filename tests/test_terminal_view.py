"""`core.terminal_view`: what a VT100-style terminal shows, against hand-made byte
streams whose screens were worked out by hand (cell by cell, in terminal order)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajectory_compressor.core.terminal_view import (
    is_bare_cr_file,
    strip_inert,
    terminal_view,
)

CASES = [
    # plain text passes as it is, tabs and trailing spaces included
    ("plain\ttext  \nsecond", "plain\ttext  \nsecond"),
    # colours, bold, an OSC title (BEL and ST ended), a NUL and a bell: nothing on screen
    ("\x1b[1m\x1b[31mFAILED\x1b[0m a.py\x07\n\x1b]0;title\x07ok\x00\x1b]8;;http://x\x1b\\y",
     "FAILED a.py\noky"),
    # CR: the shorter redraw covers only the start of the longer line
    ("abcdef\r\x1b[1mxy", "xycdef"),
    ("10%\r50%\r100%", "100%"),
    # erase-in-line after the CR, then the shorter text: no stale tail (issue 38)
    ("eta 0:00:07\r\x1b[Keta 0:00:00", "eta 0:00:00"),
    ("eta 0:00:07\r\x1b[0Keta 0:00:00", "eta 0:00:00"),
    # erase before the CR does not clear what comes after it
    ("eta 0:00:17\x1b[K\reta 0:00:0", "eta 0:00:07"),
    # cargo: the status line erased, the Compiling line written over it
    ("    Building [=====>   ] 3/19: rand, chrono\r\x1b[K   Compiling rand v0.8.5\n",
     "   Compiling rand v0.8.5\n"),
    # ESC[2K clears the line but leaves the cursor: the columns before it show as blanks
    ("abc\x1b[2Kxy", "   xy"),
    ("abcdef\r\x1b[2Kxy", "xy"),
    # ESC[1K clears from the start through the cursor (cursor at column 3 here)
    ("abcdef\x1b[4G\x1b[1K", "    ef"),
    # cursor to column 1-based, forward and back
    ("abc\x1b[5Gx", "abc x"),
    ("abcdef\x1b[2Gz", "azcdef"),
    ("ab\x1b[3Cz", "ab   z"),
    ("abcd\x1b[2Dz", "abzd"),
    ("abcd\x1b[Dz", "abcz"),
    # backspace: overstrike bold and underline as man prints them, and not past column 0
    ("N\bNA\bAM\bME\bE", "NAME"),
    ("_\bu_\bl", "ul"),
    ("\b\bab", "ab"),
    # CRLF is a line end; a CR at the end of a line leaves it as it is
    ("one\r\ntwo\r\n", "one\ntwo\n"),
    ("done\r\nnext", "done\nnext"),
    # a spinner and a progress bar without a line feed: redraws, the last state shows
    ("|\r/\r-\r\\\rdone", "done"),
    ("[###   ] 50%\r[######] 100%", "[######] 100%"),
    # bare-CR line ends (an old Mac file): records, not redraws
    ("first line\rsecond record\rthird\r", "first line\nsecond record\nthird\n"),
    ("abcdef\rxy", "abcdef\nxy"),
    # a NUL shows nothing: it does not turn a spinner's records into lines
    ("ok\x00\rok", "ok"),
    # a counter redrawn in place is no file
    ("step 1\rstep 2\rstep 3", "step 3"),
    # 8-bit CSI
    ("x\x9b31my\x9bK", "xy"),
    # an unknown CSI (a cursor move between lines) is dropped like a colour
    ("a\x1b[2Ab", "ab"),
]


@pytest.mark.parametrize(("stream", "screen"), CASES)
def test_the_screen_worked_out_by_hand(stream, screen):
    assert terminal_view(stream) == screen


def test_bare_cr_files_are_told_from_redraws():
    assert is_bare_cr_file("a line\ranother one\rend")
    assert is_bare_cr_file("a line\ranother one\rend\n")  # a line feed only at the end
    assert not is_bare_cr_file("a line\ranother one\nend")  # a line feed follows: redraw
    assert not is_bare_cr_file("Loading.\rLoading..\rLoading...")  # it grows
    assert not is_bare_cr_file("12 files\r13 files\r14 files")  # counters
    assert not is_bare_cr_file("one\x1b[K\rtwo")  # escapes: a terminal program
    assert not is_bare_cr_file("only one\r")


TEXT = st.lists(st.sampled_from([
    "\x1b[32m", "\x1b[0m", "\x1b[K", "\x1b[1K", "\x1b[2K", "\x1b[3G", "\x1b[2C", "\x1b[D",
    "\x1b]0;t\x07", "\r", "\n", "\r\n", "\b", "\t", " ", "ok", "FAILED", "42", "é", "\x00",
    "\x1b", "\x1b[", "\x9b1m",
]), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_the_view_is_a_fixed_point_and_colours_do_not_change_it(text):
    shown = terminal_view(text)
    assert terminal_view(shown) == shown
    inert = strip_inert(text)
    if not is_bare_cr_file(inert.replace("\r\n", "\n")) or inert == text:
        # (an escape tells a redraw from a file whose lines end in bare CRs)
        assert terminal_view(inert) == shown
    assert not any(c in shown for c in "\r\b\x1b\x00")
