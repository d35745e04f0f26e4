"""How the commands show in ``--help``: flags without a ``<bool>`` type, and help text
completed when it is shown (a default that depends on this machine and folder)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from typer.core import TyperCommand, TyperGroup

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


class FlagGroup(TyperGroup):
    """The root command: its flags (``--version``, ``--help``) show no ``<bool>``."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_bool_type(super().get_params(ctx))
