"""Only `dialects/` knows how a row spells its turns (issue 25, item 1): no row field or
role name of a dialect is a string literal anywhere else in the package, except the few
places listed here with the reason each is not a dialect leak (or cannot move yet).

`report` once read every output as Hermes ShareGPT because `app/` spelled
``"conversations"`` itself; this test is what keeps that from coming back.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.cli_helpers import ROOT

PACKAGE = ROOT / "trajectory_compressor"
# Row fields and role names of the dialects: ShareGPT (Hermes, LLaMA-Factory) and
# OpenAI / LLaMA-Factory messages.
DIALECT_NAMES = {"conversations", "messages", "function_call", "observation", "tool_calls",
                 "human", "gpt"}
# (file, literal) -> why it may stay.
ALLOWED = {
    ("core/config.py", "messages"): "the YAML key dataset.messages (a config key named as "
                                    "in LLaMA-Factory's dataset_info), not a row field",
    ("core/extractive.py", "messages"): "the name of a section of the extractive summary",
    ("core/extractive.py", "human"): "the conversation model's role (core/conversation.py)",
    ("core/extractive.py", "gpt"): "the conversation model's role (core/conversation.py)",
    ("core/plan.py", "human"): "the conversation model's role (core/conversation.py)",
    ("core/plan.py", "gpt"): "the conversation model's role (core/conversation.py)",
    ("core/conversation.py", "human"): "the conversation model's roles are defined here",
    ("core/conversation.py", "gpt"): "the conversation model's roles are defined here",
    ("core/assemble.py", "human"): "the summary turn of the conversation model",
    ("core/windows.py", "human"): "the summary turn of the conversation model (§20)",
    ("core/windows.py", "gpt"): "the conversation model's role (core/conversation.py)",
    ("core/mask.py", "gpt"): "the conversation model's role (core/conversation.py)",
    ("core/mask.py", "human"): "the conversation model's role (core/conversation.py)",
    ("engine/compressor.py", "gpt"): "the conversation model's role: assistant tokens kept "
                                     "(§19)",
    ("counting/template.py", "observation"): "a header role chat templates write, matched "
                                             "in rendered text, not a row field",
    ("counting/template.py", "tool_calls"): "the message form chat templates take (their "
                                            "input), built from the conversation model",
    ("app/options.py", "human"): "the conversation model's role in --protect-first-human "
                                 "(the config key protected_turns.first_human)",
    ("app/options.py", "gpt"): "the conversation model's role in --protect-first-gpt "
                               "(the config key protected_turns.first_gpt)",
    ("summarizers/chat.py", "messages"): "the body of an OpenAI chat-completions request",
    ("formats/parquet.py", "conversations"): "the schema of an output whose input told "
                                             "nothing (every row rejected): Hermes columns; "
                                             "should come from the dialect",
}
# "from" and "value" are also the keys of the conversation model's turns
# (core/conversation.py: ``{"from": role, "value": text}``), used by every stage; they are
# not checked here until turns get a type of their own.


def _literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_no_dialect_name_outside_dialects():
    found = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("dialects/") or relative.startswith("live/"):
            continue  # live/ is the OpenAI-messages proxy: its requests are messages
        found |= {(relative, name) for name in _literals(path) & DIALECT_NAMES}
    assert found - set(ALLOWED) == set(), "dialect names outside dialects/"
    assert set(ALLOWED) - found == set(), "allow-list entries that no longer apply"


def test_the_check_sees_a_literal():
    assert "conversations" in _literals(PACKAGE / "formats" / "parquet.py")


def test_the_commands_read_rows_through_the_registry_only():
    """`app/` (report, validate, the HTML page) picks a row's dialect with the registry
    (`dialects.detect`, `dialects.row_turns`), never by importing one dialect."""
    for path in (PACKAGE / "app").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dialects."):
                assert node.module == "dialects.base", (path.name, node.module)
