"""Keeping secrets out of everything a run writes (§4, §6, §12).

Two layers, always in this order:

* literal: the configured key values (and their JSON-escaped, percent-encoded and
  reversed forms, and their base64 text at any alignment, standard or URL-safe, so a
  model's ``Basic`` header or encoded echo goes too) are replaced wherever they occur,
  inside words too. This is the guarantee that the key
  a run was given never reaches a row, the cache, a checkpoint, a log or a message.
* patterns (:func:`redact`): key-like strings a model copied out of the trajectory. For
  summaries only; rows keep their original turns exactly (§12: values round-trip).

Pattern rules chosen against false positives (each one has a near-miss test):

* ``sk-`` keys: 8+ key characters including a digit, or 20+; ``sk-learn`` never.
* ``-p<password>``: only attached to ``-p`` in a mysql/mariadb command line, after
  ``-u USER``, or after ``sshpass -p``; ``-p 8080``, ``-p8080:80``, ``ssh -p 22``,
  ``mkdir -p`` stay.
* ``password=…``-like: the name must end in password/passwd/passphrase/secret/
  api_key/access_key/secret_key/private_key or an access/auth/refresh/session/id…
  token, then ``=``, ``:``, ``:=`` or ``=>``; the name and quotes are kept. Not
  values: type names (``password: str``), ``None``/``null``/booleans, placeholders
  (``$X``, ``<x>``, ``{{x}}``, ``%s``), calls and subscripts (``getpass.getpass()``).
  ``password_reset_view``, ``password == x``, ``max_tokens: 400``, ``eos_token: </s>``,
  ``api_key_env: NAME`` and ``--password-stdin`` stay.
* ``Bearer`` values and bare ``Authorization:`` values: a digit in them, or 24+ (16+)
  characters, so that prose ("a Bearer token", "Authorization: required") stays; after
  ``Authorization: Basic|Bearer|Token|Digest`` anything is a credential.
* URLs: any scheme; ``user:password@`` becomes ``[REDACTED]@`` (a user alone, as in
  ``ssh://git@host``, stays); query parameters named like keys lose their value.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 4
MIN_BASE64_FORM = 8
"""Configured values shorter than this (after stripping) are ignored: scrubbing them
would destroy ordinary text."""

# A value: quoted (the quotes are kept around the marker), escaped-quoted inside a JSON
# string, or a bare run.
_QUOTED = r"""(?:"(?:\\.|[^"\\\n])+"|'(?:\\.|[^'\\\n])+'|\\"(?:(?!\\").)+\\")"""
_NO_PLACEHOLDER = r"(?![$<%]|\{\{)"
_SECRET_NAME = (
    r"(?:[A-Za-z0-9_.-]{0,40}?(?:passw(?:or)?d|passphrase|secret|"
    r"(?:api|access|secret|private)[_-]?key)"
    r"|(?:[A-Za-z0-9]+[_.-]){0,8}?(?:access|auth|refresh|session|bearer|id|oauth|csrf|api)"
    r"[_-]?token)"
)
_NOT_A_VALUE = (r"(?:str|string|bytes|bool|int|none|null|nil|true|false|undefined|optional|"
                r"secretstr|required)(?![A-Za-z0-9_])")
_AUTHORIZATION = r"\bauthorization[\"']?[ \t]*[:=][ \t]*[\"']?"
_PORT = r"\d+(?:[:.]\d+)*(?:/(?:tcp|udp))?(?!\S)"
# Query parameters that carry a key; matched with "-" and "_" alike, case-insensitively.
_SECRET_QUERY_NAMES = frozenset({
    "api_key", "apikey", "key", "token", "access_token", "auth_token", "refresh_token",
    "id_token", "client_secret", "secret", "password", "passwd", "sig", "signature",
    "x_api_key", "x_amz_signature", "x_amz_credential", "x_amz_security_token",
    "x_goog_signature", "x_goog_credential",
})
_QUERY_NAMES_RE = "|".join(sorted((re.escape(name).replace("_", "[_-]")
                                   for name in _SECRET_QUERY_NAMES), key=len, reverse=True))

# Replaced whole, in this order (a JWT before Bearer, so "Bearer eyJ…" yields one marker).
_TOKENS = [
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
               r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|$)", re.DOTALL),
    re.compile(r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*"),
    re.compile(r"(?<![A-Za-z0-9_])sk-(?!learn\b)(?:(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{8,}"
               r"|[A-Za-z0-9_-]{20,})"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
    re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
]

# The ``key`` group is kept, the ``value`` group becomes the marker (quotes kept).
_KEYED = [
    re.compile(r"(?i)(?P<key>\b[a-z][a-z0-9+.-]{0,30}://)"
               r"(?P<value>[^\s/?#@\"'<>:]{0,128}:[^\s/?#\"'<>]{0,256})(?=@)"),
    re.compile(r"(?i)(?P<key>\bbearer[ \t]+)(?=[A-Za-z0-9._~+/-]*[0-9]|[A-Za-z0-9._~+/-]{24})"
               r"(?P<value>[A-Za-z0-9._~+/-]{8,}=*)"),
    re.compile(r"(?i)(?P<key>" + _AUTHORIZATION + r"(?:basic|bearer|token|digest)[ \t]+)"
               r"(?!\[REDACTED\])(?P<value>[^\s\"',;]+)"),
    re.compile(r"(?i)(?P<key>" + _AUTHORIZATION + r")(?!(?:basic|bearer|token|digest)[ \t])"
               r"(?=[^\s\"',;]*[0-9]|[^\s\"',;]{16})(?P<value>[^\s\"',;]+)"),
    re.compile(r"(?P<key>(?<![\w-])--(?:[A-Za-z0-9]+-)*pass(?:word|wd)(?:[ \t]+|=))"
               + _NO_PLACEHOLDER + r"(?!-)(?P<value>" + _QUOTED + r"|[^\s'\"]+)"),
    re.compile(r"(?P<key>(?i:\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlsh|mariadb|"
               r"mariadb-dump)\b)[^\n]{0,300}?[ \t]-p)"
               + _NO_PLACEHOLDER + r"(?P<value>" + _QUOTED + r"|[^\s'\"]+)"),
    re.compile(r"(?P<key>(?<!\S)-u[ \t]*[^\s-]\S*[ \t]+-p)(?!" + _PORT + r")"
               + _NO_PLACEHOLDER + r"(?P<value>" + _QUOTED + r"|[^\s'\"]+)"),
    re.compile(r"(?P<key>\bsshpass[ \t]+-p[ \t]*)" + _NO_PLACEHOLDER
               + r"(?P<value>" + _QUOTED + r"|[^\s'\"]+)"),
    re.compile(r"(?i)(?P<key>(?<![A-Za-z0-9_.-])" + _SECRET_NAME
               + r"(?:\\?[\"'])?[ \t]*(?::=|=>|=(?!=)|:(?!:))[ \t]*)(?![=:>])" + _NO_PLACEHOLDER
               + r"(?P<value>" + _QUOTED + r"|(?!" + _NOT_A_VALUE + r")"
               r"(?=(?P<bare>[^\s,;&'\"<>(){}\[\]`]+))(?P=bare)(?![(\[]))"),
    re.compile(r"(?i)(?P<key>[?&](?:" + _QUERY_NAMES_RE + r")=)(?P<value>[^&\s#\"'<>]+)"),
]


def _mask(value: str) -> str:
    """The marker in place of ``value``, keeping its quotes and a sentence's full stop."""
    for quote_mark in ('\\"', '"', "'"):
        if (len(value) > 2 * len(quote_mark) and value.startswith(quote_mark)
                and value.endswith(quote_mark)):
            return quote_mark + REDACTED + quote_mark
    body = value.rstrip(".")
    return REDACTED + value[len(body):] if body else value


def _keep_key(match: re.Match[str]) -> str:
    return match.group("key") + _mask(match.group("value"))


def redact(text: str) -> str:
    """Replace key-like strings in ``text`` with ``[REDACTED]`` (names and quotes kept)."""
    # Again until nothing changes: a marker can expose a key that was glued to the one it
    # replaced ("AIza…" + "sk-…" hides the sk- key behind a letter until then).
    for _ in range(4):
        before = text
        for pattern in _TOKENS:
            text = pattern.sub(REDACTED, text)
        for pattern in _KEYED:
            text = pattern.sub(_keep_key, text)
        if text == before:
            break
    return text


def _needles(secrets: Iterable[str]) -> tuple[str, ...]:
    """The forms in which each configured value may appear in text, longest first."""
    found: set[str] = set()
    for secret in secrets:
        if not isinstance(secret, str) or len(secret.strip()) < MIN_SECRET_LENGTH:
            continue
        for raw in {secret, secret.strip()}:
            found.update((raw, json.dumps(raw)[1:-1], json.dumps(raw, ensure_ascii=False)[1:-1],
                          quote(raw, safe=""), raw[::-1], *_base64_forms(raw)))
    return tuple(sorted((n for n in found if len(n) >= MIN_SECRET_LENGTH),
                        key=lambda n: (-len(n), n)))


def _base64_forms(raw: str) -> set[str]:
    """The base64 text of ``raw`` wherever it sits in an encoded payload (``Basic
    base64(user:key)``, a base64 JSON body): for each of the 3 alignments of its first
    byte within a 3-byte group, the characters its bytes alone decide, standard and
    URL-safe; and its whole encoding with padding."""
    data = raw.encode("utf-8", "surrogatepass")
    forms = {base64.b64encode(data).decode("ascii")}
    for skip in range(3):  # bytes of the key in a group it shares with what precedes
        rest = data[skip:]
        whole = len(rest) - len(rest) % 3
        forms.add(base64.b64encode(rest[:whole]).decode("ascii"))
    forms |= {f.replace("+", "-").replace("/", "_") for f in forms}
    # Fewer characters could be found in any base64 text by chance.
    return {f for f in forms if len(f) >= MIN_BASE64_FORM}


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _occurrences(text: str, needle: str) -> Iterable[int]:
    index = text.find(needle)
    while index != -1:
        yield index
        index = text.find(needle, index + 1)


def _scrub(text: str, needles: tuple[str, ...]) -> str:
    spans = _merge([(i, i + len(n)) for n in needles for i in _occurrences(text, n)])
    if not spans:
        return text
    # A marker next to the kept text can spell a secret again ("…D]" + "xy" = "D]xy"):
    # widen the redacted spans until no secret remains, except one inside the marker
    # itself, which no marker could hide.
    checked = [n for n in needles if n not in REDACTED]
    while True:
        parts: list[str] = []
        kept: list[tuple[int, int, int]] = []  # (output start, input start, length)
        cursor = written = 0
        for start, end in [*spans, (len(text), len(text))]:
            kept.append((written, cursor, start - cursor))
            parts.append(text[cursor:start])
            written += start - cursor
            if end > start:  # not the closing sentinel
                parts.append(REDACTED)
                written += len(REDACTED)
            cursor = end
        out = "".join(parts)
        extra = [(source + max(i, at) - at, source + min(i + len(n), at + size) - at)
                 for n in checked for i in _occurrences(out, n)
                 for at, source, size in kept if max(i, at) < min(i + len(n), at + size)]
        if not extra:
            return out
        spans = _merge(spans + extra)


def scrub_literals(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret value in ``text`` with ``[REDACTED]``.

    Values shorter than :data:`MIN_SECRET_LENGTH` once stripped are ignored; overlapping
    and adjacent occurrences become one marker. Runs before the patterns of :func:`redact`.
    """
    return _scrub(text, _needles(secrets))


class Scrubber:
    """The configured secret values of a run, scrubbed from whatever it writes."""

    __slots__ = ("_needles",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._needles = _needles(secrets)

    def __bool__(self) -> bool:
        return bool(self._needles)

    def __repr__(self) -> str:  # never the values themselves
        return f"Scrubber({len(self._needles)} forms)"

    def literal(self, text: str) -> str:
        """``text`` without the configured values (for logs and messages)."""
        return _scrub(text, self._needles) if self._needles else text

    def __call__(self, text: str) -> str:
        """Summary text: the configured values, then every key-like string, redacted."""
        if not self._needles:
            return redact(text)
        # Again after the patterns: their markers could complete a secret.
        return self.literal(redact(self.literal(text)))

    def scrub_value(self, value: Any) -> Any:
        """A copy of a JSON-like value (rows, cache entries, checkpoints) with the
        configured values scrubbed from every string, dict keys included; the value
        itself when there is nothing to scrub. Only literal values: the original turns
        of a row are data and keep everything else.
        """
        if not self._needles:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return _scrub(value, self._needles)
        if isinstance(value, dict):
            return {self._walk(k) if isinstance(k, str) else k: self._walk(v)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self._walk(item) for item in value)
        return value


_AUTHORITY = re.compile(r"^(?P<head>(?:[A-Za-z][A-Za-z0-9+.-]*:)?//)(?P<authority>[^/?#]*)")


_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def looks_like_key(value: str) -> bool:
    """Whether ``value`` (given where a variable's name goes) is more likely a key: it is
    no variable name, a credential pattern finds it, it is a long mix of upper and lower
    case letters and digits, or one of its ``_``-separated parts is a run of 20 or more
    letters and digits with a digit among them (names are words: ``OPENROUTER_API_KEY``;
    keys such as ``gsk_…`` or 64 hex digits are not)."""
    if not _VARIABLE_NAME.fullmatch(value) or redact(value) != value:
        return True
    if any(len(part) >= 20 and re.search("[0-9]", part) for part in value.split("_")):
        return True
    return len(value) >= 32 and all(re.search(c, value) for c in ("[a-z]", "[A-Z]", "[0-9]"))


def masked(value: Any) -> str:
    """What a message says about a value that may be a key: its length, never its text."""
    return f"a value of {len(str(value)) if isinstance(value, (str, int)) else '?'} " \
           "characters (not shown: it may be a key)"


def strip_url_credentials(url: str) -> str:
    """``url`` without ``user:password@`` and with key-like query values set to ``REDACTED``.

    ``https://u:pw@host:8443/v1?key=abc&x=1`` → ``https://host:8443/v1?key=REDACTED&x=1``;
    a URL with neither is returned unchanged, byte for byte.
    """
    match = _AUTHORITY.match(url)
    if match and "@" in match["authority"]:
        url = match["head"] + match["authority"].rpartition("@")[2] + url[match.end():]
    before, hash_mark, fragment = url.partition("#")
    path, question, query = before.partition("?")
    if not question:
        return url
    params = query.split("&")
    for index, param in enumerate(params):
        name, equals, value = param.partition("=")
        if equals and value and unquote(name).lower().replace("-", "_") in _SECRET_QUERY_NAMES:
            params[index] = f"{name}=REDACTED"
    return f"{path}?{'&'.join(params)}{hash_mark}{fragment}"
