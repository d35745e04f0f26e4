"""API keys from ``.env`` files, for variables the environment does not set.

Hermes users keep their keys in ``$HERMES_HOME/.env`` (``~/.hermes/.env`` when
``HERMES_HOME`` is unset) or in a ``.env`` beside their work, and the reference loads
both at start-up. Here a key variable the environment leaves unset or empty is looked up
in ``$HERMES_HOME/.env``, then in ``./.env``; an exported value always wins, and nothing
is copied into ``os.environ``. Values are never logged: they join the run's secrets and
are scrubbed from everything it writes, like any key.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

MAX_DOTENV_BYTES = 1 << 20
_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def dotenv_paths(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> list[Path]:
    """The files read, in order: ``$HERMES_HOME/.env`` (default ``~/.hermes``), ``./.env``."""
    env = os.environ if environ is None else environ
    home = Path(env.get("HERMES_HOME") or Path.home() / ".hermes").expanduser()
    return [home / ".env", (cwd or Path.cwd()) / ".env"]


def read_dotenv(path: Path) -> dict[str, str]:
    """``NAME=value`` lines of ``path`` (``export`` prefixes, quotes and ``#`` comments as
    in python-dotenv, without interpolation); an unreadable file reads as empty, and so
    does anything but a regular file (a FIFO would block the run until someone wrote to
    it). Only the first `MAX_DOTENV_BYTES` are read."""
    text = _regular_file_text(path)
    if text is None:
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        name, value = match.groups()
        if value[:1] in ("'", '"'):
            quote = value[0]
            end = value.find(quote, 1)
            value = value[1:end] if end > 0 else value[1:]
            if quote == '"':
                value = value.replace("\\n", "\n").replace('\\"', '"')
        else:
            value = re.split(r"\s+#", value, maxsplit=1)[0].strip()
        values[name] = value
    return values


def _regular_file_text(path: Path) -> str | None:
    """The text of ``path`` when it is a regular file (opened without blocking, so that
    a FIFO or device is seen for what it is before a read could wait), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        # Checked before wrapping the descriptor: opening a folder's as a file raises.
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_DOTENV_BYTES)
    except OSError:  # a read error: unreadable, so empty
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8-sig", errors="replace")


class KeyEnviron(Mapping[str, str]):
    """``environ`` where a name unset or empty there is read from the `.env` files."""

    def __init__(self, environ: Mapping[str, str] | None = None,
                 paths: list[Path] | None = None) -> None:
        self._environ = os.environ if environ is None else environ
        self._paths = dotenv_paths(self._environ) if paths is None else paths
        self._files: list[dict[str, str]] | None = None

    def _values(self) -> list[dict[str, str]]:
        if self._files is None:  # read on first need: most runs never look
            self._files = [read_dotenv(p) for p in self._paths]
        return self._files

    def __getitem__(self, name: str) -> str:
        value = self._environ.get(name)
        if value:
            return value
        for values in self._values():
            if values.get(name):
                return values[name]
        if value is not None:
            return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        names = dict.fromkeys(self._environ)
        for values in self._values():
            names.update(dict.fromkeys(values))
        return iter(names)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def key_environ(environ: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """The environment API keys are read from: ``environ`` (default `os.environ`), with
    the `.env` files for names it leaves unset."""
    return KeyEnviron(environ)
