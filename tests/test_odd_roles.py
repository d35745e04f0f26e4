"""A list or an object where a role goes (issue 36, item 1): that row's located reject.

The dialect vote collected each row's roles in a set, so ``{"from": ["gpt"]}`` in a
file's first rows stopped `compress`, `analyze` and `validate` (and the Ray engine) with
an internal error. Here the bad role sits in the first row and again further on, in every
dialect and container; the expected ids and locations are written out by hand from the
rows built below.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli_helpers import invoke_cli, read_jsonl, run_cli
from trajectory_compressor.core.config import CompressionConfig
from trajectory_compressor.dialects import detect, misfit, row_kind

SMALL = ("--summarizer", "extractive", "--target-max-tokens", "150",
         "--summary-target-tokens", "10", "--no-cache")
DIALECTS = ("hermes", "lf-sharegpt", "lf-messages", "openai")
SHAPES: dict[str, Any] = {"list": ["gpt"], "object": {"x": 1}}
CONTAINERS = ("jsonl", "jsonl.gz", "json", "parquet", "save_to_disk")


def _texts(row_id: str) -> list[str]:
    return [f"{row_id} turn {i} " + " ".join(f"w{i}x{k}" for k in range(12)) for i in range(9)]


def good_row(dialect: str, row_id: str) -> dict:
    """A row over the 150-token target in ``dialect``: a system turn, then user and
    assistant turns in turn."""
    texts = _texts(row_id)
    if dialect == "hermes":
        roles = ["system"] + ["human" if i % 2 else "gpt" for i in range(1, 9)]
        return {"id": row_id, "conversations": [{"from": r, "value": t}
                                                 for r, t in zip(roles, texts, strict=True)]}
    if dialect == "lf-sharegpt":
        return {"id": row_id, "system": texts[0], "conversations": [
            {"from": "user" if i % 2 else "assistant", "value": t}
            for i, t in enumerate(texts[1:], start=1)]}
    roles = ["system"] + ["user" if i % 2 else "assistant" for i in range(1, 9)]
    if dialect == "lf-messages":
        return {"id": row_id, "messages": [
            {"role": r, "content": [{"type": "text", "value": t}]}
            for r, t in zip(roles, texts, strict=True)]}
    return {"id": row_id, "messages": [{"role": r, "content": t}
                                       for r, t in zip(roles, texts, strict=True)]}


def bad_row(dialect: str, row_id: str, role: Any) -> dict:
    """``good_row`` whose second turn has ``role`` as its role."""
    row = good_row(dialect, row_id)
    column, key = (("messages", "role") if "messages" in row else ("conversations", "from"))
    row[column][1][key] = role
    return row


def arrow_bad_row(dialect: str, row_id: str, role: Any) -> dict:
    """``good_row`` with every role in ``role``'s shape (an Arrow column has one type):
    ``[role]`` for a list, ``{"x": role}`` for an object."""
    row = good_row(dialect, row_id)
    column, key = (("messages", "role") if "messages" in row else ("conversations", "from"))
    for turn in row[column]:
        turn[key] = [turn[key]] if isinstance(role, list) else {"x": turn[key]}
    return row


def write(rows: list[dict], folder: Path, container: str) -> Path:
    """``rows`` in ``container`` under ``folder``; the path to give the CLI."""
    if container == "jsonl":
        path = folder / "in.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif container == "jsonl.gz":
        path = folder / "in.jsonl.gz"
        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    elif container == "json":
        path = folder / "in.json"
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    elif container == "parquet":
        path = folder / "in.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        import datasets

        path = folder / "in"
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def mixed_rows(dialect: str, role: Any) -> tuple[list[dict], list[int]]:
    """Rows with the bad role in the first row and the fourth (of six); their indexes."""
    rows = [good_row(dialect, f"r{i}") for i in range(6)]
    for i in (0, 3):
        rows[i] = bad_row(dialect, f"r{i}", role)
    return rows, [0, 3]


def _located(reject: dict, container: str, index: int) -> bool:
    if container.startswith("jsonl"):
        return reject.get("line") == index + 1
    return reject.get("row") == index


@pytest.mark.parametrize("role", ["list", "object", [["gpt"]], {"role": ["gpt"]}],
                         ids=["list", "object", "nested-list", "nested-object"])
def test_the_vote_passes_over_roles_that_are_not_text(role: Any) -> None:
    # The unit under the commands: a row with a list or an object as a role votes by its
    # text roles only, and `misfit` says nothing about it (its dialect rejects it).
    shape = SHAPES.get(role, role) if isinstance(role, str) else role
    hermes = bad_row("hermes", "a", shape)
    variant = bad_row("lf-sharegpt", "b", shape)
    assert row_kind(hermes) == "sharegpt-plain"
    assert row_kind(variant) == "sharegpt-variant"  # its other turns are user/assistant
    assert misfit(hermes, "sharegpt") is None
    config = CompressionConfig()
    assert detect([hermes] * 40, config).name == "sharegpt"
    assert detect([variant, good_row("hermes", "c")], config).name == "sharegpt-variant"


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_compress_rejects_the_rows_with_an_odd_role_and_writes_the_others(
        tmp_path: Path, dialect: str, container: str) -> None:
    shape = "list" if (DIALECTS.index(dialect) + CONTAINERS.index(container)) % 2 else "object"
    role = SHAPES[shape]
    if container == "save_to_disk":
        _all_rows_odd_in_an_arrow_dataset(tmp_path, dialect, role)
        return
    if container == "parquet":
        # An Arrow column has one type: every row carries the odd role, so every row is
        # a located reject; a second file of good rows in the same folder input is written.
        rows, bad = [arrow_bad_row(dialect, f"r{i}", role) for i in range(3)], [0, 1, 2]
        src_folder = tmp_path / "in"
        src_folder.mkdir()
        odd = write(rows, src_folder, container)
        odd.rename(src_folder / ("a_odd" + (".parquet" if container == "parquet" else "")))
        good = write([good_row(dialect, f"g{i}") for i in range(2)], src_folder, container)
        good.rename(src_folder / ("b_good" + (".parquet" if container == "parquet" else "")))
        out = tmp_path / "out"
        result = invoke_cli("compress", str(src_folder), "-o", str(out), *SMALL)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
        assert result.returncode == 1, result.stderr
        written = pq.read_table(out / "b_good.parquet").to_pylist()
        assert [r["id"] for r in written] == ["g0", "g1"]
        assert pq.read_table(out / "a_odd.parquet").num_rows == 0
        rejects = read_jsonl(tmp_path / "out_rejects.jsonl")
        assert [(Path(r["file"]).name, r["row"]) for r in rejects] == [
            ("a_odd.parquet", i) for i in bad]
        return
    rows, bad = mixed_rows(dialect, role)
    src = write(rows, tmp_path, container)
    out = tmp_path / "out.jsonl"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert result.returncode == 1, result.stderr
    assert [r["id"] for r in read_jsonl(out)] == ["r1", "r2", "r4", "r5"]
    rejects = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert len(rejects) == 2
    for reject, index in zip(rejects, bad, strict=True):
        assert _located(reject, container, index), reject
        assert repr(role) in reject["error"], reject  # the role, quoted as it is


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_arrow_dataset_whose_every_row_has_an_odd_role_is_all_located_rejects(
        tmp_path: Path, dialect: str) -> None:
    # The other shape than the matrix above gives the same dataset.
    shape = "object" if DIALECTS.index(dialect) % 2 else "list"
    _all_rows_odd_in_an_arrow_dataset(tmp_path, dialect, SHAPES[shape])


def _all_rows_odd_in_an_arrow_dataset(tmp_path: Path, dialect: str, role: Any) -> None:
    rows = [arrow_bad_row(dialect, f"r{i}", role) for i in range(3)]
    src = write(rows, tmp_path, "save_to_disk")
    out = tmp_path / "out"
    result = invoke_cli("compress", str(src), "-o", str(out), *SMALL)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert result.returncode == 1, result.stderr
    rejects = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert [r["row"] for r in rejects] == [0, 1, 2]


@pytest.mark.parametrize("container", ["jsonl", "json", "parquet"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_analyze_and_validate_name_the_rows_and_go_on(tmp_path: Path, dialect: str,
                                                      container: str) -> None:
    if container == "parquet":
        rows = [arrow_bad_row(dialect, "r0", SHAPES["list"])] * 2
        bad = [0, 1]
    else:
        rows, bad = mixed_rows(dialect, SHAPES["object" if dialect == "openai" else "list"])
    src = write(rows, tmp_path, container)
    analysis = tmp_path / "analysis.json"
    result = invoke_cli("analyze", str(src), "--json", str(analysis),
                        "--target-max-tokens", "150", "--summary-target-tokens", "10")
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    data = json.loads(analysis.read_text())
    assert data["rows_rejected"] == len(bad)
    assert data["rows"] == len(rows) - len(bad)
    assert result.returncode == (1 if len(bad) == len(rows) else 0), result.stderr
    check = invoke_cli("validate", str(src), "--target-max-tokens", "100000")
    assert "Traceback" not in check.stderr and "internal error" not in check.stderr
    assert check.returncode == 1, check.stderr
    located = [line for line in check.stdout.splitlines() if "unknown role" in line
               or "is [" in line or "is {" in line]
    assert len(located) == len(bad), check.stdout
    for line, index in zip(located, bad, strict=True):
        where = f":{index + 1}:" if container == "jsonl" else f" row {index}:"
        assert where in line, line


@pytest.mark.parametrize("container", ["jsonl", "parquet"])
def test_the_ray_engine_rejects_the_rows_and_leaves_no_shard_folders(tmp_path: Path,
                                                                      container: str) -> None:
    pytest.importorskip("ray", reason="needs the 'ray' extra")
    if container == "parquet":
        rows = [arrow_bad_row("openai", f"r{i}", SHAPES["object"]) for i in range(3)]
        good_ids: list[str] = []
    else:
        rows, _ = mixed_rows("hermes", SHAPES["list"])
        good_ids = ["r1", "r2", "r4", "r5"]
    src = write(rows, tmp_path, container)
    out = tmp_path / ("out." + ("parquet" if container == "parquet" else "jsonl"))
    result = run_cli("compress", str(src), "-o", str(out), *SMALL, "--engine", "ray",
                     "--ray-actors", "1", env={"RAY_ADDRESS": "local"})
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert result.returncode == 1, result.stderr
    written = (pq.read_table(out).to_pylist() if container == "parquet" else read_jsonl(out))
    assert [r["id"] for r in written] == good_ids
    rejects = read_jsonl(tmp_path / "out_rejects.jsonl")
    assert len(rejects) == len(rows) - len(good_ids)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([src.name, out.name, "out_metrics.json", "out_over_limit.jsonl",
                           "out_rejects.jsonl"]), left
