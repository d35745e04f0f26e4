"""Facts a summary states that its row never did (issue 23): no model needed.

A summary's *claims* are the kinds of item `core.fidelity` extracts that a reader would
take as facts: identifiers, paths, URLs, hashes and IDs, ``--flags``, ``$VARS``, error
names (``KeyError``) and numbers with a unit (``512 MB``, ``30s``, ``12 tests``). Quoted
text and error messages are not claims (a summary may paraphrase them), nor are ordinary
words or bare numbers. A claim is *invented* when the row's turns before the summary's
position (the head and the summarized region) state it nowhere.

Matching, on the text as `fidelity.normalize_text` sees it (NFKC, case-folded, quotes as
spaces), with the JSON of tool calls and responses also read decoded (``\\u00e9`` is
``é``, an escaped ``\\n`` a line break):

- an identifier, path, URL or ID is found where it occurs not glued to a letter, digit or
  underscore at an edge that is one (as `fidelity` matches the region's items): ``app.py``
  is found in ``src/app.py``, ``user_id`` is not found in ``user_ids``;
- a claim that touches an ellipsis (``…`` or ``...``) is a clipped quotation, and so is
  the summary's last claim (a text cut at its budget): that side may be glued, so
  ``src/very_lo…`` is found in ``src/very_long_name.py``; a hex word of 7 or more digits
  may be the start of a longer one (an abbreviated commit hash);
- a number with a unit of size (B, kB/KiB … PB, either 1000 or 1024 for kB, MB, GB, TB,
  PB), time (ns … weeks), frequency (Hz … GHz) or percent is found where the row states
  the same quantity in any unit of that kind, equal to the precision the summary wrote it
  in: ``1.5 GB`` stands for 1.45–1.55 GB, so ``1536 MB`` (1.536 GB, or 1.5 GiB) states it,
  and so do ``1,536 MB`` and ``1536MB``; ``2 s`` is found from ``2345 ms``, ``3 s`` is not.
  Units convert both ways (``1500 ms`` is found from ``1.5 s``, ``1.5 s`` from ``1500
  ms``; the row's ``1.5 s`` and ``30 min`` count with a space before a one-letter unit
  too), and a rounded value stays within `MAX_ROUNDING` (a quarter) of what the row
  says: ``1 hour`` is not ``30 min``, nor ``1 GB`` ``512 MB`` (each is "1" at the
  summary's precision, but twice the row's value);
- a number of countable things (``12 tests``, ``3 failed``, ``400 lines``, ``8 workers``)
  is found where the row has the same number as a count or bare, with any unit or none
  (``12 passed``, ``"workers": 8``): the unit is the summary's own word for it. A number
  keeps its kind: the row's port (``port 8080``, ``localhost:8080``), size or duration
  (``512 MB``, ``30 s``) does not state ``8080 tests`` or ``512 files``;
- any other number with a unit (``60 fps``, ``4k``, ``2x``) only as the same number and unit;
- an action (``deleted the production database``) only where a turn shows it
  (`core.actions`: the verb or a command doing it, and the object's head noun).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from decimal import Decimal, InvalidOperation
from unicodedata import normalize as unicode_normalize

from .actions import ActionCheck
from .fidelity import (
    _NUMBER_UNIT,
    _NUMBER_UNIT_PARTS,
    _STOP_WORDS,
    _TAG,
    _TOKEN,
    _URL,
    _URL_TAIL,
    INVENTED_SHOWN,
    Fidelity,
    FidelityProbe,
    _forms,
    _occurs,
    _token_items,
    _word_set,
    normalize,
    searchable_text,
)

__all__ = ["INVENTED_SHOWN", "InventedCheck", "SummaryCheck", "claims"]

_ELLIPSIS = "..."
_HEX_WORD = re.compile(r"[0-9a-f]{7,}")
_ANY_NUMBER = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])")
# A rounded quantity stays within this share of the row's: "1 hour" rounds 30 min at
# its precision, but doubles it.
MAX_ROUNDING = 0.25
# What makes a number of the row a port: ``port 8080``, ``port=8080``, ``host:8080``.
_PORT_BEFORE = re.compile(r"(?:\bports?\b[\s:=#]{0,3}|[\w\].-]:)$")
# A unit of one letter after a space (``1.5 s``, ``30 m``): read as a quantity in the
# row's text only (in a summary, ``2 s`` is no claim; in a row it is what it says).
_SPACED_UNIT = re.compile(r"(?<![\w.,])((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)[ \t]"
                          r"([smhd])(?![\w'])")


def _units(scale: float, *names: str) -> dict[str, tuple[float, ...]]:
    return {name: (scale,) for name in names}


_DECIMAL_BYTES = {"kb": 1, "mb": 2, "gb": 3, "tb": 4, "pb": 5}
# Unit -> (dimension, scales to the dimension's base unit); a decimal byte prefix has two.
_MEASURES: dict[str, tuple[str, tuple[float, ...]]] = {
    **{u: ("bytes", s) for u, s in {
        **_units(1, "b", "byte", "bytes"),
        **{u: (1000.0 ** k, 1024.0 ** k) for u, k in _DECIMAL_BYTES.items()},
        **_units(1024.0, "kib"), **_units(1024.0 ** 2, "mib"), **_units(1024.0 ** 3, "gib"),
        **_units(1024.0 ** 4, "tib")}.items()},
    **{u: ("seconds", s) for u, s in {
        **_units(1e-9, "ns"), **_units(1e-6, "µs", "μs"), **_units(1e-3, "ms"),
        **_units(1, "s", "sec", "secs", "second", "seconds"),
        **_units(60, "m", "min", "mins", "minute", "minutes"),
        **_units(3600, "h", "hr", "hrs", "hour", "hours"),
        **_units(86400, "d", "day", "days"), **_units(604800, "week", "weeks")}.items()},
    **{u: ("hertz", s) for u, s in {
        **_units(1, "hz"), **_units(1e3, "khz"), **_units(1e6, "mhz"),
        **_units(1e9, "ghz")}.items()},
    "%": ("percent", (1.0,)),
}
_COUNTS = _word_set("""
test tests passed failed error errors warning warnings file files line lines row rows
record records item items request requests retries worker workers thread threads core
cores cpu cpus gpu gpus epoch epochs step steps char chars character characters token
tokens
""")
# Countable things `fidelity` does not take as units, which summaries count too (`4016
# samples`, `900 batches`): claims here, matched like the counts above.
_MORE_COUNTS = ("samples|batches|examples|iterations|documents|shards|chunks|pages|entries"
                "|commits|packages|dependencies|modules|functions|classes|columns|tables"
                "|queries|users|nodes|pods|containers|images|layers|parameters|params"
                "|spaces|bugs|issues|failures|calls|attempts|jobs|tasks|processes")
_COUNT_CLAIM = re.compile(
    rf"(?<![\w.,])(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?[ \t](?:{_MORE_COUNTS})(?!\w)",
    re.IGNORECASE)


class SummaryCheck:
    """Measures any summary offered for one region: the region's facts it keeps
    (`FidelityProbe`) and the claims it makes that the turns before it never state."""

    def __init__(self, head_texts: Sequence[str], region_texts: Sequence[str],
                 tail_texts: Sequence[str]) -> None:
        self.probe = FidelityProbe(region_texts, tail_texts)
        self.context = InventedCheck([*head_texts, *region_texts])

    @property
    def tail_items(self) -> list[str]:
        return self.probe.tail_items

    def measure(self, text: str, own: str | None = None) -> Fidelity:
        """The fidelity of the summary body ``text``; ``own`` is the summarizer's own text
        when ``text`` adds a references line to it (`model_ratio` and `invented` are of
        the summarizer's text alone)."""
        fidelity = self.probe.measure(text)
        model = fidelity if own is None else self.probe.measure(own)
        invented = tuple(self.context.invented(text if own is None else own))
        own_kept = None if model.kept == fidelity.kept else model.kept  # None: as `kept`
        return dataclasses.replace(fidelity, model_kept=own_kept, invented=len(invented),
                                   invented_items=invented)


class InventedCheck:
    """The facts of a row's turns before a summary, against which summaries are checked."""

    def __init__(self, context_texts: Sequence[str]) -> None:
        self.text = searchable_text(context_texts)
        self.actions = ActionCheck(self.text)
        self._numbers: set[Decimal] | None = None
        self._quantities: dict[str, list[float]] | None = None

    def invented(self, summary: str) -> list[str]:
        """The claims of ``summary`` the context does not state, in order, deduplicated."""
        seen: set[str] = set()
        found: list[str] = []
        for item, open_left, open_right in claims(summary):
            key = normalize(item)
            if key in seen:
                continue
            seen.add(key)
            if not self._states(item, key, open_left, open_right):
                found.append(item)
        found.extend(claim for claim in self.actions.invented(summary)
                     if normalize(claim) not in seen)
        return found

    def _states(self, item: str, key: str, open_left: bool, open_right: bool) -> bool:
        open_right = open_right or bool(_HEX_WORD.fullmatch(key) and not key.isdigit())
        if any(_occurs(form, self.text, open_left, open_right) for form in _forms(item)):
            return True
        parts = _NUMBER_UNIT_PARTS.fullmatch(key)
        if not parts:
            return False
        number, unit = parts[1], parts[2].strip()
        if _COUNT_CLAIM.fullmatch(item) or (unit in _COUNTS and _NUMBER_UNIT.fullmatch(key)):
            return _decimal(number) in self.numbers()
        measure = _MEASURES.get(unit)
        if measure is None:
            return False
        dimension, scales = measure
        value = float(number.replace(",", ""))
        decimals = len(number.partition(".")[2])
        stated = self.quantities().get(dimension, ())
        for scale in scales:
            # Half a unit of the last digit written, and a hair for float rounding; and
            # never further than MAX_ROUNDING of the row's value.
            tolerance = 0.5 * 10.0 ** -decimals * scale * (1 + 1e-9)
            said = value * scale
            if any(abs(said - q) <= tolerance
                   and abs(said - q) <= MAX_ROUNDING * abs(q) * (1 + 1e-9) + 1e-12
                   for q in stated):
                return True
        return False

    def numbers(self) -> set[Decimal]:
        """Every number the context writes, bare or with a unit."""
        if self._numbers is None:
            self._numbers = {n for m in _ANY_NUMBER.finditer(self.text)
                             if not self._other_kind(m)
                             and (n := _decimal(m.group())) is not None}
        return self._numbers

    def _other_kind(self, match: re.Match[str]) -> bool:
        """Whether the context's number ``match`` is a port, a size or a duration: not
        something a count can be."""
        if _PORT_BEFORE.search(self.text, max(match.start() - 12, 0), match.start()):
            return True
        after = _NUMBER_UNIT.match(self.text, match.start())
        if after is not None and after.end() > match.end():
            parts = _NUMBER_UNIT_PARTS.fullmatch(normalize(after.group()))
            return parts is not None and parts[2].strip() in _MEASURES
        spaced = _SPACED_UNIT.match(self.text, match.start())
        return spaced is not None

    def quantities(self) -> dict[str, list[float]]:
        """The measured quantities the context states, in base units, by dimension."""
        if self._quantities is None:
            self._quantities = {}
            for m in _NUMBER_UNIT.finditer(self.text):
                parts = _NUMBER_UNIT_PARTS.fullmatch(normalize(m.group()))
                measure = _MEASURES.get(parts[2].strip()) if parts else None
                if parts is None or measure is None:
                    continue
                value = float(parts[1].replace(",", ""))
                self._quantities.setdefault(measure[0], []).extend(
                    value * scale for scale in measure[1])
            for m in _SPACED_UNIT.finditer(self.text):
                dimension, scales = _MEASURES[m.group(2)]
                value = float(m.group(1).replace(",", ""))
                self._quantities.setdefault(dimension, []).extend(value * s for s in scales)
        return self._quantities


def claims(summary: str) -> Iterator[tuple[str, bool, bool]]:
    """``(claim, open_left, open_right)`` for each claim of ``summary``, in order; an open
    side touches an ellipsis (or the end of the text) and may be glued there."""
    text = _TAG.sub(lambda m: "\n" * len(m.group()), unicode_normalize("NFKC", summary))
    end_of_text = len(text.rstrip())
    found: list[tuple[int, int, str]] = []
    shown = text  # the ellipses are looked for here: blanking a URL blanks its tail too
    for m in _URL.finditer(text):
        found.append((m.start(), 0, m.group().rstrip(_URL_TAIL)))
    text = _URL.sub(lambda m: " " * len(m.group()), text)
    numbers: list[tuple[int, int]] = []
    for pattern in (_NUMBER_UNIT, _COUNT_CLAIM):
        for m in pattern.finditer(text):
            found.append((m.start(), 0, m.group()))
            numbers.append((m.start(), m.end()))
    for m in _TOKEN.finditer(text):
        # `…long_name.py`, clipped on the left: its claims follow the ellipsis (a token
        # keeps a leading dot: `.env`, `./run.sh`).
        clipped = len(_ELLIPSIS) if m.group().startswith(_ELLIPSIS) else 0
        for offset, item in _token_items(m.group()[clipped:]):
            start = m.start() + clipped + offset
            end = start + len(item)
            # A word within a number with a unit is part of it (`MiB` of `5 MiB`); one
            # that begins with it and goes on is a claim too (`4k-video.mp4`).
            if not any(a < start < b or (start == a and end <= b) for a, b in numbers):
                found.append((start, 1, item))
    found.sort()
    last = max((start for start, _, _ in found), default=-1)
    for start, _, item in found:
        key = normalize(item)
        if len(key) < 2 or key in _STOP_WORDS:
            continue
        end = start + len(item)
        open_left = shown[max(start - 3, 0):start] == _ELLIPSIS
        open_right = shown[end:end + 3] == _ELLIPSIS or (start == last
                                                          and end >= end_of_text - 1)
        yield item, open_left, open_right


def _decimal(number: str) -> Decimal | None:
    try:
        return Decimal(number.replace(",", "")).normalize()
    except InvalidOperation:
        return None


