"""The extractive summarizer's survivors of round 5 (issue 26, item 5).

Expected values come from the module's documentation (core/extractive.py, README
"--summarizer extractive": arguments cut to 80 characters, lines to 160, outputs of three
or more lines shown by their first and last, JSON in a tool response unwrapped four objects
deep) or are worked out by hand. Tokens are counted as characters (``len``), which add up
line by line exactly as the summarizer's per-line plan assumes, so budgets are exact.
"""

from __future__ import annotations

import json

from trajectory_compressor.core.extractive import (
    extractive_text,
    response_text,
    truncate_to_tokens,
)
from trajectory_compressor.core.summary import SummaryRequest

PREFIX = "[CONTEXT SUMMARY]:"


def summary(turns, first=3, target=100_000, tail=(), count=len) -> str:
    request = SummaryRequest(turns=turns, first_index=first, target_tokens=target,
                             tail_items=tuple(tail))
    return extractive_text(request, count)


def section(text: str, title: str) -> list[str]:
    """The items (without ``- ``) listed under ``title:``."""
    lines = text.splitlines()
    if f"{title}:" not in lines:
        return []
    items = []
    for line in lines[lines.index(f"{title}:") + 1:]:
        if not line.startswith("- "):
            break
        items.append(line[2:])
    return items


def call(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_an_argument_is_cut_to_80_characters():
    exact, over = "a" * 80, "b" * 81
    text = summary([{"from": "gpt", "value": call("run", command=exact)},
                    {"from": "gpt", "value": call("run", command=over)}])
    assert section(text, "Tool calls") == [f"turn 3: run(command={exact})",
                                           f"turn 4: run(command={'b' * 79}…)"]


def test_a_line_is_cut_to_160_characters():
    exact, over = "a" * 160, "b" * 161
    text = summary([{"from": "human", "value": exact}, {"from": "human", "value": over}])
    # "turn 3 (user): " comes before the clipped line, which is 160 characters at most.
    assert section(text, "Messages") == [f"turn 3 (user): {exact}",
                                         f"turn 4 (user): {'b' * 159}…"]


def test_three_lines_of_output_show_the_first_and_the_last():
    text = summary([{"from": "tool", "value": "alpha\nbeta\ngamma"},
                    {"from": "tool", "value": "one\ntwo"}])
    assert section(text, "Outputs") == ["turn 3: alpha … (1 more lines) … gamma",
                                        "turn 4: one | two"]


def nested(levels: int) -> str:
    """A tool response of ``levels`` + 1 JSON objects, each the ``content`` of the one
    around it, the innermost ``{"stdout": "hello"}``."""
    payload = json.dumps({"stdout": "hello"})
    for _ in range(levels):
        payload = json.dumps({"content": payload})
    return payload


def test_json_in_a_response_is_unwrapped_four_objects_deep():
    assert response_text(nested(3)) == ("hello", None)
    # A fifth object is kept as its JSON text.
    assert response_text(nested(4)) == ('{"stdout": "hello"}', None)
    assert response_text(nested(0)) == ("hello", None)


def test_a_response_without_output_fields_keeps_non_ascii_text():
    assert response_text('{"status": "café ✓"}') == ('{"status": "café ✓"}', None)


def test_paths_in_calls_that_are_not_json_and_in_plain_outputs_are_listed():
    text = summary([{"from": "gpt", "value": "<tool_call>cat /srv/app/main.py</tool_call>"},
                    {"from": "tool", "value": "wrote /tmp/out/report.txt"}])
    assert section(text, "Files and paths") == ["/srv/app/main.py", "/tmp/out/report.txt"]


def test_paths_inside_json_lists_are_listed():
    text = summary([{"from": "gpt", "value": call("lint", targets=["/srv/a/one.py",
                                                                   "/srv/b/two.py"])}])
    assert section(text, "Files and paths") == ["/srv/a/one.py", "/srv/b/two.py"]


def test_a_path_mentioned_twice_is_listed_once():
    text = summary([{"from": "gpt", "value": call("read", path="/srv/app/main.py")},
                    {"from": "gpt", "value": call("edit", path="/srv/app/main.py")},
                    {"from": "human", "value": "see /srv/app/main.py"}])
    assert section(text, "Files and paths") == ["/srv/app/main.py"]
    assert len(section(text, "Tool calls")) == 2


TWO = [{"from": "human", "value": "hi"}, {"from": "human", "value": "yo"}]
HEADER = f"{PREFIX} Turns 3-4 (2 turns) were condensed; what they did:"


def planned_cost() -> int:
    """The plan of the module's comment, by hand: the prefixed header and 2, then each line
    with its newline, a section's title line with its first item."""
    return (len(HEADER) + 2 + len("Messages:\n") + len("- turn 3 (user): hi\n")
            + len("- turn 4 (user): yo\n"))


def test_the_items_that_exactly_fit_the_plan_are_all_kept():
    text = summary(TWO, target=planned_cost())
    assert section(text, "Messages") == ["turn 3 (user): hi", "turn 4 (user): yo"]


def test_one_token_short_of_the_plan_leaves_the_last_item_out():
    text = summary(TWO, target=planned_cost() - 1)
    assert text == f"{HEADER}\nMessages:\n- turn 3 (user): hi"


def test_a_counter_that_adds_up_by_line_never_gets_a_line_cut():
    """With counts that add up line by line the plan is exact, so the final check never has
    to cut: every line is the header, a whole "Referenced later" line, a title or an item
    of the full summary."""
    turns = [{"from": "human", "value": "Please fix /srv/app/main.py"},
             {"from": "gpt", "value": call("run", command="pytest -q tests/test_app.py")},
             {"from": "tool", "value": "ValueError: bad input\nexit code 2\nthird line"},
             {"from": "human", "value": "and the docs in docs/guide.md"}]
    tail = ("/srv/app/main.py", "ValueError", "docs/guide.md")
    header = f"{PREFIX} Turns 3-6 (4 turns) were condensed; what they did:"
    full = summary(turns, tail=tail).splitlines()
    referenced = {"Referenced later: " + "; ".join(tail[:k]) for k in range(1, 4)}
    for target in range(2 * len(header) + 4, len("\n".join(full)) + 30):
        text = summary(turns, target=target, tail=tail)
        assert len(text) <= target
        assert text.startswith(header + "\n")
        for line in text.splitlines():
            assert line in full or line in referenced, (target, line)


def test_a_text_counted_at_exactly_the_budget_is_not_cut():
    # A counter whose count of a prefix may exceed that of the whole text (as a real
    # tokenizer's can, cut inside a word): the whole text fits, so it is kept whole.
    def count(text: str) -> int:
        return len(text) - 5 if text.endswith("did:") else len(text)

    header = f"{PREFIX} Turns 3-3 (1 turns) were condensed; what they did:"
    turns = [{"from": "system", "value": "be brief"}]
    assert summary(turns, target=len(header) - 5, count=count) == header


def test_truncation_keeps_the_longest_prefix_within_the_budget():
    text = "abcdefghijklmnopqrstuvwxyz"
    for length in range(len(text) + 1):
        for budget in range(length + 1):
            assert truncate_to_tokens(text[:length], budget, len) == text[:budget]


def test_a_section_stops_at_its_first_item_that_does_not_fit():
    # The docstring: each section keeps its first items, in order. A later, shorter item
    # that would fit is not listed in place of an earlier one that did not, even while
    # another section still takes items.
    turns = [{"from": "human", "value": "hi"}, {"from": "tool", "value": "o1"},
             {"from": "human", "value": "x" * 60}, {"from": "tool", "value": "o2"},
             {"from": "human", "value": "ok"}, {"from": "tool", "value": "o3"}]
    header = f"{PREFIX} Turns 3-8 (6 turns) were condensed; what they did:"
    # Room for every output and the first and last message, not for the second.
    outputs = ["turn 4: o1", "turn 6: o2", "turn 8: o3"]
    target = (len(header) + 2 + len("Outputs:\n") + sum(len(f"- {o}\n") for o in outputs)
              + len("Messages:\n") + len("- turn 3 (user): hi\n") + len("- turn 7 (user): ok\n"))
    text = summary(turns, target=target)
    assert section(text, "Outputs") == outputs
    assert section(text, "Messages") == ["turn 3 (user): hi"]
