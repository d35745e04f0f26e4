"""The manual (docs/, MkDocs) cannot lie or fall behind:

- it builds with ``mkdocs build --strict`` (no broken link, no page left out of the nav);
- its command-line reference lists every command and every spelling of every option of
  the typer app, and its configuration reference every YAML key with its default: the
  options and keys are enumerated here from the app and from `core.config`, and looked
  for in the built HTML;
- every ``console`` example of the getting-started, own-data and troubleshooting pages and
  of the README runs against the bundled samples and prints what the page shows
  (tests/doc_examples.py says how they are compared);
- each command's ``--help`` ends with the manual page to read, and that page exists;
- the YAML examples of the configuration page load.
"""

from __future__ import annotations

import html
import importlib.util
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import typer
import yaml

from tests.cli_helpers import invoke_cli
from tests.doc_examples import ROOT, examples, matches, run, workspace
from trajectory_compressor.app.cli import app
from trajectory_compressor.core.config import SECTIONS, CompressionConfig

DOCS = ROOT / "docs"
RUNNABLE_PAGES = [DOCS / "getting-started.md", DOCS / "own-data.md",
                  DOCS / "troubleshooting.md", ROOT / "README.md"]
needs_mkdocs = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                                  reason="the 'docs' extra is not installed "
                                         "(bash scripts/setup.sh dev,docs)")


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def sections(path: Path) -> dict[str, str]:
    """A built page's h2 sections by their title: each one's text up to the next h2 (the
    page's navigation and table of contents left out)."""
    source = path.read_text(encoding="utf-8")
    article = source[source.index("<article"):source.index("</article>")]
    found: dict[str, str] = {}
    for part in re.split(r"(?=<h2 )", article)[1:]:
        title, _, body = part.partition("</h2>")
        text = _plain(title)
        found[text.rstrip("¶").strip()] = _plain(body)
    return found


def _plain(markup: str) -> str:
    parser = _Text()
    parser.feed(markup)
    return html.unescape("".join(parser.parts))


def app_options() -> dict[str, list[str]]:
    """Each command ("" for the root) -> every spelling of every option it takes, read
    from the click command typer builds (not from the generator under test)."""
    group = typer.main.get_command(app)
    found = {"": [n for p in group.params for n in [*p.opts, *p.secondary_opts]]}
    ctx = group.context_class(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        found[name] = [n for p in command.params if p.param_type_name == "option"
                       for n in [*p.opts, *p.secondary_opts]]
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The manual built with ``mkdocs build --strict`` into a fresh folder."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-d", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ,
                                            "PYTHONPATH": str(ROOT),
                                            "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@needs_mkdocs
def test_the_manual_builds_strictly_with_every_page_in_the_nav(site: Path) -> None:
    built = {p.relative_to(site).with_suffix(".md").as_posix()
             for p in site.rglob("*.html") if p.name != "404.html"}
    sources = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert sources <= built, sorted(sources - built)
    home = (site / "index.html").read_text(encoding="utf-8")
    for page in sorted(sources - {"index.md"}):
        assert f'href="{page.removesuffix(".md")}.html' in home, page  # reached from home
    # Nothing is fetched to read it: no web fonts, no external stylesheet or script.
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, page
        assert not re.search(r'<(?:link|script)[^>]+(?:href|src)="https?://', text), page


@needs_mkdocs
def test_the_cli_reference_lists_every_command_and_option(site: Path) -> None:
    found = sections(site / "reference" / "cli.html")
    for command, names in app_options().items():
        title = f"trajectory-compressor {command}".strip()
        assert title in found, (title, list(found))
        section = found[title]
        for name in names:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", section), \
                (command, name)


@needs_mkdocs
def test_the_configuration_reference_lists_every_key_with_its_default(site: Path) -> None:
    reference = sections(site / "configuration.html")["Every key"]
    defaults = CompressionConfig()
    for section, keys in SECTIONS.items():
        for key, attr in keys.items():
            assert f"{section}.{key}" in reference, f"{section}.{key}"
            default = getattr(defaults, attr)
            shown = {None: "null", True: "true", False: "false"}.get(default, str(default)) \
                if not isinstance(default, list) else "[]"
            row = " ".join(reference.split(f"{section}.{key}", 1)[1].split())
            assert " ".join(shown.split()) in row[:300], (f"{section}.{key}", shown)


def test_the_generated_pages_hold_every_option_and_key_without_a_build() -> None:
    """The same check on the generated markdown, for a machine without the docs extra."""
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        import generated  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(DOCS / "hooks"))
    cli, config = generated.generated("cli"), generated.generated("config")
    for names in app_options().values():
        for name in names:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", cli), name
    for section, keys in SECTIONS.items():
        for key in keys:
            assert f"`{section}.{key}`" in config, f"{section}.{key}"
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    assert "<!-- generated: cli -->" in page
    assert "<!-- generated: config -->" in (DOCS / "configuration.md").read_text(
        encoding="utf-8")


def test_every_yaml_example_of_the_configuration_page_loads() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        CompressionConfig.from_dict(yaml.safe_load(block), source="docs/configuration.md")


def test_each_commands_help_ends_with_its_manual_page() -> None:
    for command in app_options():
        args = [command, "--help"] if command else ["--help"]
        result = invoke_cli(*args, env={"COLUMNS": "200"})
        assert result.returncode == 0, result.stderr
        tail = " ".join(result.stdout.split()[-40:])
        page = re.search(r"Manual: (docs/[\w./-]+\.md)", tail)
        assert page, (command, tail)
        assert (ROOT / page.group(1)).is_file(), page.group(1)
        assert "docs/reference/cli.md" in tail and "mkdocs serve" in tail


def test_the_pages_whose_examples_run_show_them_as_console_blocks() -> None:
    """A command of those pages shown in another kind of block would not be checked."""
    for page in RUNNABLE_PAGES:
        text = page.read_text(encoding="utf-8")
        for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
            first = body.lstrip().split("\n", 1)[0]
            if first.startswith(("trajectory-compressor ", "$ trajectory-compressor")):
                assert lang == "console", (page.name, first)
        assert examples(page), page.name


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda p: p.name)
def test_the_examples_print_what_the_page_shows(page: Path, tmp_path: Path) -> None:
    env = workspace(tmp_path)
    for example in examples(page):
        code, actual = run(example, tmp_path, env)
        where = f"{example.page}:{example.line}: $ {example.command}"
        assert code == example.exit_code, (where, code, "\n".join(actual))
        expected = [line.rstrip() for line in example.expected]
        from tests.doc_examples import normalise

        expected = normalise("\n".join(expected))
        assert matches(expected, actual), (
            f"{where}\n--- the page shows:\n" + "\n".join(expected)
            + "\n--- the command printed:\n" + "\n".join(actual))


def test_the_example_convention_reads_and_compares_as_documented(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("text\n\n```console\n$ trajectory-compressor a \\\n    --b 1\nline one\n"
                    "...\nlast  \n[exit 3]\n$ ls\n```\n\n```\n$ not run\n```\n",
                    encoding="utf-8")
    first, second = examples(page)
    assert (first.line, first.command, first.exit_code) == (4, "trajectory-compressor a  --b 1", 3)
    assert first.expected == ["line one", "...", "last  "]
    assert (second.command, second.expected, second.exit_code) == ("ls", [], 0)
    from tests.doc_examples import normalise

    shown = normalise("line one\n...\nlast  ")
    assert matches(shown, ["line one", "a", "b", "last"])
    assert matches(shown, ["line one", "last"])
    assert not matches(shown, ["line one", "last", "more"])
    assert not matches(shown, ["line two", "last"])
    assert matches(["time ..."], ["time anything"]) and not matches(["time ..."], ["tim"])
    assert normalise("took 5.2s, then 0.47 s and 12 ms; at 2026-11-28 12:04:26",
                     None) == ["took <time>, then <time> and <time>; at <when>"]
    assert normalise("  time   5.2s") == normalise("  time  10.2s") == ["  time <time>"]
    assert normalise(f"wrote {tmp_path}/x.jsonl", tmp_path) == ["wrote x.jsonl"]
