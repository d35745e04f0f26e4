"""How many examples a property test tries.

The counts written in the tests are the long run's: `TC_LONG_PROPERTIES=1 pytest ...`
(before a release, or after changing the code a property covers). The default run
(`scripts/test.sh`, CI, the quick tier) tries a quarter of them, at least 25: the same
strategies and shrinking, fewer random draws. hypothesis keeps the failing examples it
finds in `.hypothesis/` and tries them first on the next run.
"""

from __future__ import annotations

import os

LONG_RUN = os.environ.get("TC_LONG_PROPERTIES", "") not in ("", "0")


def examples(long_run: int) -> int:
    """``max_examples`` for a property test written for ``long_run`` examples."""
    return long_run if LONG_RUN else min(long_run, max(25, long_run // 4))
