"""The manual (docs/, built with MkDocs): which page each command's ``--help`` points to,
and the two reference pages generated from the code at build time, so they cannot drift:
every command and option of the command line (from the click command typer builds) and
every configuration key (from `core.config`: its type, default, bounds and flag).

The bounds of a key are not restated here: each is the message `CompressionConfig`'s own
validation gives for a value out of range, found by trying such values."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from ..core.config import (
    _ENDPOINT_KEYS,
    _FIELD_TYPES,
    IGNORED_KEYS,
    SECTIONS,
    CompressionConfig,
)
from ..core.errors import ConfigError

# The manual has no hosted site: its pages are read in the clone, or built locally
# (`mkdocs serve`, or `mkdocs build` and site/index.html).
MANUAL_PAGES: dict[str, str] = {
    "": "docs/index.md",
    "compress": "docs/getting-started.md",
    "analyze": "docs/inspect.md",
    "report": "docs/inspect.md",
    "validate": "docs/inspect.md",
}
CLI_PAGE = "docs/reference/cli.md"


def manual_epilog(command: str = "") -> str:
    """The last lines of ``command``'s ``--help`` ("" for the root command): the manual
    page to read and the generated reference of every option."""
    page = MANUAL_PAGES.get(command, MANUAL_PAGES[""])
    return (f"Manual: {page} (every option: {CLI_PAGE}); in the clone, "
            "`mkdocs serve` shows it in a browser (bash scripts/setup.sh dev,docs).")


# --- the command-line reference --------------------------------------------------------
# typer builds its commands on its own copy of click: they are read here through the
# attributes click's parameters and commands have (opts, get_help_record, ...).

def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "option"


def option_names(param: Any) -> list[str]:
    """Every spelling of an option (``--protect-first-tool``, ``--no-protect-first-tool``,
    ``-o``); an argument's name in capitals."""
    if _is_option(param):
        return [*param.opts, *param.secondary_opts]
    return [str(param.name).upper()]


def _default(param: Any) -> str | None:
    value = param.default
    if callable(value) or value is None or value in ((), []):
        return None
    if param.is_flag and not param.secondary_opts:
        return None  # a flag given or not: its absence is the default
    if isinstance(value, bool) and param.secondary_opts:
        return str(param.opts[0] if value else param.secondary_opts[0])
    return str(value)


def _help_text(text: str) -> str:
    from .flags import HELP_FILLERS

    for mark in HELP_FILLERS:
        text = text.replace(mark, "shown by --help: it depends on the machine and folder")
    return text


def commands(group: Any) -> Iterator[tuple[str, Any]]:
    """The root command ("") and each subcommand, in the order ``--help`` lists them."""
    yield "", group
    ctx = group.context_class(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            yield name, command


def cli_reference(group: Any, prog: str = "trajectory-compressor") -> str:
    """Markdown for every command of ``group`` (the click command typer builds): its
    help, usage, then each argument and option as ``--help`` shows it, with its default."""
    lines: list[str] = []
    for name, command in commands(group):
        title = f"{prog} {name}".strip()
        ctx = command.context_class(command, info_name=title)
        lines += [f"## `{title}`", ""]
        if command.help:
            lines += [" ".join(command.help.split()), ""]
        page = MANUAL_PAGES.get(name)
        if page:
            lines += [f"Manual page: [{page.removeprefix('docs/')}]"
                      f"(../{page.removeprefix('docs/')}).", ""]
        usage = " ".join(command.collect_usage_pieces(ctx))
        lines += ["```", f"{title} {usage}".rstrip(), "```", ""]
        lines += ["| option | default | what it does |", "| --- | --- | --- |"]
        for param in command.get_params(ctx):
            if _is_option(param):
                record = param.get_help_record(ctx)
                if record is None:
                    continue
                shown, text = record
                default = _default(param)
            else:
                shown, text = str(param.name).upper(), getattr(param, "help", "") or ""
                default = None
            lines.append(f"| `{_cell(shown)}` | "
                         f"{'`' + _cell(default) + '`' if default is not None else ''} | "
                         f"{_cell(_help_text(text))} |")
        lines.append("")
        if command.epilog:
            lines += ["```", command.epilog.rstrip(), "```", ""]
    return "\n".join(lines)


# --- the configuration reference -------------------------------------------------------

# Out-of-range values tried on each key, by type: the messages of those validation
# refuses give the key's bounds in their own words.
_PROBES: dict[str, tuple[Any, ...]] = {
    "int": (-(10**9), 0, 10**9), "int?": (-(10**9), 0, 10**9),
    "number": (-1e9, 0.0, 1e9), "number?": (-1e9, 0.0, 1e9),
    "str": ("?",), "str?": ("?",),
}
# Settings whose flag is not named after the setting (the option group maps it).
_FLAG_OF_SETTING = {"summarization_model": "model", "cache_enabled": "no_cache"}


def config_keys() -> Iterator[tuple[str, str, str]]:
    """Every YAML key: (section, key, `CompressionConfig` attribute)."""
    for section, keys in SECTIONS.items():
        for key, attr in keys.items():
            yield section, key, attr


def key_bound(attr: str) -> str:
    """What validation allows for ``attr``, in the words of its own messages ("" when no
    probe value is refused: any value of its type, or a text checked where it is used)."""
    key = next(f"{s}.{k}" for s, k, a in config_keys() if a == attr)
    bounds: list[str] = []
    for value in _PROBES.get(_FIELD_TYPES[attr], ()):
        try:
            CompressionConfig().replace(**{attr: value})
        except ConfigError as exc:
            message = str(exc).split(": ", 1)[-1]
            if not message.startswith(key + " ") or (
                    isinstance(value, str) and " one of " not in message):
                continue  # another key's message, or a name checked for its shape
            bound = message.removeprefix(key + " ").split(", got ")[0].split(" (")[0]
            if bound not in bounds:
                bounds.append(bound)
    return "; ".join(bounds)


def setting_flags(group: Any) -> dict[str, list[str]]:
    """``CompressionConfig`` attribute -> the options that set it, over every command
    (an option's parameter is named after the setting it overrides, `app/options.py`)."""
    fields = {f.name for f in dataclasses.fields(CompressionConfig)}
    by_param = {param: attr for attr, param in _FLAG_OF_SETTING.items()}
    found: dict[str, list[str]] = {}
    for _, command in commands(group):
        for param in command.params:
            attr = by_param.get(param.name or "", param.name or "")
            if attr in fields and _is_option(param):
                names = found.setdefault(attr, [])
                for name in [*param.opts, *param.secondary_opts]:
                    if name.startswith("--") and name not in names:
                        names.append(name)
    return found


def config_reference(group: Any) -> str:
    """Markdown: each section's keys with their type, default, bounds and flag."""
    defaults = CompressionConfig()
    flags = setting_flags(group)
    lines: list[str] = []
    for section, keys in SECTIONS.items():
        lines += [f"### `{section}`", "",
                  "| key | type | default | allowed | flag |", "| --- | --- | --- | --- | --- |"]
        for key, attr in keys.items():
            default = getattr(defaults, attr)
            shown = "null" if default is None else (
                str(default).lower() if isinstance(default, bool) else str(default))
            if isinstance(default, list):
                shown = "[]"
            allowed = key_bound(attr)
            if _FIELD_TYPES[attr] == "bool":
                allowed = "true or false"
            elif attr == "endpoints":
                allowed = "a list of mappings with " + ", ".join(_ENDPOINT_KEYS)
            if attr in IGNORED_KEYS:  # still checked: a value the check refuses is a slip
                allowed = "; ".join(filter(None, [allowed, "accepted, no effect: "
                                                  + IGNORED_KEYS[attr]]))
            flag = ", ".join(f"`{f}`" for f in flags.get(attr, []))
            lines.append(f"| `{section}.{key}` | {_FIELD_TYPES[attr]} | `{_cell(shown)}` | "
                         f"{_cell(allowed)} | {flag} |")
        lines.append("")
    return "\n".join(lines)
