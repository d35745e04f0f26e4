"""`inert`: text from data made harmless for a terminal (`core/terminal.py`; issue 24,
item 10).

The sets come from the standards, not the code: C0 controls U+0000-U+001F (but line
feed and tab), DEL U+007F and C1 controls U+0080-U+009F (ECMA-48); Unicode's bidi
format characters U+061C (ALM), U+200E/U+200F (LRM/RLM), U+202A-U+202E (LRE, RLE, PDF,
LRO, RLO) and U+2066-U+2069 (LRI, RLI, FSI, PDI); surrogates U+D800-U+DFFF.
"""

from __future__ import annotations

import json

from trajectory_compressor.core.terminal import inert

SPELLED = [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0), 0x061C,
           0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
           0xD800, 0xDBFF, 0xDC00, 0xDFFF]
# The neighbours of each range, and the two kept controls.
KEPT = [0x09, 0x0A, 0x20, 0x7E, 0xA0, 0x061B, 0x061D, 0x200D, 0x2010, 0x2029, 0x202F,
        0x2065, 0x206A, 0xD7FF, 0xE000, 0x1F600]


def test_each_control_bidi_mark_and_surrogate_is_spelled_out():
    for code in SPELLED:
        assert inert(f"a{chr(code)}b") == f"a\\u{code:04x}b", hex(code)


def test_their_neighbours_line_breaks_and_tabs_are_kept():
    for code in KEPT:
        assert inert(f"a{chr(code)}b") == f"a{chr(code)}b", hex(code)


def test_an_osc_52_clipboard_write_is_inert_and_json_keeps_its_value():
    attack = "row-\x1b]52;c;ZXZpbA==\x07-\u202eid"
    shown = inert(attack)
    assert shown == "row-\\u001b]52;c;ZXZpbA==\\u0007-\\u202eid"
    assert json.loads(f'"{shown}"') == attack  # the spelling is JSON's escape of it
