"""An independent re-statement of the reference's region selection, used as a test oracle.

Written from the reference's documented behaviour (not shared with the package) so that a
bug in `trajectory_compressor.core.plan` cannot hide behind the same bug here.
"""

from __future__ import annotations


def reference_region(roles, tokens, target, summary_target, protect=(True, True, True, True),
                     last_n=4):
    """(start, end) the reference would summarize, or None; (total, region) for clarity."""
    n = len(roles)
    total = sum(tokens)
    if total <= target:
        return None
    firsts = {}
    for i, r in enumerate(roles):
        if r not in firsts:
            firsts[r] = i
    prot = set()
    for on, role in zip(protect, ("system", "human", "gpt", "tool"), strict=True):
        if on and role in firsts:
            prot.add(firsts[role])
    for i in range(max(0, n - last_n), n):
        prot.add(i)
    head = [i for i in prot if i < n // 2]
    tail = [i for i in prot if i >= n // 2]
    lo = max(head) + 1 if head else 0
    hi = min(tail) if tail else n

    def is_clean(i):
        return i >= n or roles[i] != "tool"

    def snap(i, low, high):
        j = i
        while j < high and not is_clean(j):
            j += 1
        if is_clean(j):
            return j
        j = i
        while j > low and not is_clean(j):
            j -= 1
        return j

    start = snap(lo, lo, hi)
    if start >= hi:
        return None
    need = total - target + summary_target
    acc, until = 0, start
    for i in range(start, hi):
        acc += tokens[i]
        until = i + 1
        if acc >= need:
            break
    until = snap(until, start, hi)
    if until <= start or sum(tokens[start:until]) <= summary_target:
        return None
    return (start, until)
