"""The command line's options: what each command's ``--help`` lists, and the run options
reaching the engine the same from the command line and from Python."""

from __future__ import annotations

import re

import pytest

from tests.cli_helpers import invoke_cli, read_jsonl
from tests.fixtures_runs import generated_rows, write_jsonl
from trajectory_compressor import CompressionConfig, ConfigError, RunOptions, compress_dataset
from trajectory_compressor.engine.writer import StrictStop

PROTECTED = "Protected turns, never summarized (default: last 4, each role's first)"
GATES = "CI gates (exit code 3 when exceeded; N rows or P% of the rows)"
GATE_FLAGS = {"--max-over-limit", "--max-failed", "--max-rejected", "--max-fallback-share"}
PROTECT_FLAGS = {"--protect-last-n-turns", "--protect-first-system",
                 "--no-protect-first-system", "--protect-first-human",
                 "--no-protect-first-human", "--protect-first-gpt", "--no-protect-first-gpt",
                 "--protect-first-tool", "--no-protect-first-tool"}
# Each group of options in a panel of its own, so that at 80 columns a panel's help column
# is not narrowed by the longest names of every other group.
BUDGET = {"Target and tokenizer": {"--target-max-tokens", "--summary-target-tokens",
                                   "--tokenizer"}}
READING = {"Reading rows (dialect and counting)": {"--format", "--token-counting",
                                                   "--chat-template"}}
PLANNING = {
    "Strategy (summarize, mask, hybrid)": {"--strategy", "--mask-keep-last",
                                           "--mask-exclude-tools"},
    "Tool outputs (distill, elide)": {"--distill", "--over-limit-strategy"},
    "Distill check": {"--verify-distill", "--no-verify-distill"},
    PROTECTED: PROTECT_FLAGS,
    "Summarizer": {"--summarizer", "--base-url", "--model", "--api-key-env",
                   "--max-concurrent-requests", "--local-model"},
    "Which rows": {"--sample-percent", "--seed", "--split", "--data-files"},
}
# Every flag each command listed before its options were grouped (issue 26), the same
# flags and no other (`--overwrite` of analyze and report: issue 36; windows: issue 39),
# in the panels of their groups (issue 40's checks: --help read at 80 columns).
HELP = {
    "compress": {
        "Options": {"--output", "-o", "--output-format", "--config", "-c", "--no-config",
                    "--dry-run", "--resume", "--overwrite", "--strict", "--quiet", "-q",
                    "--debug", "--help"},
        **BUDGET, **READING, **PLANNING,
        "Windows output": {"--output-mode", "--emit-summarizer-rows"},
        "Summary fidelity": {"--summary-tolerance", "--min-fidelity", "--on-low-fidelity",
                             "--max-invented", "--summary-references"},
        "Summary cache": {"--no-cache", "--cache-path"},
        "Allowances (refused unless given)": {"--allow-fallback", "--allow-insecure-http"},
        "Batch inference (--summarizer batch)": {"--batch-dir", "--batch-results",
                                                 "--batch-max-requests", "--batch-max-bytes",
                                                 "--price-in", "--price-out"},
        "Engine (local or Ray) and checkpoints": {"--checkpoint-every", "--engine",
                                                  "--ray-address", "--ray-actors"},
        GATES: GATE_FLAGS,
    },
    "analyze": {
        "Options": {"--config", "-c", "--no-config", "--probe", "--seconds-per-call",
                    "--targets", "--price-in", "--price-out", "--json", "--overwrite",
                    "--debug", "--help"},
        **BUDGET, **READING, **PLANNING,
        "Windows output": {"--output-mode"},
    },
    "validate": {
        "Options": {"--config", "-c", "--no-config", "--allow-over-limit", "--json", "--quiet",
                    "-q", "--debug", "--help"},
        **BUDGET, **READING,
        GATES: GATE_FLAGS,
    },
    "report": {
        "Options": {"--show", "--json", "--limit", "--html", "--max-rows", "--config", "-c",
                    "--no-config", "--overwrite", "--debug", "--help"},
        **BUDGET,
        GATES: GATE_FLAGS,
    },
}
FLAG = re.compile(r"--?[a-z][a-z-]*")


def listed_options(text: str) -> dict[str, set[str]]:
    """The flags each panel of a --help (unwrapped) lists: the leading words of each row
    that are flags (names, --no- names, short names)."""
    panels: dict[str, set[str]] = {}
    for line in text.splitlines():
        title = re.match(r"╭─ (.*?) ─+╮", line)
        if title:
            panel = title.group(1)
        if not line.startswith("│"):  # the usage and description are no panel
            continue
        words = line.strip("│ ").split()
        flags = []
        for word in words:
            if not FLAG.fullmatch(word):
                break
            flags.append(word)
        if flags:
            panels.setdefault(panel, set()).update(flags)
    return panels


@pytest.mark.parametrize("command", sorted(HELP))
def test_every_command_lists_the_options_it_listed_before(command):
    proc = invoke_cli(command, "--help", env={"COLUMNS": "1000"})  # rows unwrapped
    assert proc.returncode == 0, proc.stderr
    assert listed_options(proc.stdout) == HELP[command]


@pytest.mark.parametrize("command", sorted(HELP))
def test_help_reads_whole_at_80_columns(command):
    """A pipe or a CI log is 80 columns wide: no help text cut short, no word left alone
    on a line by a docstring's own line breaks. Only the --no-protect-first-ROLE names
    are cut, four names and a switch too wide for any table of 80 columns."""
    shown = invoke_cli(command, "--help", env={"COLUMNS": "80"}).stdout
    cut = [line for line in shown.splitlines() if "…" in line]
    assert all("--no-protect-first-" in line for line in cut), cut
    described = shown.split("╭")[0].splitlines()[3:]  # the usage line and a blank go first
    paragraphs = "\n".join(line.strip() for line in described).strip().split("\n\n")
    for paragraph in paragraphs:
        lines = paragraph.splitlines()
        assert all(len(line) > 40 for line in lines[:-1]), paragraph


SETTINGS = {"summarizer": "extractive", "target_max_tokens": 1000,
            "summary_target_tokens": 120}
FLAGS = ("--summarizer", "extractive", "--target-max-tokens", "1000",
         "--summary-target-tokens", "120", "--quiet")


def test_sample_options_reach_the_run_alike_from_the_cli_options_and_keywords(tmp_path):
    rows = generated_rows(3, n=40)
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    config = CompressionConfig(**SETTINGS)
    # In the folder (no config file applies): the flags are the config.
    proc = invoke_cli("compress", str(src), "-o", str(tmp_path / "cli.jsonl"), *FLAGS,
                      "--sample-percent", "40", "--seed", "5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # --quiet reached the run: no summary
    by_options = compress_dataset(str(src), str(tmp_path / "options.jsonl"), config,
                                  options=RunOptions(sample_percent=40, seed=5))
    by_keywords = compress_dataset(str(src), str(tmp_path / "keywords.jsonl"), config,
                                   sample_percent=40, seed=5)
    everything = compress_dataset(str(src), str(tmp_path / "all.jsonl"), config)

    kept = [r["id"] for r in read_jsonl(tmp_path / "cli.jsonl")]
    order = [r["id"] for r in rows]
    assert 0 < len(kept) < 40 and kept == [i for i in order if i in kept]
    data = (tmp_path / "cli.jsonl").read_bytes()
    assert (tmp_path / "options.jsonl").read_bytes() == data
    assert (tmp_path / "keywords.jsonl").read_bytes() == data
    assert by_options.metrics.total_trajectories == by_keywords.metrics.total_trajectories \
        == len(kept)
    assert [r["id"] for r in read_jsonl(tmp_path / "all.jsonl")] == order
    assert everything.metrics.total_trajectories == 40
    # Another seed, another sample: the seed reached the sampler too.
    compress_dataset(str(src), str(tmp_path / "seed6.jsonl"), config,
                     options=RunOptions(sample_percent=40, seed=6))
    assert [r["id"] for r in read_jsonl(tmp_path / "seed6.jsonl")] != kept


def test_keywords_replace_the_fields_of_the_options_they_come_with(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", generated_rows(3, n=10))
    config = CompressionConfig(**SETTINGS)
    result = compress_dataset(str(src), str(tmp_path / "out.jsonl"), config,
                              options=RunOptions(sample_percent=10, seed=5),
                              sample_percent=None)
    assert result.metrics.total_trajectories == 10
    with pytest.raises(TypeError, match="sample_size"):
        compress_dataset(str(src), str(tmp_path / "o2.jsonl"), config,
                         sample_size=10)  # type: ignore[call-arg]
    assert not (tmp_path / "o2.jsonl").exists()


def test_strict_and_overwrite_reach_the_run_as_options(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", generated_rows(3, n=6), extra_lines=("{oops",))
    config = CompressionConfig(**SETTINGS)
    out = tmp_path / "out.jsonl"
    # Without --strict the bad line is rejected and the run goes on (exit code 1) ...
    assert compress_dataset(str(src), str(out), config).exit_code == 1
    assert len(read_jsonl(out)) == 6
    # ... with it, the run stops and commits nothing (README: --strict).
    out.unlink()
    with pytest.raises(StrictStop, match=r"in\.jsonl:7"):
        compress_dataset(str(src), str(out), config, options=RunOptions(strict=True))
    assert not out.exists()
    # An output another input wrote is replaced only with overwrite (README: --overwrite).
    other = write_jsonl(tmp_path / "other.jsonl", generated_rows(4, n=3))
    compress_dataset(str(src), str(out), config)
    with pytest.raises(ConfigError, match="--overwrite"):
        compress_dataset(str(other), str(out), config)
    compress_dataset(str(other), str(out), config, options=RunOptions(overwrite=True))
    assert [r["id"] for r in read_jsonl(out)] == [f"gen-4-{i}" for i in range(3)]


@pytest.mark.parametrize("share", [0, -5, 100.5, 150, float("nan")])
def test_a_sample_share_out_of_range_is_refused_by_the_library_too(share):
    from trajectory_compressor import RunOptions
    from trajectory_compressor.core.errors import ConfigError

    with pytest.raises(ConfigError, match="sample_percent must be in"):
        RunOptions(sample_percent=share)
    assert RunOptions(sample_percent=100).sample_percent == 100
