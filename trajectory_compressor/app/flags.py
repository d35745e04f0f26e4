"""How the commands read and show their flags: groups of options declared once and
shared by several commands (`Flags`, `spread_flags`); in ``--help``, flags without a
``<bool>`` type, and help text completed when it is shown (a default that depends on this
machine and folder)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import wraps
from inspect import Parameter, Signature, cleandoc, signature
from typing import Any, ClassVar, TypeVar, get_type_hints

from typer.core import TyperCommand, TyperGroup

R = TypeVar("R")

# Placeholder in an option's help -> what replaces it when the help is shown.
HELP_FILLERS: dict[str, Callable[[], str]] = {}


def _without_bool_type(params: list[Any]) -> list[Any]:
    # Recent typer shows every flag, --help included, as taking a `<bool>`; a flag takes
    # no value, and an empty metavar shows none.
    for param in params:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", "") is None:
            param.metavar = ""
    return params


class FlagCommand(TyperCommand):
    """A command whose flags show no ``<bool>`` and whose help is filled in when shown."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_bool_type(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.params:
            text = getattr(param, "help", None)
            for mark, fill in HELP_FILLERS.items():
                if isinstance(text, str) and mark in text:
                    text = text.replace(mark, fill())
                    param.help = text  # type: ignore[attr-defined]
        super().format_help(ctx, formatter)


def reflowed(doc: str | None) -> str | None:
    """A command's docstring as its ``--help`` shows it: each paragraph one line for the
    terminal to wrap (typer keeps a docstring's line breaks, which at 80 columns leave a
    word alone on every other line)."""
    if doc is None:
        return None
    paragraphs = cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


class FlagGroup(TyperGroup):
    """The root command: its flags (``--version``, ``--help``) show no ``<bool>``."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_bool_type(super().get_params(ctx))


@dataclass(frozen=True)
class Flags:
    """A group of options, declared once: a frozen dataclass whose fields are typer
    options, named after the setting each gives. A command takes the group as one
    parameter (see `spread_flags`); several commands can take the same group."""

    # The --help panel its options are listed in (None: the command's "Options").
    panel: ClassVar[str | None] = None

    def values(self) -> dict[str, Any]:
        """Each field's value (None: not given), by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def overrides(self) -> dict[str, Any]:
        """The config settings given (None: not given), by config field."""
        return self.values()

    def by_flag(self) -> dict[str, Any]:
        """Each field's value by its option's name (``--target-max-tokens``)."""
        hints = get_type_hints(type(self), include_extras=True)
        return {_option_name(hints[name]): value for name, value in self.values().items()}


def _in_panel(hint: Any, panel: str | None) -> Any:
    """``hint``'s option shown in ``panel`` of ``--help``, unless it names its own."""
    info = hint.__metadata__[0]
    if panel and info.rich_help_panel is None:
        info.rich_help_panel = panel
    return hint


def _option_name(hint: Any) -> str:
    info = hint.__metadata__[0]
    # Inside `Annotated`, typer.Option keeps its first name where a default would go.
    names = [info.default, *(info.param_decls or ())]
    return next(n for n in names if isinstance(n, str) and n.startswith("--")).split("/")[0]


def spread_flags(command: Callable[..., R]) -> Callable[..., R]:
    """``command`` as typer reads it: each of its parameters typed with a `Flags` group is
    replaced, in its place, by the group's options; ``command`` is still called with one
    value of the group. The groups stand among keyword-only parameters (after ``*``)."""
    hints = get_type_hints(command, include_extras=True)
    groups: dict[str, type[Flags]] = {}
    params: list[Parameter] = []
    for param in signature(command).parameters.values():
        kind = hints[param.name]
        if isinstance(kind, type) and issubclass(kind, Flags):
            groups[param.name] = kind
            options = get_type_hints(kind, include_extras=True)
            params += [Parameter(f.name, Parameter.KEYWORD_ONLY, default=f.default,
                                 annotation=_in_panel(options[f.name], kind.panel))
                       for f in fields(kind)]
        else:
            params.append(param.replace(annotation=kind))

    @wraps(command)
    def call(**values: Any) -> R:
        for name, group in groups.items():
            values[name] = group(**{f.name: values.pop(f.name) for f in fields(group)})
        return command(**values)

    # typer reads the parameters from the signature (a name twice is an error here).
    call.__signature__ = Signature(params)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in params}
    return call
