"""What a run's strategy did (§19), as lines of the run summary and of `report`."""

from __future__ import annotations

import textwrap
from typing import Any

from .textfmt import num


def strategy_lines(strategy: Any) -> list[str]:
    """What the strategy did to the rows over the target (§19): rows by what was done,
    the tool turns masked, and the share of the assistant tokens still in the rows."""
    if not isinstance(strategy, dict) or not strategy.get("rows_by_strategy"):
        return []
    rows = strategy["rows_by_strategy"]
    lines = textwrap.wrap("rows over the target: " + ", ".join(
        f"{k} {num(v)}" for k, v in rows.items()), 78, initial_indent=f"  {'strategy':<17}",
        subsequent_indent=" " * 19)
    if strategy.get("masked_turns"):
        lines.append(f"  {'masked':<17}{strategy.get('masked_tokens', 0):>10,}   tokens off "
                     f"{num(strategy['masked_turns'])} tool turns of "
                     f"{num(strategy.get('masked_rows', 0))} rows")
    kept = strategy.get("assistant_tokens_kept")
    if isinstance(kept, (int, float)):
        lines.append(f"  {'assistant kept':<17}{kept:>10.1%}   of "
                     f"{num(strategy.get('assistant_tokens_before', 0))} assistant tokens "
                     "of the rows over")
    return lines
