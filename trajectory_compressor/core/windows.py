"""Windows output (§20): one row over the target as k rows that each fit (pure).

Window 1 is the trajectory from its start until the next turn would pass the target.
Window j+1 is what the live compressor (§10, ``live.ContextCompressor``) would hand the
model after compacting at that point: the protected head, one summary of everything
between the head and the recent turns, the recent turns (the live compressor's protected
tail, here untrained context), then new turns until the next one would pass the target.

How the live compressor's threshold maps: it compacts when the prompt reaches
``threshold x context_length``; a window ends when its next turn would pass the target,
so the threshold tokens are the target (``context_length = target``, ``threshold = 1``)
and its tail budget is ``int(target x TAIL_RATIO)`` (the live default ``target_ratio``).
Its tail walk (`overlap_start`) is the live ``boundaries.tail_start`` on the history so
far; the context is shortened, whole groups at a time, only when it leaves no room for
the next new turn (``Window.shrunk``). A window that the whole protected head leaves over
the target, even with its summary cut to the least allowed, keeps only the row's opening
system and task turns (`essential_head`) and summarizes the rest of the head with what
follows, when that lets it fit. A window over the target that ends on tool outputs (the
results of its last call, after its last trained turn) gets them masked (`core.mask`'s
placeholder, ``Window.masked``) when that lets it fit: nothing the window trains reads
them, and the next window holds them as context or in its summary. One that still does
not fit says why in ``Window.over`` (and names the turn it holds that is over the target
by itself, if one is).

Every turn of the input is trained in exactly one window (its ``train`` region); the
head and the context of windows 2..k are there as context and are marked not trained.
Boundaries never separate a tool call from its results, except that an alternating row
(LLaMA-Factory: user and assistant sides must pair up) may end a window on a call whose
results open the next window, right after the same call repeated as context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate

from .conversation import Trajectory, Turn
from .plan import Boundaries, Plan, Region
from .reasons import WINDOW_OVER

# The live compressor's defaults (live.ContextCompressor, live.boundaries).
TAIL_RATIO = 0.20
TAIL_SOFT_CEILING = 1.5
MIN_TAIL_TURNS = 3

# The tokens tool turn ``i`` holds with its outputs masked; None when masking would not
# shorten it (or may not touch it).
MaskedTokens = Callable[[int], "int | None"]


@dataclass(frozen=True)
class Window:
    """One window of a row, by the row's turn indices.

    The window's turns are ``[0, head)``, then one summary of ``summarized`` (when not
    None), then ``[context, train.end)``; ``[context, train.start)`` and the head are
    context, ``train`` is trained. Window 1 has ``head == 0``, no summary, and
    ``context == train.start == 0``.
    """

    number: int
    head: int
    summarized: Region | None
    context: int
    train: Region
    tokens: int  # planned: per-turn counts, the summary at its largest allowed size
    trained_assistant_tokens: int = 0  # of the assistant turns in ``train``
    summarized_tokens: int = 0  # of the turns ``summarized`` replaces
    summary_tokens: int = 0  # the summary's budget (less than the configured one when
    # only a shorter summary lets the window fit)
    shrunk: bool = False  # the live tail was shortened to leave room for a new turn
    over: str = ""  # why the window is over the target (empty: it fits)
    masked: tuple[int, ...] = ()  # trailing tool turns written masked in this window
    masked_saving: int = 0  # the tokens their placeholders take off ``tokens``

    @property
    def requested_tokens(self) -> int:
        """The summary's length asked of the summarizer: its budget, and shorter than
        the turns it replaces."""
        return max(1, min(self.summary_tokens, self.summarized_tokens - 1))

    @property
    def source_turns(self) -> list[int]:
        """Indices of the input turns the window holds, in order (the summary aside)."""
        return [*range(self.head), *range(self.context, self.train.end)]


@dataclass(frozen=True)
class WindowLimits:
    """The budgets windows are planned for: the target; the summary's budget, and the
    least it may be cut to for a window that would not fit otherwise; what a summary turn
    adds besides its text (the notice on the system turn, a template's markers)."""

    target: int
    summary: int
    extra: int = 0
    min_summary: int | None = None  # None: the summary is never cut below its budget

    @property
    def tail_budget(self) -> int:
        return int(self.target * TAIL_RATIO)


def clean_starts(roles: Sequence[str], boundaries: Boundaries) -> list[bool]:
    """Per turn: whether the first turn after a summary may be this one."""
    allowed = boundaries.start_roles
    return [role != "tool" if allowed is None else role in allowed for role in roles]


def clean_ends(roles: Sequence[str], boundaries: Boundaries) -> list[bool]:
    """Per position ``0..n``: whether a window may stop before this turn.

    Never before a tool turn (it would lose the call it answers); in an alternating row,
    only before a user-side turn (human or tool) so that the window ends on the assistant
    side as such rows must. The end of the row is always clean.
    """
    n = len(roles)
    if boundaries.start_roles is None:
        ends = [roles[i] != "tool" for i in range(n)]
    else:
        ends = [roles[i] in ("human", "tool") for i in range(n)]
    return [*ends, True]


def head_end(roles: Sequence[str], middle_start: int) -> int:
    """The protected head: the planner's head (`plan.compressible_middle`), pushed past
    tool turns so that no call loses its results."""
    end = middle_start
    while end < len(roles) and roles[end] == "tool":
        end += 1
    return end


def overlap_start(roles: Sequence[str], tokens: Sequence[int], head: int, stop: int,
                  budget: int) -> int:
    """Where the live compressor's protected tail of the history ``[0, stop)`` starts:
    walk back from ``stop`` taking turns until ``budget`` tokens (up to
    `TAIL_SOFT_CEILING` x budget rather than stop short of one turn), at least
    `MIN_TAIL_TURNS` turns, moved back onto the call of any tool result it starts on."""
    start = stop
    taken = 0
    ceiling = budget * TAIL_SOFT_CEILING
    while start > head:
        cost = tokens[start - 1]
        if stop - start >= MIN_TAIL_TURNS and (taken >= budget or taken + cost > ceiling):
            break
        taken += cost
        start -= 1
    start = _group_start(roles, start, head, stop)
    if start <= head:
        start = _group_start(roles, max(head, stop - MIN_TAIL_TURNS), head, stop)
    return start


def _group_start(roles: Sequence[str], index: int, low: int, stop: int) -> int:
    while low < index < stop and roles[index] == "tool":
        index -= 1
    return index


def trailing_outputs(roles: Sequence[str], region: Region) -> list[int]:
    """The tool turns that end ``region``: the results of its last call, after its last
    assistant turn, so that nothing trained in a window ending there reads them."""
    start = region.end
    while start > region.start and roles[start - 1] == "tool":
        start -= 1
    return list(range(start, region.end))


def essential_head(roles: Sequence[str], head: int) -> int:
    """The least head a window may keep: the system and task turns the row opens with
    (the first call and its results, also protected, may then be summarized)."""
    end = 0
    while end < head and roles[end] in ("system", "human"):
        end += 1
    return end


def plan_windows(roles: Sequence[str], tokens: Sequence[int], head: int,
                 limits: WindowLimits, boundaries: Boundaries,
                 least_head: int | None = None,
                 masked_tokens: MaskedTokens | None = None) -> list[Window]:
    """The windows of a row with per-turn ``tokens`` and protected head ``[0, head)``.

    Each window trains at least one clean group of turns, so the plan always ends; a
    window that cannot fit even so (its head and summary, or one group alone, are over
    the target) says why in ``over``, naming its turns and their tokens. A window after
    the first that does not fit with the whole head keeps only ``[0, least_head)`` (when
    given and smaller), the rest of the head summarized with what follows, when that
    lets it fit (``Window.head`` is then ``least_head``). Before that, with
    ``masked_tokens``, a window over the target that ends on tool outputs is tried with
    them masked (`trailing_outputs`, ``Window.masked``). A row whose first window reaches
    its end gets one window: windows cannot help it.
    """
    n = len(roles)
    prefix = [0, *accumulate(tokens)]
    assistant = [0, *accumulate(t if r == "gpt" else 0 for r, t in zip(roles, tokens,
                                                                       strict=True))]
    starts = clean_starts(roles, boundaries)
    ends = clean_ends(roles, boundaries)
    target = limits.target

    def span(a: int, b: int) -> int:
        return prefix[b] - prefix[a]

    def first_end(at_least: int) -> int:
        e = at_least
        while not ends[e]:
            e += 1
        return e

    def fill(base: int, begin: int, lowest: int) -> int:
        """The furthest clean end from ``lowest`` on whose window fits; ``lowest`` if none."""
        best = lowest
        for e in range(lowest + 1, n + 1):
            if base + span(begin, e) > target:
                break
            if ends[e]:
                best = e
        return best

    def masking(train: Region) -> tuple[tuple[int, ...], int]:
        """The trailing outputs of ``train`` that masking shortens, and the tokens saved."""
        if masked_tokens is None:
            return (), 0
        shorter = [(i, tokens[i] - after) for i in trailing_outputs(roles, train)
                   if (after := masked_tokens(i)) is not None and after < tokens[i]]
        return tuple(i for i, _ in shorter), sum(saved for _, saved in shorter)

    def place(number: int, keep: int, begin: int, mask: bool = False) -> Window:
        """Window ``number``, training from ``begin``, with the head ``[0, keep)``; with
        ``mask``, only its first group, that group's trailing outputs masked."""
        lowest = first_end(begin + 1)
        masked, saving = masking(Region(begin, lowest)) if mask else ((), 0)
        # What the window holds besides its summary and the turns from its context on,
        # less what masking takes off those turns.
        fixed = span(0, keep) + limits.extra - saving
        live = overlap_start(roles, tokens, keep, begin, limits.tail_budget)
        # Context starts the live tail may shorten to: clean starts after the head, the
        # new turns themselves last (only when they may open the window).
        options = [c for c in range(max(live, keep + 1), begin) if starts[c]]
        if starts[begin]:
            options.append(begin)
        if not options:  # nothing after the head can open the window: the latest
            # clean start (the head's last turn: no summary then), else the new turns
            options = [max((c for c in range(keep, begin) if starts[c]), default=begin)]
        context = next((c for c in options
                        if fixed + limits.summary + span(c, lowest) <= target),
                       options[-1])
        summary = limits.summary
        room = target - fixed - span(context, lowest)
        if room < summary and limits.min_summary is not None and room >= limits.min_summary:
            summary = room  # a shorter summary, rather than a window over the target
        base = fixed + summary + span(context, begin)
        end = lowest if mask else fill(base, begin, lowest)
        summarized = Region(keep, context) if context > keep else None
        planned = base + span(begin, end) - (0 if summarized else summary + limits.extra)
        over = ""
        if planned > target:
            over = (f"turns {begin}-{end - 1} ({span(begin, end)} tokens) after the "
                    f"protected head (turns 0-{keep - 1}, {span(0, keep)} tokens)"
                    + (f", the context (turns {context}-{begin - 1}, "
                       f"{span(context, begin)} tokens)" if context < begin else "")
                    + (f" and a summary of {summary} tokens" if summarized else "")
                    + f" make {planned}, over the target {target}"
                    + (f" (room for a summary: {max(room, 0)} tokens)" if summarized else ""))
        return Window(number, keep, summarized, context, Region(begin, end), planned,
                      assistant[end] - assistant[begin],
                      span(keep, context) if summarized else 0,
                      summary if summarized else 0, shrunk=context != live, over=over,
                      masked=masked, masked_saving=saving)

    def alone(window: Window) -> str:
        """Where one turn the window holds is over the target by itself: which."""
        big = max(window.source_turns, key=lambda i: tokens[i])
        if tokens[big] <= target:
            return ""
        return f"; turn {big} alone holds {tokens[big]} tokens, over the target"

    lowest = first_end(max(head, 1))
    end = fill(0, 0, lowest)
    first = Window(1, 0, None, 0, Region(0, end), span(0, end), assistant[end])
    if first.tokens > target:
        masked, saving = masking(first.train)
        held = first.tokens - saving
        first = dataclasses.replace(first, tokens=held, masked=masked, masked_saving=saving) \
            if held <= target else dataclasses.replace(first, over=(
                f"turns 0-{end - 1} (the protected head and the first group after it) "
                f"hold {span(0, end)} tokens, over the target {target}"))
    windows = [first]
    # The ways a window may be held, in order: the whole head, the same with its trailing
    # outputs masked, then the least head without and with masking.
    heads = [head] + ([least_head] if least_head is not None and least_head < head else [])
    ways = [(keep, mask) for keep in heads for mask in (False, True)
            if not mask or masked_tokens is not None]
    while end < n:
        number = len(windows) + 1
        tried = (place(number, keep, end, mask) for keep, mask in ways)
        window = next(tried)
        if window.over:
            window = next((other for other in tried if not other.over), window)
        if window.over and len(heads) > 1:
            held = place(window.number, heads[1], end).tokens
            window = dataclasses.replace(window, over=(
                f"{window.over}; keeping only turns 0-{heads[1] - 1} of the head "
                f"({span(0, heads[1])} tokens) it would hold {held}"))
        windows.append(window)
        end = window.train.end
    return [dataclasses.replace(w, over=w.over + alone(w)) if w.over else w for w in windows]


def is_assistant(turn: Turn) -> bool:
    """Whether ``turn`` is an assistant turn: what windows train."""
    return turn.get("from") == "gpt"


def window_turns(turns: Sequence[Turn], window: Window, summary_text: str | None,
                 notice: str, masked_texts: Mapping[int, str] | None = None,
                 ) -> tuple[Trajectory, int | None, list[bool]]:
    """The turns of ``window`` of ``turns``: ``(turns, index of the summary turn or None,
    per turn whether it is trained)``. ``notice`` is appended to the head's first system
    turn when the window has a summary (empty: none). The summary is never trained.
    ``masked_texts``: the masked text of each turn in ``window.masked``."""
    head = [dict(turn) for turn in turns[:window.head]]
    summary_at: int | None = None
    middle: Trajectory = []
    if window.summarized is not None and summary_text is not None:
        summary_at = len(head)
        middle = [{"from": "human", "value": summary_text}]
        if notice:
            for turn in head:
                if turn.get("from") == "system":
                    turn["value"] = turn["value"] + notice
                    break
    context = [dict(turn) for turn in turns[window.context:window.train.start]]
    trained = [dict(turn) for turn in turns[window.train.start:window.train.end]]
    for i in window.masked:
        trained[i - window.train.start]["value"] = (masked_texts or {})[i]
    flags = [False] * (len(head) + len(middle) + len(context)) + [True] * len(trained)
    return [*head, *middle, *context, *trained], summary_at, flags


def windowed_plan(plan: Plan, roles: Sequence[str], tokens: Sequence[int], middle_start: int,
                  limits: WindowLimits, boundaries: Boundaries,
                  masked_tokens: MaskedTokens | None = None) -> Plan:
    """``plan`` of a row over the target, made a windows plan (action ``compress`` with
    its `Window`s) when windows help: two or more, each trains something."""
    head = head_end(roles, middle_start)
    windows = plan_windows(roles, tokens, head, limits, boundaries,
                           least_head=essential_head(roles, head),
                           masked_tokens=masked_tokens)
    if len(windows) < 2:
        return plan
    over = next((w.over for w in windows if w.over), "")
    return dataclasses.replace(plan, action="compress", windows=tuple(windows),
                               reason=WINDOW_OVER.text if over else "")
