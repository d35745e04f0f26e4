"""Where a run's outputs go: the compressed data and its sidecar files (§7)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.config import CompressionConfig
from ..core.errors import ConfigError
from ..formats.base import InputFile
from ..formats.links import resolve
from ..formats.registry import (
    file_format,
    file_stem,
    file_suffix,
    output_container,
    output_extension,
)

# Output suffixes whose sidecars were once named after the whole file name
# (``a_compressed.json_metrics.json``): such names are still found (`sidecar_stem`).
_LEGACY_KEEP_SUFFIX = (".json",)


@dataclass(frozen=True)
class OutputLayout:
    """The output file of each input file, and the sidecars beside the output."""

    outputs: dict[Path, Path]  # input path -> output path
    formats: dict[Path, str]  # input path -> output format
    stem_path: Path  # <folder>/<output stem>: sidecars are <stem_path>_metrics.json, ...

    @property
    def metrics(self) -> Path:
        return self.stem_path.with_name(self.stem_path.name + "_metrics.json")

    @property
    def over_limit(self) -> Path:
        return self.stem_path.with_name(self.stem_path.name + "_over_limit.jsonl")

    @property
    def rejects(self) -> Path:
        return self.stem_path.with_name(self.stem_path.name + "_rejects.jsonl")

    @property
    def summary_cache(self) -> Path:
        """The default SQLite cache of LLM summaries (reused by reruns into this output)."""
        return self.stem_path.with_name(self.stem_path.name + "_summary_cache.sqlite")

    @property
    def checkpoint(self) -> Path:
        return self.stem_path.with_name(f".{self.stem_path.name}.checkpoint.json")

    @property
    def lock(self) -> Path:
        """Held by the run writing these outputs: one run per output at a time. Named
        from the resolved path, so runs naming one folder by two spellings (a symbolic
        link) share it."""
        return _lock_of(resolve(self.stem_path, "the output"))

    def neighbour_locks(self) -> list[Path]:
        """The locks of other runs that may write the files this run writes: for a folder
        output, the runs of single files inside it; for a file output, a run writing its
        whole folder. (A folder run and a file run take different locks.)"""
        outputs = list(self.outputs.values())
        if outputs and all(out.parent == self.stem_path for out in outputs):
            folder = self.stem_path.resolve()
            return sorted(folder.glob(".*.lock")) if folder.is_dir() else []
        folders = {out.parent.resolve() for out in outputs}
        return sorted(_lock_of(folder) for folder in folders if folder.name)

    @property
    def sidecars(self) -> list[Path]:
        return [self.metrics, self.over_limit, self.rejects]


def _lock_of(stem_path: Path) -> Path:
    return stem_path.with_name(f".{stem_path.name}.lock")


def sidecar_stem(output: Path, folder: bool) -> Path:
    """``<stem_path>`` of an output: the folder itself, or the file without its extension,
    for every container (``a_compressed.json`` and ``a_compressed.jsonl`` alike give
    ``a_compressed_metrics.json``, ...).

    A ``.json`` output's sidecars were once named after the whole file name
    (``a_compressed.json_metrics.json``); when only such sidecars (or such a checkpoint)
    lie beside it, that older stem is returned, so that `report`, `validate` and
    ``--resume`` still find a run written before.
    """
    if folder:
        return output
    stem = output.with_name(file_stem(output))
    suffix = file_suffix(output)
    if suffix is not None and suffix.lower() in _LEGACY_KEEP_SUFFIX \
            and not _has_sidecars(stem) and _has_sidecars(output):
        return output
    return stem


def _has_sidecars(stem_path: Path) -> bool:
    layout = OutputLayout({}, {}, stem_path)
    return any(p.exists() for p in (*layout.sidecars, layout.checkpoint))


def finished_layout(output: Path) -> OutputLayout:
    """The sidecar names of a finished run from its output file or folder (for `report`)."""
    return OutputLayout({}, {}, sidecar_stem(output, folder=output.is_dir()))


def plan_layout(
    input_spec: str,
    inputs: list[InputFile],
    output: str | None,
    config: CompressionConfig,
    single_file: bool,
) -> OutputLayout:
    """Output paths for ``inputs``: a file for a file input, a folder for a folder or glob."""
    suffix = config.output_suffix
    if output is None and not suffix:
        raise ConfigError("output.output_suffix is empty, so the default output would be the "
                          "input itself; give -o OUTPUT or a suffix")
    if single_file:
        source = inputs[0]
        fmt = output_container(source, config.output_format)
        if output is None:
            out = source.path.with_name(source.stem + suffix + output_extension(source, fmt))
        else:
            out = Path(output)
            if out.is_dir():
                raise ConfigError(f"output {output} is a folder; give a file name for a file input")
            named = file_format(out)
            if config.output_format == "same" and named is not None:
                fmt = named  # `-o data.parquet` asks for Parquet
            elif named is not None and named.split(".")[0] != fmt.split(".")[0]:
                raise ConfigError(f"output {output} is named .{named} but the output format "
                                  f"is {fmt}; rename it or change --output-format")
        return OutputLayout({source.path: out}, {source.path: fmt},
                            sidecar_stem(out, folder=False))
    spec_path = Path(input_spec)
    if spec_path.is_dir():
        base = spec_path
    elif inputs[0].stream is not None:
        base = Path(input_spec.strip("/").replace("/", "__"))  # a hub name: here, flattened
    else:
        base = inputs[0].path.parent
    folder = Path(output) if output is not None else base.with_name(base.name + suffix)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"output {folder} is a file; give a folder for a folder input")
    if folder.resolve() == base.resolve():
        raise ConfigError(f"output folder {folder} is the input folder")
    outputs: dict[Path, Path] = {}
    formats: dict[Path, str] = {}
    for source in inputs:
        fmt = output_container(source, config.output_format)
        outputs[source.path] = folder / (source.stem + output_extension(source, fmt))
        formats[source.path] = fmt
    if len(set(outputs.values())) != len(outputs):
        raise ConfigError(f"two inputs in {input_spec} would write the same output file")
    return OutputLayout(outputs, formats, sidecar_stem(folder, folder=True))
