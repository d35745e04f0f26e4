"""How much of a summarized region's hard facts its summary keeps (§15): no model needed.

Items are the identifier-like facts a later turn may need again, taken from the region's
turn texts:

- the tool name and every short string argument (≤ 80 chars) of a ``<tool_call>``; a
  ``command``/``cmd`` argument counts whole when it is that short, else by its first word
  (and, like any argument, by the items inside it); integer arguments of three digits or
  more (ports, PIDs, line numbers);
- URLs, and host:port pairs (``localhost:8080``);
- file paths: absolute or ``~/ ./ ../`` paths, relative paths whose last part has an
  extension or that have three parts or a trailing slash, bare file names with a known
  extension (``config.yaml``), dotfiles, ``Dockerfile``/``Makefile``;
- identifiers: snake_case, CONSTANT_NAMES, camelCase/PascalCase, dotted.names, error
  types (``KeyError``), ``--long-flags``, ``$VARS``;
- IDs: words of letters and digits (``a3f9c2e1``, ``PR-1234``, ``req_8f2k``, UUIDs,
  versions such as ``1.2.3`` and IP addresses), ``#1234`` references;
- numbers with a unit (``512 MB``, ``30s``, ``99%``, ``12 tests``);
- error messages: the rest of the line after ``SomeError:``, ``error:`` or ``fatal:``,
  clipped to 60 characters at a word boundary;
- quoted text: 3–80 characters between backticks or double quotes, with a letter or a
  digit, except a single ordinary lowercase word in double quotes (scare quotes).

Not items: stop-words and ordinary words (also capitalized or hyphenated English ones),
acronyms (``HTTP``, ``URLs``) and bare numbers, so list markers (``1.``, ``2)``), years,
dates and a port written alone do not count; a port counts inside a URL or ``host:port``.
Tool responses that are JSON contribute their values, not their keys.

Matching: item and summary are both normalized (NFKC, case-folded, quote marks read as
spaces, whitespace collapsed) and the item must occur in the summary without being glued
to a letter, digit or underscore where its own edge is one (``30s`` is not found in
``130s``, ``user_id`` not in ``user_ids``). A number with a unit matches with or without
the space. A path matches only whole: its bare file name is ambiguous to a later reader.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import json_text
from .terminal_view import terminal_view

MAX_ITEMS = 200
# How deep JSON inside a JSON string is read (a tool result whose content is itself the
# JSON text of an object, as Hermes rows store them).
JSON_DEPTH = 4
# Characters of free text searched for items at once (`_free_text_items`).
_BLOCK_CHARS = 1 << 16
MISSING_SHOWN = 20
INVENTED_SHOWN = 10
_VALUE_CHARS = 80
_MESSAGE_CHARS = 60
# Longer runs without a delimiter are blobs (base64, minified code), not facts; skipping
# them also bounds the work per token.
_TOKEN_CHARS = 256


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_STOP_WORDS = _word_set("""
a about above after again against all also am an and any are as at be because been before
being below between both but by can cannot could did do does doing done down during each
else few for from further get got had has have having he her here hers herself him himself
his how i if in into is it its itself just let me more most my myself no nor not now of off
on once only or other ought our ours ourselves out over own same she should so some such
than that the their theirs them themselves then there these they this those through to too
under until up us very was we were what when where which while who whom why will with
would yes you your yours yourself yourselves none null true false n/a ok okay
""")
_EXTENSIONS = _word_set("""
py pyi pyx ipynb js mjs cjs ts tsx jsx json jsonl ndjson yaml yml toml ini cfg conf env
md rst txt csv tsv parquet arrow xml html htm css scss sql db sqlite log lock sh bash zsh
ps1 bat rs go java kt kts scala swift c h cc cpp hpp cxx m rb php pl lua r jl dart vue
proto graphql tf hcl gradle mk cmake gz tgz zip tar bz2 xz whl so dll dylib exe bin pdf
png jpg jpeg gif svg webp mp3 mp4 wav pt pth ckpt safetensors gguf onnx pkl npy npz patch
diff pem crt key service
""")
_KNOWN_FILES = frozenset({"dockerfile", "makefile", "gemfile", "procfile", "jenkinsfile",
                          "vagrantfile", "rakefile", "justfile"})
_COMMAND_KEYS = frozenset({"command", "cmd"})

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what `terminal_view` may change
_SPACES = re.compile(r"\s")  # what str.split() splits at: both use Py_UNICODE_ISSPACE
_TAG = re.compile(r"</?[A-Za-z][\w-]{0,40}>")
_URL = re.compile(r"\b(?:https?|ftp|wss?|file)://[^\s<>\"'`|\\^{}]+", re.IGNORECASE)
_URL_TAIL = ".,;:!?)]}*"
_ERROR_MESSAGE = re.compile(
    r"(?:\b[A-Z]\w{0,60}(?:Error|Exception)|\b(?i:error|fatal))[ \t]*:[ \t]*([^\n]{3,200})")
_QUOTED = re.compile(r"`([^`\s][^`\n]{1,78}[^`\s])`|\"([^\"\s][^\"\n]{1,78}[^\"\s])\"")
_MULTI_UNITS = (
    r"kib|mib|gib|tib|kb|mb|gb|tb|pb|bytes?|ms|[µμ]s|ns|seconds?|secs?|minutes?|mins?|hours?"
    r"|hrs?|days?|weeks?|ghz|mhz|khz|hz|kbps|mbps|gbps|rpm|rps|qps|fps|px|tokens?|lines?"
    r"|rows?|files?|tests?|passed|failed|errors?|warnings?|records?|items?|requests?"
    r"|retries|workers?|threads?|cores?|cpus?|gpus?|epochs?|steps?|chars?|characters?")
_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
# The lookbehind starts a match only at the beginning of a number, which keeps the scan
# linear on long runs of digits and commas.
_NUMBER_UNIT = re.compile(
    rf"(?<![\w.,]){_NUMBER}(?:[ \t]?(?:{_MULTI_UNITS})|[smhdkbx%])(?!\w)", re.IGNORECASE)
_NUMBER_UNIT_PARTS = re.compile(rf"({_NUMBER})\s?([^\d\s].*)", re.IGNORECASE)
_TOKEN = re.compile(r"[^\s\"'`()\[\]{}<>,;=|*\\]+")
_LEAD_EDGES = ":;,!?"
_TRAIL_EDGES = ":;,.!?"
_PATH_CHARS = re.compile(r"[\w.@+~/-]+")
_WORD_CHARS = re.compile(r"[\w.#-]+")
_IDENT = re.compile(r"\w+")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_FLAG = re.compile(r"--[A-Za-z][\w-]+")
_ENV_VAR = re.compile(r"\$[A-Za-z_]\w*")
_HOST_PORT = re.compile(r"([\w.-]+):\d{2,5}")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_VERSION = re.compile(r"v?\d+(?:\.\d+){2,}")
_ISSUE_REF = re.compile(r"#\d{2,}")
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th|x)", re.IGNORECASE)
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]{2}")
_ERROR_TYPE = re.compile(r"[A-Z]\w*(?:Error|Exception|Warning)")
_LETTER = re.compile(r"[A-Za-z]")
_DIGIT = re.compile(r"\d")
# Quote marks become spaces, not nothing: `x'user_id'` must not read as `xuser_id`.
_QUOTE_CHARS = str.maketrans("\"'`‘’“”", "       ")


@dataclass(frozen=True)
class Fidelity:
    """Items found in a summarized region, and how many of them its summary kept.

    `missing` holds every item the summary lacks, those the tail mentions first;
    `to_dict` shows the first 20.
    """

    items: int
    kept: int
    tail_items: int
    tail_kept: int
    missing: tuple[str, ...]
    # Claims of the summary its row never stated (`core.invented`), and the items the
    # summarizer's own text kept, without the references line (None: as `kept`).
    invented_items: tuple[str, ...] = ()
    invented: int = 0
    model_kept: int | None = None

    @property
    def ratio(self) -> float:
        return self.kept / self.items if self.items else 1.0

    @property
    def model_ratio(self) -> float:
        """The region-fact recall of the summarizer's own text (no references line)."""
        kept = self.kept if self.model_kept is None else self.model_kept
        return kept / self.items if self.items else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"items": self.items, "kept": self.kept, "ratio": round(self.ratio, 4),
                "tail_items": self.tail_items, "tail_kept": self.tail_kept,
                "missing": list(self.missing[:MISSING_SHOWN]),
                "model_ratio": round(self.model_ratio, 4), "invented": self.invented,
                "invented_items": list(self.invented_items[:INVENTED_SHOWN])}

    @classmethod
    def from_dict(cls, data: Any) -> Fidelity | None:
        """Inverse of `to_dict` (``missing`` as far as it was shown); None when ``data`` is
        not a fidelity record."""
        if not isinstance(data, dict):
            return None
        counts = [data.get(k) for k in ("items", "kept", "tail_items", "tail_kept")]
        whole = [n for n in counts if isinstance(n, int) and not isinstance(n, bool)]
        if len(whole) != len(counts):
            return None
        missing = data.get("missing")
        shown = tuple(str(m) for m in missing) if isinstance(missing, list) else ()
        invented = data.get("invented")
        invented = invented if isinstance(invented, int) and not isinstance(invented, bool) \
            and invented >= 0 else 0
        items = data.get("invented_items")
        named = tuple(str(i) for i in items) if isinstance(items, list) else ()
        model = data.get("model_ratio")
        model_kept = round(model * whole[0]) if isinstance(model, (int, float)) \
            and not isinstance(model, bool) and 0 <= model <= 1 else None
        if model_kept == whole[1]:
            model_kept = None  # as `kept`: no references line added to
        return cls(whole[0], whole[1], whole[2], whole[3], shown, named, invented,
                   model_kept)


def normalize_text(text: str) -> str:
    """Text as matching sees it: as a terminal shows it (items are read so), NFKC,
    case-folded, quote marks as spaces, spaces collapsed."""
    if _CONTROL.search(text):
        text = terminal_view(text)
    text = unicodedata.normalize("NFKC", text).casefold().translate(_QUOTE_CHARS)
    if len(text) <= _BLOCK_CHARS:
        return " ".join(text.split())
    # A block at a time: the list of every word of a 60 MB turn (`split`, or `re.sub`'s
    # pieces) took a gigabyte. Blocks end at white space, so no word is cut.
    blocks: list[str] = []
    start = 0
    while start < len(text):
        space = _SPACES.search(text, start + _BLOCK_CHARS)
        end = space.start() if space else len(text)
        words = text[start:end].split()
        if words:
            blocks.append(" ".join(words))
        start = end
    return " ".join(blocks)


def searchable_text(texts: Iterable[str]) -> str:
    """``texts`` as matching searches them: normalized (`normalize_text`), each followed
    by the strings of the JSON in its tool calls and responses, decoded (`decoded_strings`):
    inside JSON text a line break is the two characters ``\\n``, which would glue an item
    to an ``n``."""
    return normalize_text("\n".join(t for text in texts for t in (text, *decoded_strings(text))))


def decoded_strings(text: str) -> Iterator[str]:
    """The strings (keys and values) of the JSON in ``text``'s tool calls and responses
    (or of ``text`` itself), decoded, JSON inside a string read too (`JSON_DEPTH`)."""
    bodies = re.findall(r"<tool_(?:call|response)>(.*?)(?:</tool_(?:call|response)>|$)",
                        text, re.DOTALL)
    for body in [text, *bodies]:
        yield from _json_strings(body.strip(), 0)


def _json_strings(text: str, depth: int) -> Iterator[str]:
    if depth > JSON_DEPTH or not text.startswith(("{", "[")):
        return
    value = _parse_json(text)
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                yield str(key)
                stack.append(child)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            yield node
            yield from _json_strings(node.strip(), depth + 1)
        elif node is not None:
            yield json.dumps(node)


def normalize(item: str) -> str:
    """An item's matching form; a number with a unit loses the space (`512 MB` → `512mb`)."""
    text = normalize_text(item).rstrip(".,;:")
    parts = _NUMBER_UNIT_PARTS.fullmatch(text)
    if parts and _NUMBER_UNIT.fullmatch(text):
        return parts[1] + parts[2]
    return text


def extract_items(texts: Sequence[str]) -> list[str]:
    """The region's items, first spelling of each, deduplicated by `normalize`, in order."""
    seen: set[str] = set()
    items: list[str] = []
    for text in texts:
        for item in _items_of_text(text):
            key = normalize(item)
            if len(key) < 2 or key in _STOP_WORDS or key in seen:
                continue
            seen.add(key)
            items.append(item)
            if len(items) >= MAX_ITEMS:
                return items
    return items


def measure_fidelity(region_texts: Sequence[str], tail_texts: Sequence[str],
                     summary: str) -> Fidelity:
    """The items of the region, those the tail mentions again, and those the summary keeps."""
    return FidelityProbe(region_texts, tail_texts).measure(summary)


class FidelityProbe:
    """A region's items and which of them its tail mentions again, extracted once and
    measured against any number of summaries (a first one and its repair)."""

    def __init__(self, region_texts: Sequence[str], tail_texts: Sequence[str]) -> None:
        self.items = extract_items(region_texts)
        tail = searchable_text(tail_texts)
        self._forms = [_forms(item) for item in self.items]
        self.in_tail = [any(_occurs(f, tail) for f in forms) for forms in self._forms]

    @property
    def tail_items(self) -> list[str]:
        """The items the tail mentions again, in the region's order."""
        return [item for item, tail in zip(self.items, self.in_tail, strict=True) if tail]

    def measure(self, summary: str) -> Fidelity:
        """How many of the items ``summary`` keeps; missing ones the tail needs first."""
        kept_text = normalize_text(summary)
        kept = tail_kept = 0
        tail_missing: list[str] = []
        other_missing: list[str] = []
        for item, forms, in_tail in zip(self.items, self._forms, self.in_tail, strict=True):
            in_summary = any(_occurs(f, kept_text) for f in forms)
            kept += in_summary
            tail_kept += in_tail and in_summary
            if not in_summary:
                (tail_missing if in_tail else other_missing).append(item)
        return Fidelity(items=len(self.items), kept=kept, tail_items=sum(self.in_tail),
                        tail_kept=tail_kept, missing=tuple(tail_missing + other_missing))


def aggregate_fidelity(values: Iterable[Fidelity]) -> dict[str, Any]:
    """Distribution of per-row ratios; p10 is the nearest-rank 10th percentile."""
    rows = list(values)
    ratios = sorted(f.ratio for f in rows)
    tail = [f.tail_kept / f.tail_items for f in rows if f.tail_items]
    if not ratios:
        return {"count": 0, "mean_ratio": None, "min_ratio": None, "p10_ratio": None,
                "median_ratio": None, "tail_rows": 0, "mean_tail_ratio": None}
    return {"count": len(ratios),
            "mean_ratio": round(statistics.fmean(ratios), 4),
            "min_ratio": round(ratios[0], 4),
            "p10_ratio": round(ratios[max(math.ceil(0.1 * len(ratios)) - 1, 0)], 4),
            "median_ratio": round(statistics.median(ratios), 4),
            "tail_rows": len(tail),
            "mean_tail_ratio": round(statistics.fmean(tail), 4) if tail else None}


def mentions(item: str, searchable: str) -> bool:
    """Whether ``item`` occurs in ``searchable`` (a `searchable_text`) as matching finds it:
    normalized, not glued to a word character at a word edge (`core.mask` asks which of
    an output's items a later turn names)."""
    return any(_occurs(form, searchable) for form in _forms(item))


def _forms(item: str) -> list[str]:
    """What finds `item` in normalized text: a number with a unit also with the space."""
    key = normalize(item)
    if not key:
        return []
    forms = [key]
    parts = _NUMBER_UNIT_PARTS.fullmatch(key)
    if parts and _NUMBER_UNIT.fullmatch(key):
        forms.append(f"{parts[1]} {parts[2]}")
    return forms


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"  # what `\w` matches in a str pattern


def _occurs(form: str, text: str, open_left: bool = False, open_right: bool = False) -> bool:
    """``form`` occurs in ``text`` not glued to a word character where its own edge is one
    (an open side may be glued: a clipped quotation, `core.invented`).

    Substring search, not a regex: a pattern that starts with a lookbehind is tried at
    every position, and a row measures up to `MAX_ITEMS` items against its whole tail.
    """
    head = _is_word(form[0]) and not open_left
    tail = _is_word(form[-1]) and not open_right
    start = text.find(form)
    while start >= 0:
        end = start + len(form)
        if not (head and start > 0 and _is_word(text[start - 1])) and not (
                tail and end < len(text) and _is_word(text[end])):
            return True
        start = text.find(form, start + 1)
    return False


def _items_of_text(text: str) -> Iterator[str]:
    """Items of one turn's text, in the order they appear."""
    # Normalized first so that every item is a substring of what matching will search.
    text = unicodedata.normalize("NFKC", text)
    pos = 0
    while True:
        call = text.find("<tool_call>", pos)
        response = text.find("<tool_response>", pos)
        starts = [s for s in (call, response) if s >= 0]
        if not starts:
            yield from _free_text_items(text[pos:])
            return
        start = min(starts)
        yield from _free_text_items(text[pos:start])
        is_call = start == call
        opener, closer = ("<tool_call>", "</tool_call>") if is_call else (
            "<tool_response>", "</tool_response>")
        end = text.find(closer, start)
        body = text[start + len(opener): end if end >= 0 else len(text)]
        yield from (_tool_call_items(body) if is_call else _response_items(body))
        if end < 0:
            return
        pos = end + len(closer)


def _parse_json(text: str) -> Any:
    try:
        return json_text.loads(text)
    except (ValueError, RecursionError):
        return None


def _tool_call_items(body: str) -> Iterator[str]:
    call = _parse_json(body.strip())
    if not isinstance(call, dict):
        yield from _free_text_items(body)
        return
    if isinstance(call.get("function"), dict):  # the OpenAI shape
        call = call["function"]
    name = call.get("name")
    if isinstance(name, str) and 0 < len(name) <= _VALUE_CHARS:
        yield name
    args = call.get("arguments", call.get("parameters"))
    if isinstance(args, str):
        parsed = _parse_json(args)
        args = parsed if isinstance(parsed, (dict, list)) else args
    for key, value in _leaves(args):
        if isinstance(value, int):  # a bool too: one digit, so never an item
            if len(str(abs(value))) >= 3:
                yield str(value)
            continue
        if not isinstance(value, str):
            continue
        short = " ".join(value.split())
        if 3 <= len(short) <= _VALUE_CHARS:
            yield short
        elif key in _COMMAND_KEYS and short:
            yield short.split(" ", 1)[0]
        yield from _free_text_items(value)


def _response_items(body: str) -> Iterator[str]:
    stripped = body.strip()
    parsed = _parse_json(stripped) if stripped.startswith(("{", "[")) else None
    if not isinstance(parsed, (dict, list)):
        yield from _free_text_items(body)
        return
    for _, value in _leaves(parsed):
        if isinstance(value, str):
            yield from _free_text_items(value)


def _leaves(value: Any) -> Iterator[tuple[str, Any]]:
    """(key, leaf) pairs of a JSON value, depth first, keys of lists inherited; a string
    holding the JSON text of an object or array is read as that value (`JSON_DEPTH`
    levels), its leaves under the string's key."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        key, node, depth = stack.pop()
        if isinstance(node, dict):
            stack.extend(reversed([(str(k), v, depth) for k, v in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(key, v, depth) for v in node]))
        elif (isinstance(node, str) and depth < JSON_DEPTH
              and node.lstrip().startswith(("{", "["))
              and isinstance(inner := _parse_json(node.strip()), (dict, list))):
            stack.append((key, inner, depth + 1))
        else:
            yield key, node


def _free_text_items(text: str) -> Iterator[str]:
    """Items of prose, code or tool output, ordered by where they start.

    A long text goes a block of lines at a time: no pattern here reads across a line
    break, so the items are the same, and a caller that stops at `MAX_ITEMS` never
    holds the items of a 60 MB tool output at once. Text with terminal escapes is read
    as a terminal showed it (`terminal_view`): ``\x1b[1msrc/a.c`` holds the path
    ``src/a.c``, never the fragment ``1msrc/a.c``."""
    if _CONTROL.search(text):
        text = terminal_view(text)
    start = 0
    while len(text) - start > _BLOCK_CHARS:
        cut = text.find("\n", start + _BLOCK_CHARS)
        if cut < 0:
            break
        yield from _block_items(text[start:cut + 1])
        start = cut + 1
    yield from _block_items(text[start:] if start else text)


def _block_items(text: str) -> Iterator[str]:
    if not text:
        return
    # Blanks keep the length, so positions hold; a tag becomes line breaks so that no
    # quoted text, message or token runs across it.
    text = _TAG.sub(lambda m: "\n" * len(m.group()), text)
    found: list[tuple[int, int, str]] = []
    for m in _URL.finditer(text):
        found.append((m.start(), 0, m.group().rstrip(_URL_TAIL)))
    for m in _ERROR_MESSAGE.finditer(text):
        message = _clip(m[1])
        if len(message) >= 3:
            found.append((m.start(1), 0, message))
    for m in _QUOTED.finditer(text):
        quoted = m[1] or m[2]
        if m[2] and (quoted[0] in ":," or (quoted.isalpha() and quoted.islower())):
            continue  # a JSON key-value seam, or scare quotes
        if not any(c.isalnum() for c in quoted):
            continue  # punctuation between two quoted strings (`"}, {"`)
        found.append((m.start(), 1, quoted))
    # Without the URLs, so that their pieces are not items too.
    text = _URL.sub(lambda m: " " * len(m.group()), text)
    for m in _NUMBER_UNIT.finditer(text):
        found.append((m.start(), 2, m.group()))
    for m in _TOKEN.finditer(text):
        for offset, item in _token_items(m.group()):
            found.append((m.start() + offset, 3, item))
    found.sort(key=lambda f: (f[0], f[1]))
    for _, _, item in found:
        yield item


def _clip(message: str) -> str:
    message = " ".join(message.split()).rstrip(".,;:")
    if len(message) > 2 and message[0] == message[-1] and message[0] in "'\"`":
        message = message[1:-1]  # `KeyError: 'user_id'` names `user_id`
    if len(message) <= _MESSAGE_CHARS:
        return message
    cut = message.rfind(" ", 0, _MESSAGE_CHARS + 1)
    # Without a space to cut at, this is a blob (a path, a hash): the token pass has it.
    return message[:cut].rstrip(".,;:") if cut > 0 else ""


def _token_items(token: str) -> Iterator[tuple[int, str]]:
    if len(token) > _TOKEN_CHARS:
        return
    # A leading dot is kept: it begins `./run.sh` and `.env`.
    core = token.lstrip(_LEAD_EDGES).rstrip(_TRAIL_EDGES)
    lead = len(token) - len(token.lstrip(_LEAD_EDGES))
    if _is_item(core):
        yield lead, core
    elif ":" in core and len(core) > 1:
        # `src/app.py:42`, `tests/x.py::test_y`, `sha256:ab12…`: the parts may be items.
        offset = lead
        for part in core.split(":"):
            if _is_item(part):
                yield offset, part
            offset += len(part) + 1


def _is_item(token: str) -> bool:
    if len(token) < 2:
        return False
    if token.isalpha():  # most tokens are words: only these rules can take one
        return token.lower() in _KNOWN_FILES or bool(
            _CAMEL.search(token) or _ERROR_TYPE.fullmatch(token))
    if _FLAG.fullmatch(token) or _ENV_VAR.fullmatch(token) or _is_host_port(token) \
            or ("@" in token and _EMAIL.fullmatch(token)):
        return True
    if "/" in token:
        return _is_path(token)
    if _is_file_name(token) or _VERSION.fullmatch(token) or _ISSUE_REF.fullmatch(token):
        return True
    if not _WORD_CHARS.fullmatch(token):
        return False
    has_letter = bool(_LETTER.search(token))
    if has_letter and _DIGIT.search(token):
        return len(token) >= 3 and not _ORDINAL.fullmatch(token)
    if not has_letter:
        return False
    if _IDENT.fullmatch(token):
        return "_" in token or bool(_CAMEL.search(token) or _ERROR_TYPE.fullmatch(token))
    # A part longer than one letter tells `os.path` from `e.g` and `U.S`.
    return bool(_DOTTED.fullmatch(token)) and max(len(p) for p in token.split(".")) > 1


def _is_host_port(token: str) -> bool:
    host = _HOST_PORT.fullmatch(token)
    return bool(host and (_LETTER.search(host[1]) or _IPV4.fullmatch(host[1])))


def _is_path(token: str) -> bool:
    if not _PATH_CHARS.fullmatch(token) or "//" in token or not _LETTER.search(token):
        return False
    parts = [p for p in token.split("/") if p not in ("", "~", ".", "..")]
    if not any(len(p) >= 2 for p in parts):
        return False  # `w/`, `/a`
    if token.startswith(("/", "~/", "./", "../")):
        return True
    return token.endswith("/") or len(parts) >= 3 or _has_extension(parts[-1])


def _is_file_name(token: str) -> bool:
    if token.lower() in _KNOWN_FILES:
        return True
    if not _PATH_CHARS.fullmatch(token) or "/" in token or "~" in token:
        return False
    if token.startswith(".") and len(token) > 2 and token[1].isalpha() \
            and token.count(".") == 1:
        return True  # a dotfile: `.env`, `.gitignore`
    return _has_extension(token)


def _has_extension(name: str) -> bool:
    stem, dot, ext = name.rpartition(".")
    return bool(dot and stem.strip(".") and ext.lower() in _EXTENSIONS)
