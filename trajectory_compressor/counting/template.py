"""`TemplateCounter`: token counts of rows as the tokenizer's chat template renders them.

With ``token_counting: chat_template`` a row's count is exactly the number of ids that
``tokenizer.apply_chat_template(messages, tools=tools, tokenize=True)`` returns, and the
planner's per-message counts add up to it. A row is rendered once (by
``apply_chat_template(tokenize=False)``, so every input normalisation transformers does is
the same) and tokenized once, as ``apply_chat_template`` tokenizes its rendering: the fast
backend's ``encode_batch`` without special tokens (the template writes BOS itself), with
truncation, padding and ``split_special_tokens`` set as a plain ``tokenizer(text)`` call
sets them. Totals alone (the skip path) use ``encode_batch_fast``, which skips offsets.

Attribution: each token goes to the message whose rendered block holds the token's first
character (binary search over the encoding's offsets, so no per-prefix renders). Block
starts are found in the rendered text in two linear passes:

1. *Anchors*: each message's own text (reasoning, content or its text parts, then its tool
   calls' names and string arguments) is searched for in order after the previous anchor;
   text the template changed (``| trim``) is searched for stripped. A search looks only as
   far as the text of the messages since the last anchor plus an allowance for the
   template's own text, so a row costs O(its length) even when nothing is found.
2. *Block starts*: between two anchors lie the end of one block and the header of the
   next. The header is the last whole-word mention of the message's role there (failing
   that, of any common role name, as when Qwen writes tool results under ``user``); the
   block starts at the special token, tag or line holding it (``<|im_start|>user``,
   ``<|start_header_id|>user``, ``<｜User｜>``). With no role named, the block starts
   after what closes the previous one: EOS, closing tags, end-of-turn tags, white space.
3. Fallback, a message with no anchor (no text, or text the template rewrote or
   dropped): its block starts at the first mention of a role after the previous block,
   so it gets its template scaffolding (or nothing) and its text, if rendered at all,
   counts for a neighbour.

Everything before the second message's block (BOS, a system header and the tools block in
every common template) and the generation prompt go to the first message, the protected
head. Whatever the template does, each token is counted exactly once: the shares always
add up to the exact total; only the split between neighbours can be off when a template
rewrites content, reorders it, or puts a tools block inside a later turn.

transformers 5 changed ``apply_chat_template(tokenize=True)`` to return a
``BatchEncoding`` (``return_dict=True`` by default), whose ``len`` is its number of keys;
transformers 4 returned the list of ids. `chat_template_ids` reads the ids from either.
transformers also drops message keys whose value is ``None`` before rendering.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .pieces import pieces, pieces_add_up

Message = dict[str, Any]
Row = tuple[Sequence[Message], Sequence[dict[str, Any]] | None]

CHAT_TEMPLATE_OPTION = "--chat-template FILE.jinja"
# Characters rendered per tokenizer call (as in tokens.py): keeps every core busy while
# the encodings held until counted stay a few tens of megabytes.
ENCODE_CHARS = 1 << 20
# A rendering longer than ENCODE_CHARS is encoded a few pieces at a time
# (`counting.pieces`): its encoding with offsets would take gigabytes.
PIECES_PER_CALL = 4
# Characters on each side of a cut in which no added token may lie: a piece boundary
# next to one could change what it absorbs (``lstrip``/``rstrip`` tokens).
SPECIAL_MARGIN = 16
# How far past the messages' text a search for an anchor may look: room for the template's
# own text between two messages (headers, tags, and twice the tools' JSON: it may be indented).
SEARCH_ALLOWANCE = 4096


# What transformers reads as a message's reasoning (it copies the first one to the others).
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(Exception):
    """No usable chat template: the tokenizer has none and none was given, or unreadable."""


class TemplateRenderError(ChatTemplateError):
    """The chat template refused or failed to render one row."""


# transformers renders chat templates with jinja2, and refuses versions before 3.1.
JINJA2_INSTALL = "pip install 'jinja2>=3.1'"


def require_jinja2() -> None:
    """Raise `ChatTemplateError` with the install line when jinja2 (3.1 or later) cannot
    be imported: checked once when counting starts, not found missing on every row."""
    try:
        import jinja2
    except ImportError:
        found = None
    else:
        found = str(getattr(jinja2, "__version__", "0"))
    if found is None or tuple(int(p) for p in re.findall(r"\d+", found)[:2]) < (3, 1):
        have = "is not installed" if found is None else f"is version {found}"
        raise ChatTemplateError(
            f"token_counting: chat_template renders the chat template with jinja2 3.1 or "
            f"later, which {have}; install it: {JINJA2_INSTALL} (it is a dependency of "
            "trajectory-compressor: bash scripts/setup.sh installs it)")


def template_hash(template: str | dict[str, str]) -> str:
    """First 16 hex digits of the sha256 of a template (a dict of named ones: of its JSON)."""
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def read_chat_template(path: str | Path) -> str:
    """The text of a ``.jinja`` template file given with ``--chat-template``."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # missing, a folder, not UTF-8 text
        raise ChatTemplateError(
            f"cannot read the chat template {str(path)!r} given with {CHAT_TEMPLATE_OPTION}: "
            f"{getattr(exc, 'strerror', None) or exc}"
        ) from exc


def chat_template_ids(output: Any) -> list[int]:
    """The token ids from what ``apply_chat_template(tokenize=True)`` returned (v4 or v5)."""
    if isinstance(output, list):
        return output
    return list(output["input_ids"])


class TemplateCounter:
    """Counts rows of OpenAI-style messages through a tokenizer's chat template.

    ``tokenizer`` is a transformers tokenizer; ``template`` a Jinja template that replaces
    the tokenizer's own. ``add_generation_prompt`` is passed to the template as
    ``apply_chat_template`` would (its tokens go to the head).
    """

    def __init__(
        self,
        tokenizer: Any,
        template: str | None = None,
        *,
        add_generation_prompt: bool = False,
    ) -> None:
        require_jinja2()
        own = getattr(tokenizer, "chat_template", None)
        if template is None and not own:
            name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
            raise ChatTemplateError(
                f"the tokenizer {name!r} has no chat template, which token_counting: "
                f"chat_template needs: give one with {CHAT_TEMPLATE_OPTION}"
            )
        self._tokenizer = tokenizer
        self._override = template
        self.template: str | dict[str, str] = template if template is not None else own or ""
        self.template_hash = template_hash(self.template)
        self.add_generation_prompt = add_generation_prompt
        self._backend = _plain_backend(tokenizer)
        template_text = (
            self.template if isinstance(self.template, str) else "".join(self.template.values())
        )
        self._markers = _marker_tokens(tokenizer, template_text)
        self._eos = getattr(tokenizer, "eos_token", None) or ""
        self._prompt_suffix = self._generation_suffix() if add_generation_prompt else ""
        self._near_special = _special_veto(tokenizer)
        self._piecewise: bool | None = None  # whether long renderings may go in pieces

    # -- rendering -------------------------------------------------------------------------

    def render(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> str:
        """The row as the template renders it (``apply_chat_template(tokenize=False)``)."""
        return self._render(messages, tools, self.add_generation_prompt)

    def _render(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        add_generation_prompt: bool,
    ) -> str:
        try:
            text = self._tokenizer.apply_chat_template(
                list(messages),
                tools=list(tools) if tools is not None else None,
                chat_template=self._override,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
            )
        except Exception as exc:  # jinja2 errors, raise_exception() in templates, ValueError
            raise TemplateRenderError(
                f"the chat template cannot render this row: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(text, str):
            raise TemplateRenderError(f"the chat template rendered {type(text).__name__}")
        return text

    def _generation_suffix(self) -> str:
        """What ``add_generation_prompt`` appends, learnt once from a one-message probe."""
        probe = [{"role": "user", "content": "Hi"}]
        try:
            without = self._render(probe, None, False)
            with_prompt = self._render(probe, None, True)
        except TemplateRenderError:
            return ""
        if with_prompt.startswith(without):
            return with_prompt[len(without):]
        return ""

    # -- counting --------------------------------------------------------------------------

    def count_total(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> int:
        """Tokens of the rendered row: ``len(apply_chat_template(..., tokenize=True))``."""
        return self.count_totals([(messages, tools)])[0]

    def count_totals(self, rows: Sequence[Row]) -> list[int]:
        """Totals of several rows, tokenized in batches, without per-message attribution."""
        texts = [self.render(m, t) if m else "" for m, t in rows]
        return [n if text else 0 for n, text in zip(self._lengths(texts), texts, strict=True)]

    def count_messages(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """Tokens per message; they add up to the row's total (see the module's docstring)."""
        return self.count_many_rows([(messages, tools)])[0]

    def count_many_rows(self, rows: Sequence[Row]) -> list[list[int]]:
        """Per-message counts of several rows, their renderings tokenized in batches.

        A row without messages (which ``apply_chat_template`` refuses) counts as ``[]``.
        """
        texts = [self.render(m, t) if m else "" for m, t in rows]
        out: list[list[int]] = []
        for (messages, tools), text, starts in zip(
            rows, texts, self._token_starts(texts), strict=True
        ):
            if not messages:
                out.append([])
                continue
            cuts, tail = self.block_starts(text, messages, tools)
            out.append(_shares(cuts, tail, starts))
        return out

    def block_starts(
        self,
        text: str,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> tuple[list[int], int]:
        """Where each message's block starts in ``text`` (the first at 0), and where the
        tail that goes back to the head (the generation prompt) starts."""
        tail = len(text)
        if self._prompt_suffix and text.endswith(self._prompt_suffix):
            tail -= len(self._prompt_suffix)
        allowance = SEARCH_ALLOWANCE + 2 * _json_length(tools)
        return _block_starts(text, messages, tail, allowance, self._markers, self._eos), tail

    # -- tokenizing ------------------------------------------------------------------------

    def _slices(self, texts: list[str]) -> list[tuple[int, int]]:
        bounds = []
        start = 0
        while start < len(texts):
            end, chars = start, 0
            while end < len(texts) and (end == start or chars + len(texts[end]) <= ENCODE_CHARS):
                chars += len(texts[end])
                end += 1
            bounds.append((start, end))
            start = end
        return bounds

    def _prepare_backend(self) -> Any:
        # What a plain tokenizer(text) call sets on the backend before encoding.
        backend = self._backend
        split = bool(getattr(self._tokenizer, "split_special_tokens", False))
        if getattr(backend, "encode_special_tokens", split) != split:
            backend.encode_special_tokens = split
        if backend.truncation is not None:
            backend.no_truncation()
        if backend.padding is not None:
            backend.no_padding()
        return backend

    def _lengths(self, texts: list[str]) -> list[int]:
        counts: list[int] = []
        for start, end in self._slices(texts):
            chunk = texts[start:end]
            if self._long(chunk):
                counts.append(sum(sum(self._encode_lengths(batch))
                                  for batch in self._piece_batches(chunk[0])))
            else:
                counts += self._encode_lengths(chunk)
        return counts

    def _encode_lengths(self, chunk: list[str]) -> list[int]:
        if self._backend is not None:
            backend = self._prepare_backend()
            encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
            return [len(e) for e in encode(chunk, add_special_tokens=False)]
        ids = self._tokenizer(chunk, add_special_tokens=False)["input_ids"]
        return [len(x) for x in ids]

    def _token_starts(self, texts: list[str]) -> list[_Starts | _PieceStarts]:
        out: list[_Starts | _PieceStarts] = []
        for start, end in self._slices(texts):
            chunk = texts[start:end]
            if self._long(chunk):
                out.append(_PieceStarts(functools.partial(self._piece_starts, chunk[0])))
            else:
                out += self._encode_starts(chunk)
        return out

    def _encode_starts(self, chunk: list[str]) -> list[_Starts]:
        if self._backend is not None:
            encodings = self._prepare_backend().encode_batch(chunk, add_special_tokens=False)
            return [_Starts(len(e), _encoding_start(e)) for e in encodings]
        offsets = self._tokenizer(
            chunk, add_special_tokens=False, return_offsets_mapping=True
        )["offset_mapping"]
        return [_Starts(len(o), _list_start(o)) for o in offsets]

    def _long(self, chunk: list[str]) -> bool:
        """Whether ``chunk`` is one rendering to encode in pieces."""
        if len(chunk) != 1 or len(chunk[0]) <= ENCODE_CHARS:
            return False
        if self._piecewise is None:
            self._piecewise = pieces_add_up(self._encode_lengths)
        return self._piecewise

    def _piece_batches(self, text: str) -> Iterator[list[str]]:
        """``text`` in pieces, `PIECES_PER_CALL` at a time."""
        batch: list[str] = []
        for piece in pieces(text, ENCODE_CHARS // PIECES_PER_CALL, self._near_special):
            batch.append(piece)
            if len(batch) == PIECES_PER_CALL:
                yield batch
                batch = []
        if batch:
            yield batch

    def _piece_starts(self, text: str) -> Iterator[tuple[int, int, _Starts]]:
        """``(start, end, token starts)`` of each piece of ``text``."""
        offset = 0
        for batch in self._piece_batches(text):
            for piece, starts in zip(batch, self._encode_starts(batch), strict=True):
                yield offset, offset + len(piece), starts
                offset += len(piece)


class _Starts:
    """The start offsets of one text's tokens, read on demand (no list of them is built)."""

    __slots__ = ("n", "start")

    def __init__(self, n: int, start: Callable[[int], int]) -> None:
        self.n = n
        self.start = start

    def before(self, pos: int) -> int:
        """How many tokens start before character ``pos`` (starts never decrease)."""
        lo, hi = 0, self.n
        while lo < hi:
            mid = (lo + hi) // 2
            if self.start(mid) < pos:
                lo = mid + 1
            else:
                hi = mid
        return lo


def _encoding_start(encoding: Any) -> Callable[[int], int]:
    def start(i: int) -> int:
        chars = encoding.token_to_chars(i)
        return int(chars[0]) if chars is not None else 0

    return start


def _list_start(offsets: Sequence[Sequence[int]]) -> Callable[[int], int]:
    return lambda i: int(offsets[i][0])


class _PieceStarts:
    """`_Starts` of a long rendering encoded a few pieces at a time (`counting.pieces`),
    never all at once: ``before`` asked at positions that do not go back reads the pieces
    once; a position before the current piece starts the reading over."""

    def __init__(self, read: Callable[[], Iterator[tuple[int, int, _Starts]]]) -> None:
        self._read = read
        self._restart()

    def _restart(self) -> None:
        self._stream = self._read()
        self._earlier = 0  # tokens of the pieces before the current one
        self._current: tuple[int, int, _Starts] | None = next(self._stream, None)

    def before(self, pos: int) -> int:
        """How many tokens start before character ``pos``."""
        if self._current is not None and pos < self._current[0]:
            self._restart()
        while self._current is not None and pos >= self._current[1]:
            following = next(self._stream, None)
            if following is None:
                break
            self._earlier += self._current[2].n
            self._current = following
        if self._current is None:
            return 0
        start, _, starts = self._current
        return self._earlier + starts.before(pos - start)

    @property
    def n(self) -> int:
        """Every token of the text (reads the pieces to the end)."""
        return self.before(1 << 62)


def _shares(cuts: list[int], tail: int, starts: _Starts | _PieceStarts) -> list[int]:
    """Tokens per block; the head also gets the tokens from ``tail`` on."""
    before = []
    floor = 0
    for pos in [*cuts[1:], tail]:
        # A running maximum keeps every share non-negative should a normalizer ever make
        # start offsets go backwards; the shares still add up to the total.
        floor = max(floor, starts.before(pos))
        before.append(floor)
    shares = [before[0] + starts.n - before[-1]]
    shares += [b - a for a, b in itertools.pairwise(before)]
    return shares


# -- locating blocks in the rendered text (pure functions) --------------------------------


def _pieces(message: Message) -> list[str]:
    """The message's own text, in the order templates render it."""
    pieces: list[str] = []
    reasoning = next((k for k in _REASONING_KEYS if message.get(k) is not None), None)
    for key in (reasoning, "content") if reasoning else ("content",):
        value = message.get(key)
        if isinstance(value, str):
            pieces.append(value)
        elif isinstance(value, list):
            pieces += [p["text"] for p in value if isinstance(p, dict) and isinstance(
                p.get("text"), str)]
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = call.get("function", call)
        if isinstance(function, dict):
            for key in ("name", "arguments"):
                if isinstance(function.get(key), str):
                    pieces.append(function[key])
    return [p for p in pieces if p.strip()]


def _locate(text: str, pieces: list[str], pos: int, limit: int) -> tuple[int, int] | None:
    """The span from the first to the last of ``pieces`` found in order in text[pos:limit]."""
    first = last = -1
    for piece in pieces:
        stripped = piece.strip()
        for candidate in (piece, stripped) if stripped != piece else (piece,):
            found = text.find(candidate, pos, limit)
            if found >= 0:
                if first < 0:
                    first = found
                pos = last = found + len(candidate)
                break
    return (first, last) if first >= 0 else None


def _block_starts(
    text: str,
    messages: Sequence[Message],
    tail: int,
    allowance: int,
    markers: Sequence[str],
    eos: str,
) -> list[int]:
    pieces = [_pieces(m) for m in messages]
    sizes = [sum(len(p) for p in own) for own in pieces]
    # Pass 1: anchors, in order; the window of each search grows with the text of the
    # messages not found since the last anchor.
    anchors: list[tuple[int, int] | None] = []
    pos, pending = 0, 0
    for i, own in enumerate(pieces):
        pending += sizes[i]
        limit = tail if i == 0 else min(tail, pos + pending + allowance)
        span = _locate(text, own, pos, limit) if own else None
        anchors.append(span)
        if span is not None:
            pos, pending = span[1], 0
    # Where the next anchor starts, for the messages that have none.
    next_start = [tail] * (len(anchors) + 1)
    for i in range(len(anchors) - 1, -1, -1):
        span = anchors[i]
        next_start[i] = span[0] if span is not None else next_start[i + 1]
    # Pass 2: block starts between anchors.
    cuts = [0]
    prev_end = anchors[0][1] if anchors[0] else 0
    for i in range(1, len(messages)):
        role = str(messages[i].get("role", ""))
        span = anchors[i]
        if span is not None:
            cut, _ = _header_start(text, prev_end, span[0], role, markers, eos, last=True)
            prev_end = span[1]
        else:
            hi = max(prev_end, min(next_start[i + 1], prev_end + sizes[i] + allowance))
            cut, role_end = _header_start(text, prev_end, hi, role, markers, eos, last=False)
            prev_end = max(prev_end, role_end)
        cuts.append(min(max(cut, cuts[-1]), tail))
    return cuts


# A tag written just before a role name (<|im_start|>user, <|start_header_id|>user), and
# the opening and closing of a tag around one (<|user|>, <｜User｜>).
_TAG_BEFORE = re.compile(r"(?:<\|[^<>|\s]{1,46}\|>|<｜[^<>｜\s]{1,46}｜>|<[^<>\s]{1,48}>)\Z")
_TAG_OPEN = re.compile(r"<[^<>\s]{0,47}\Z")
_TAG_CLOSE = re.compile(r"[^<>\s]{0,47}>")
# What ends a block: white space, a closing tag, an end-of-turn tag (<|im_end|>, <|eot_id|>).
_CLOSING = re.compile(
    r"\s+|</[^<>\s]{1,48}>|<[^<>\s]{0,24}(?:end|eot|eos)(?![a-z])[^<>\s]{0,24}>", re.IGNORECASE
)


# Role names templates write in headers, for a header that names another role than the
# message's (Qwen writes tool results under a "user" header).
_HEADER_ROLES = ("system", "developer", "user", "assistant", "tool", "ipython", "function",
                 "observation", "model")


@functools.lru_cache(maxsize=64)
def _role_pattern(*roles: str) -> re.Pattern[str]:
    # Whole words, so "tool" does not match inside "<tool_response>".
    names = "|".join(re.escape(r) for r in roles)
    return re.compile(rf"(?<!\w)(?:{names})(?!\w)", re.IGNORECASE)


def _find_role(text: str, lo: int, hi: int, role: str, last: bool) -> re.Match[str] | None:
    for roles in ((role,), _HEADER_ROLES) if role else (_HEADER_ROLES,):
        found = None
        for match in _role_pattern(*roles).finditer(text, lo, hi):
            found = match
            if not last:
                break
        if found is not None:
            return found
    return None


def _header_start(
    text: str, lo: int, hi: int, role: str, markers: Sequence[str], eos: str, last: bool
) -> tuple[int, int]:
    """Where the header of a ``role`` message starts in text[lo:hi] (its last mention of the
    role, or its first with ``last=False``; failing that, of any role), and where that role
    name ends (``lo`` when the text names no role)."""
    found = _find_role(text, lo, hi, role, last)
    if found is None:
        # No header names a role: the block starts after what closes the previous one.
        cut = lo
        while cut < hi:
            if eos and text.startswith(eos, cut) and cut + len(eos) <= hi:
                cut += len(eos)
                continue
            closing = _CLOSING.match(text, cut, hi)
            if closing is None or closing.end() == cut:
                break
            cut = closing.end()
        return cut, lo
    r, end = found.span()
    name = found.group(0).lower()
    for marker in markers:  # a special token just before the name
        if r - len(marker) >= lo and text.startswith(marker, r - len(marker)):
            return r - len(marker), end
    for marker in markers:  # the name inside a special token
        inside = marker.lower().find(name)
        if inside > 0 and r - inside >= lo and text.startswith(marker, r - inside):
            return r - inside, end
    window = max(lo, r - 50)  # room for the longest tag _TAG_BEFORE accepts
    tag = _TAG_BEFORE.search(text, window, r)
    if tag is not None:
        return tag.start(), end
    tag = _TAG_OPEN.search(text, window, r)
    if tag is not None and _TAG_CLOSE.match(text, end, min(len(text), end + 48)):
        return tag.start(), end
    line = text.rfind("\n", lo, r)
    return (line + 1 if line >= 0 else r), end


def _marker_tokens(tokenizer: Any, template: str) -> list[str]:
    """Added tokens the template writes, and the BOS/EOS strings, longest first."""
    found: set[str] = set()
    vocab = getattr(tokenizer, "get_added_vocab", None)
    if callable(vocab):
        found = {t for t in vocab() if t and t in template}
    for name in ("bos_token", "eos_token"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, str) and value:
            found.add(value)
    return sorted(found, key=lambda t: (-len(t), t))


def _json_length(tools: Sequence[dict[str, Any]] | None) -> int:
    if not tools:
        return 0
    try:
        return len(json.dumps(list(tools), ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return 0


def _special_veto(tokenizer: Any) -> Callable[[str, int], bool] | None:
    """Whether a cut at ``at`` lies within `SPECIAL_MARGIN` characters of one of the
    tokenizer's added tokens (None when it has none)."""
    try:
        added = [t for t in tokenizer.get_added_vocab() if t]
    except Exception:  # a tokenizer without the method: none known
        added = []
    if not added:
        return None
    pattern = re.compile("|".join(re.escape(t) for t in sorted(added, key=len, reverse=True)))
    reach = max(map(len, added)) + SPECIAL_MARGIN

    def near(text: str, at: int) -> bool:
        return any(m.start() - SPECIAL_MARGIN <= at <= m.end() + SPECIAL_MARGIN
                   for m in pattern.finditer(text, max(0, at - reach), at + reach))

    return near


def _plain_backend(tokenizer: Any) -> Any:
    """The `tokenizers` object when ``tokenizer(text)`` is only its ``encode_batch``.

    A tokenizer class that overrides the encoding path (to pre-process text) is used
    through its own ``__call__`` instead, with ``return_offsets_mapping``.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend as base
    except ImportError:  # transformers 4
        from transformers import PreTrainedTokenizerFast as base
    names = ("__call__", "_call_one", "encode_plus", "batch_encode_plus", "_encode_plus",
             "_batch_encode_plus", "set_truncation_and_padding")
    cls = type(tokenizer)
    if not isinstance(tokenizer, base):
        return None
    if any(getattr(cls, n, None) is not getattr(base, n, None) for n in names):
        return None
    return backend
