"""JSON arrays of rows (``.json``, as LLaMA-Factory and many hub datasets ship them).

Reading is streamed: the file is memory-mapped and scanned for the array's top-level
elements (strings skipped whole by a regular expression), and each element is parsed on
its own, so memory holds one row at a time whatever the file's size. What follows the
array is read too (further arrays, JSON lines; anything else is a located reject), never
dropped; a reject keeps its first 200 bytes as ``raw`` (the preview). A ``.json`` file
that holds JSON lines instead (its first character is not ``[``) is read as JSON lines.

Counting (`input_rows`, for a progress bar with a total) follows the reader's steps
without parsing, and scans an array's bytes in windows with whole-buffer operations
(escapes and strings dropped, then only brackets, braces and commas looked at), several
times faster than reading (BENCHMARKS.md, "Counting a .json array").

Writing produces ``[`` + one compact row per line separated by commas + ``]``, through
an atomic file; a flush state records the byte offset and the rows so far, so a resumed
run continues the same array.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import jsonio
from .base import AtomicFile, InputFile, Location, Record

# Structural characters of JSON, and where strings start.
_STRUCTURE = re.compile(rb'[\[\]{}",]')
# Unrolled (`"[^"\\]*(?:\\.[^"\\]*)*"`): the regex engine keeps a backtracking state per
# repetition, and one per character of a 60 MB string took gigabytes.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SPACE = b" \t\r\n"
# A UTF-8 byte order mark where a file starts (``cat a.json b.json`` of files a Windows
# editor saved puts one after the first array too): skipped there, as RFC 8259 allows.
_BOM = b"\xef\xbb\xbf"


def first_char(path: Path) -> bytes:
    """The byte the reader looks at first (past spaces, a byte order mark and spaces, as
    `_skip_bom`), ``b""`` when there is none; read a block at a time."""
    head = b""
    marked = False  # a byte order mark passed
    with open(path, "rb") as f:
        while chunk := f.read(4096):
            head = (head + chunk).lstrip(_SPACE)
            if not marked:
                if len(head) < len(_BOM) and _BOM.startswith(head):
                    continue  # nothing yet, or a mark the block's end cuts in two
                if head.startswith(_BOM):
                    marked = True
                    head = head[len(_BOM):].lstrip(_SPACE)
            if head:
                return head[:1]
    return head[:1]


def read_json_array(source: InputFile, skip_rows: int = 0) -> Iterator[Record]:
    """Records of a JSON array file, one per element; ``skip_rows`` elements are passed
    over without being parsed (resume)."""
    name = str(source.path)
    with open(source.path, "rb") as f:
        try:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            return
    with data:
        yield from _elements(data, name, skip_rows)


def _elements(data: Any, name: str, skip_rows: int) -> Iterator[Record]:
    """Every row of the file: the elements of its first array, then whatever follows it.

    Nothing after the first array is ignored (``cat a.json b.json`` is common): a further
    array's elements and JSON objects (JSON lines appended to the array) are rows too,
    numbered on from the first array; any other content (an object that does not parse
    included) is a located reject, one per line, and reading goes on at the next line.
    The first ``skip_rows`` rows are not yielded (array elements among them not parsed).
    """
    size = len(data)
    pos = _skip_bom(data, 0)
    if pos >= size:
        return
    if data[pos:pos + 1] != b"[":
        yield Record(Location(name), error="not a JSON array (it does not start with '[')")
        return
    index = 0
    while pos < size:
        char = data[pos:pos + 1]
        if char == b"[":  # an array: each element is a row
            pos = _skip_space(data, pos + 1)
            closing = data[pos:pos + 1] == b"]"
            end = pos
            while not closing:
                end, closing = _element_end(data, pos)
                location = Location(name, row=index)
                if end < 0:
                    if index >= skip_rows:
                        yield Record(location, error=(
                            "the JSON array is truncated or malformed from this row on (an "
                            "unterminated string, object or array)"))
                    return
                if index >= skip_rows:
                    yield _parse(location, bytes(data[pos:end]).strip(_SPACE))
                index += 1
                pos = _skip_space(data, end + 1)
            pos = _skip_space(data, end + 1)
            continue
        if data[pos:pos + 3] == _BOM:  # the start of a second file
            pos = _skip_bom(data, pos)
            continue
        location = Location(name, row=index)
        end, record = _after_array(data, pos, location)
        if record is not None and record.error is None:  # an object after an array: a row
            if index >= skip_rows:
                yield record
        elif char == b"{":
            if index >= skip_rows:
                why = ("is truncated or malformed (an unterminated string or object)"
                       if record is None else f"does not parse ({record.error})")
                yield Record(location, raw=bytes(data[pos:min(end, pos + 200)]), error=(
                    f"the JSON object at byte {pos}, after the array, {why}; its line is "
                    "a reject and reading goes on at the next"))
        else:
            if index >= skip_rows:
                yield Record(location, raw=bytes(data[pos:min(end, pos + 200)]), error=(
                    f"unexpected content at byte {pos}, after the JSON array: neither "
                    "another array nor a JSON object"))
        index += 1
        pos = _skip_space(data, end)


def _after_array(data: Any, pos: int, location: Location) -> tuple[int, Record | None]:
    """What starts at ``pos`` after an array: ``(end, record)``. An object that parses is
    a row (``end`` after it); anything else is its line alone (``end`` at the line's end,
    as in JSONL), with the object's parse error when its braces balanced (over the lines
    after it, say), else None."""
    record = None
    if data[pos:pos + 1] == b"{":
        end = _value_end(data, pos)
        if end >= 0:
            record = _parse(location, bytes(data[pos:end]))
            if record.error is None:
                return end, record
    end = data.find(b"\n", pos)
    return (len(data) if end < 0 else end), record


def _parse(location: Location, raw: bytes) -> Record:
    if not raw:
        return Record(location, raw=raw, error="empty element in the JSON array")
    try:
        return Record(location, jsonio.loads(raw), raw)
    except UnicodeDecodeError as exc:
        return Record(location, raw=raw[:200], error=(
            f"element is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"))
    except ValueError as exc:
        return Record(location, raw=raw[:200], error=f"invalid JSON: {exc}")


def _skip_bom(data: Any, pos: int) -> int:
    """Past the spaces at ``pos``, a byte order mark if one follows, and spaces again."""
    pos = _skip_space(data, pos)
    if data[pos:pos + 3] == _BOM:
        pos = _skip_space(data, pos + 3)
    return pos


def _skip_space(data: Any, pos: int) -> int:
    size = len(data)
    while pos < size and data[pos] in _SPACE:
        pos += 1
    return pos


def _value_end(data: Any, pos: int) -> int:
    """The offset after the object or array that opens at ``pos`` (-1: the file ends first)."""
    depth = 0
    while True:
        match = _STRUCTURE.search(data, pos)
        if match is None:
            return -1
        char = match.group()
        at = match.start()
        if char == b'"':
            string = _STRING.match(data, at)
            if string is None:
                return -1
            pos = string.end()
            continue
        if char in b"[{":
            depth += 1
        elif char in b"]}":
            depth -= 1
            if depth == 0:
                return at + 1
        pos = at + 1


def _element_end(data: Any, pos: int, depth: int = 0) -> tuple[int, bool]:
    """Where the element starting at ``pos`` ends (the index of the ``,`` or ``]`` after
    it) and whether that ends the array; ``(-1, False)`` when the file ends first.
    ``depth``: how deep inside the element ``pos`` is (0: at its start)."""
    while True:
        match = _STRUCTURE.search(data, pos)
        if match is None:
            return -1, False
        char = match.group()
        at = match.start()
        if char == b'"':
            string = _STRING.match(data, at)
            if string is None:
                return -1, False
            pos = string.end()
            continue
        if char in b"[{":
            depth += 1
        elif char in b"]}":
            if depth == 0:
                return (at, True) if char == b"]" else (-1, False)
            depth -= 1
        elif depth == 0:  # a comma between elements
            return at, False
        pos = at + 1


# -- counting ------------------------------------------------------------------------------

# Escapes that matter to where strings end: an escaped backslash, then an escaped quote.
# Replaced left to right they pair the backslashes of a run as JSON does (a run starts
# where an escape can: after a character that is not a backslash).
_ESCAPES = (b"\\\\", b'\\"')
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{},"')
_COMMA, _CLOSE, _OPEN = ord(","), ord("]"), (ord("["), ord("{"))
_WINDOW = 1 << 16  # the first window of an array; doubled up to `_MAX_WINDOW`
_MAX_WINDOW = 1 << 22


def input_rows(source: InputFile) -> int | None:
    """How many records `read_json_array` yields for ``source`` (rows, and rejects such as
    an empty element or a truncated array), counted without parsing, for a progress bar
    with a total; None when the file cannot be read.

    Exact for well-formed elements, whatever their strings hold (brackets, braces,
    commas, escaped quotes), and for what follows the array (further arrays, JSON lines,
    other lines); a backslash outside any string (not JSON) may shift it.
    """
    try:
        with open(source.path, "rb") as f:
            try:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file cannot be mapped
                return 0
    except OSError:
        return None
    with data:
        return count_records(data)


def count_records(data: Any) -> int:
    """The records `_elements` yields for ``data``, taking the same steps (an object after
    the array is parsed as the reader parses it: one that does not parse is a reject of
    its line alone, and the count goes on at the next line)."""
    size = len(data)
    pos = _skip_bom(data, 0)
    if pos >= size:
        return 0
    if data[pos:pos + 1] != b"[":
        return 1
    records = 0
    while pos < size:
        char = data[pos:pos + 1]
        if char == b"[":
            end, elements = _array_extent(data, pos)
            records += elements
            if end < 0:  # truncated or malformed: the reader stops at its error record
                return records
            pos = _skip_space(data, end)
            continue
        if data[pos:pos + 3] == _BOM:  # the start of a second file
            pos = _skip_bom(data, pos)
            continue
        records += 1
        end, _ = _after_array(data, pos, Location(""))
        pos = _skip_space(data, end)
    return records


def _array_extent(data: Any, start: int) -> tuple[int, int]:
    """``(offset after the closing bracket, records)`` of the array opening at ``start``;
    the offset is -1 when the array is truncated or malformed (its records then include
    the reader's error record)."""
    size = len(data)
    pos = _skip_space(data, start + 1)
    if data[pos:pos + 1] == b"]":
        return pos + 1, 0
    commas = depth = 0  # commas between elements; depth inside the current element
    width = _WINDOW
    while pos < size:  # each window starts outside any string
        stop = min(pos + width, size)
        chunk = data[pos:stop]
        text = chunk.replace(_ESCAPES[0], b"").replace(_ESCAPES[1], b"")
        # A window that ends inside a string (or splits an escape, which only strings hold)
        # stops before the string: the next one starts at its opening quote.
        if text.count(b'"') % 2:
            if stop < size:
                cut = _open_quote(chunk)
                if cut == 0:  # one string longer than the window
                    width *= 2
                    continue
                chunk = chunk[:cut]
            text = text[:text.rfind(b'"')]
        # Outside strings, only brackets, braces and commas: every other piece dropped.
        structure = b"".join(text.translate(None, _NOT_STRUCTURE).split(b'"')[::2])
        at_start = depth
        for char in structure:
            if char == _COMMA:
                if depth == 0:
                    commas += 1
            elif char in _OPEN:
                depth += 1
            elif depth:
                depth -= 1
            elif char == _CLOSE:  # the array closes: find where, as the reader does
                end = _close_after(data, pos, at_start)
                return (end + 1 if end >= 0 else -1), commas + 1
            else:  # a brace closing the array: malformed
                return -1, commas + 1
        pos += len(chunk)
        width = min(width * 2, _MAX_WINDOW)
    return -1, commas + 1  # the file ends inside the array


def _open_quote(chunk: bytes) -> int:
    """The offset of the last unescaped quote of ``chunk`` (which starts outside a string
    and ends inside one)."""
    end = len(chunk)
    while True:
        at = chunk.rfind(b'"', 0, end)
        run = at
        while run > 0 and chunk[run - 1] == ord("\\"):
            run -= 1
        if (at - run) % 2 == 0:
            return at
        end = at


def _close_after(data: Any, pos: int, depth: int) -> int:
    """The offset of the bracket closing the array whose element ``pos`` lies in,
    ``depth`` deep."""
    while True:
        end, closing = _element_end(data, pos, depth)
        if closing or end < 0:
            return end
        pos, depth = end + 1, 0


class JsonArraySink:
    """Rows as one JSON array, one compact row per line, into an `AtomicFile`."""

    def __init__(self, final: Path, resume: dict[str, int] | None = None) -> None:
        self.file = AtomicFile(final, resume_at=None if resume is None else resume["at"])
        self._written = 0 if resume is None else resume["rows"]  # in the whole file
        self.rows = 0  # written by this object

    def write_row(self, row: Any) -> None:
        self.file.write((b",\n" if self._written else b"[\n") + jsonio.dumps(row))
        self._written += 1
        self.rows += 1

    def write_raw(self, raw: bytes) -> None:
        """An unchanged input element, byte for byte (its numbers' exact text kept)."""
        self.file.write((b",\n" if self._written else b"[\n") + raw)
        self._written += 1
        self.rows += 1

    def flush(self) -> dict[str, int]:
        return {"at": self.file.flush(), "rows": self._written}

    def finish(self) -> None:
        self.file.write(b"\n]\n" if self._written else b"[]\n")
        self.file.close_keep()

    def cleanup(self) -> None:
        """Nothing to drop: the array is one file."""

    def commit(self) -> None:
        self.file.commit()

    def discard(self) -> None:
        self.file.discard()

    def close_keep(self) -> None:
        self.file.close_keep()


def open_sink(final: Path, schema: Any, resume: dict[str, int] | None,
              text_chars: Callable[[Any], int]) -> JsonArraySink:
    """A JSON array output; rows need no schema or size."""
    return JsonArraySink(final, resume)
