"""A count and its noun, in the singular for one: ``1 row``, ``3 rows``, ``2 summaries``.

Every message that counts something says it this way (analyze, report, validate, batch,
the masked-output notices, the pool's errors).
"""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with thousands separators, then ``noun``, or its ``plural`` (``noun + "s"``
    unless given) for any count but one."""
    return f"{n:,} " + (noun if n == 1 else plural or noun + "s")
