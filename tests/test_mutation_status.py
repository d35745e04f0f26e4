"""`scripts/mutation_status.py --carry`: which earlier kills stand for a mutant (issue 40).

A kill carries over only to the same change in a function whose code is unchanged,
wherever an edit moved its lines; a changed function's mutants are run again.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import mutation_status  # from the scripts folder, put on the path above

BEFORE = '''\
def kept(a, b):
    return a + b


def edited(x):
    if x > 1:
        return x - 1
    return 0
'''

# A new function above both (every line moves), a comment and a docstring added to the
# unchanged one, and one change inside the other.
AFTER = '''\
def added(y):
    return y * 2


def kept(a, b):
    """The same code, with a docstring now."""
    # and a comment
    return a + b


def edited(x):
    if x > 2:
        return x - 1
    return 0
'''


def _mutants(source: str) -> dict[int, tuple[int, str]]:
    return {m.index: (m.line, f"{m.original} -> {m.mutated}")
            for m, _ in mutation_status.mutation.mutants_of("core/example.py", source)}


def test_an_unchanged_function_keeps_its_keys_wherever_it_moved() -> None:
    before = mutation_status.unit_keys("core/example.py", BEFORE)
    after = mutation_status.unit_keys("core/example.py", AFTER)
    lines_after = _mutants(AFTER)
    lines_before = _mutants(BEFORE)
    kept_before = {k for i, k in before.items() if lines_before[i][0] <= 2}
    kept_after = {k for i, k in after.items() if 5 <= lines_after[i][0] <= 8}
    assert kept_before and kept_before == kept_after
    # every key names its function, so no other function's mutant shares them
    assert all(k.startswith(".kept:") for k in kept_after)


def test_a_changed_function_and_a_new_one_get_new_keys() -> None:
    before = set(mutation_status.unit_keys("core/example.py", BEFORE).values())
    after = mutation_status.unit_keys("core/example.py", AFTER)
    lines = _mutants(AFTER)
    edited = [k for i, k in after.items() if lines[i][0] >= 11]
    added = [k for i, k in after.items() if lines[i][0] <= 2]
    assert edited and added
    assert not set(edited) & before  # `x - 1` is unchanged, but its function is not
    assert not set(added) & before


def test_the_same_change_twice_in_one_function_gets_two_keys() -> None:
    source = "def f(a, b):\n    return (a + 1) + (b + 1)\n"
    keys = list(mutation_status.unit_keys("core/example.py", source).values())
    assert len(keys) == len(set(keys))
