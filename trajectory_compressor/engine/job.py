"""`compress_dataset`: a whole compression job as one library call (what `compress` runs)."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.config import CompressionConfig
from ..core.errors import ConfigError
from ..core.summary import Summarizer
from ..core.terminal import inert
from ..counting.tokens import TokenCounter
from ..dialects import detect
from ..dialects.base import Dialect
from ..dialects.sharegpt import SHAREGPT
from ..formats.base import InputFile
from ..formats.hf_card import card_path, check_card
from ..formats.registry import discover_inputs
from ..summarizers import make_summarizer, resolve_summarizer
from .compressor import TrajectoryCompressor
from .layout import OutputLayout, plan_layout
from .local import RunResult, run_pipeline
from .lock import output_lock, probe
from .options import RunKeywords, RunOptions, run_options
from .paths import check_existing, check_writes, planned_writes, run_record

if TYPE_CHECKING:
    from typing_extensions import Unpack


def compress_dataset(
    input_spec: str,
    output: str | None = None,
    config: CompressionConfig | None = None,
    *,
    options: RunOptions | None = None,
    summarizer: Summarizer | None = None,
    dialect: Dialect | None = None,
    **keywords: Unpack[RunKeywords],
) -> RunResult:
    """Compress ``input_spec`` (a file, folder, glob or Hugging Face dataset) into its
    outputs and return what the run did. With ``quiet`` False, progress and notes go to
    stderr; either way each bad row is a ``warning: FILE:LINE: ...`` line on stderr (the
    first 20, then a pointer to the rejects file, which holds them all).

    How it runs is ``options`` (a `RunOptions`), or its fields as keyword arguments
    (``sample_percent=10, seed=7``), which replace those of ``options`` when both are
    given. ``output`` defaults to ``<stem>_compressed.<ext>`` beside a file input, or
    ``<name>_compressed/`` for a folder. ``split`` and ``data_files`` make ``input_spec``
    a Hugging Face dataset (as `datasets.load_dataset` understands them); ``resume``
    continues an interrupted run; ``summarizer`` overrides the one the config names;
    ``dialect`` overrides the one picked per file (`dialects.detect`, or the config's
    ``dataset.format``).

    Before anything is written, every path the run writes is checked against the inputs
    and each other (`ConfigError` on a clash, a device or FIFO, an unwritable folder), and
    existing outputs are replaced only by a rerun of the run that wrote them (same inputs,
    same settings, as their metrics file records) unless ``overwrite`` is True.
    """
    options = run_options(options, **keywords)
    # `auto` is settled first: the metrics, checkpoint and output checks record the
    # backend that runs. No config is what the command line does without a config file:
    # `auto` (an endpoint only when one is named, else extractive), never a silent openai.
    config = resolve_summarizer(config or CompressionConfig(summarizer="auto"))
    skipped: list[Path] = []
    inputs = discover_inputs(input_spec, split=options.split, data_files=options.data_files,
                             skipped=skipped)
    if skipped and not options.quiet:
        names = ", ".join(p.name for p in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
        print(inert(f"note: {len(skipped)} file{'s' * (len(skipped) != 1)} in {input_spec} "
                    f"passed over: side files of an earlier run ({names})"), file=sys.stderr)
    single = Path(input_spec).is_file() and inputs[0].stream is None
    layout = plan_layout(input_spec, inputs, output, config, single_file=single)
    if config.cache_enabled and config.cache_path is None:
        config = config.replace(cache_path=str(layout.summary_cache))
    check_writes(inputs, planned_writes(layout, config))
    card = card_path(layout.outputs.values())
    if card is not None and not options.overwrite:
        check_card(card)
    # Held until the outputs, sidecars and metrics are all committed: one run at a time.
    first_output = next(iter(layout.outputs.values()), layout.stem_path)
    with output_lock(layout.lock, first_output):
        probe(layout.neighbour_locks(), first_output)
        check_existing(inputs, layout, config,
                       run_record(inputs, layout, config, options.sample_percent, options.seed),
                       overwrite=options.overwrite, resume=options.resume)
        if options.summarizer_rows is not None:
            check_summarizer_rows(options, config, inputs, layout)
        if config.engine == "ray":
            from .ray import compress_on_ray  # imports ray: only when asked for

            return compress_on_ray(inputs, layout, config, options, dialect, summarizer,
                                   actors=config.ray_actors)
        counter = TokenCounter.load(config.tokenizer_name, config.trust_remote_code)
        if summarizer is None:
            summarizer = make_summarizer(config, counter)
        compressor = TrajectoryCompressor(config, summarizer, counter, dialect or SHAREGPT)
        chosen = dialect or partial(detect, config=config)
        return run_pipeline(compressor, inputs, layout, options, chosen)


def check_summarizer_rows(options: RunOptions, config: CompressionConfig,
                          inputs: list[InputFile], layout: OutputLayout) -> None:
    """`--emit-summarizer-rows` goes with windows output on the local engine, to a path
    that is neither an input nor an output, and replaces only a file of its own."""
    from .summarizer_rows import check_target

    assert options.summarizer_rows is not None
    path = Path(options.summarizer_rows)
    if config.output_mode != "windows":
        raise ConfigError("--emit-summarizer-rows goes with --output-mode windows (the "
                          "summaries it records are the windows' summaries)")
    if config.engine != "local":
        raise ConfigError("--emit-summarizer-rows runs on the local engine; with --engine "
                          "ray, run without it (or compress on the local engine to get the "
                          "summarizer rows)")
    taken = {p.resolve() for p in [*(i.path for i in inputs), *layout.outputs.values(),
                                    *(w.path for w in planned_writes(layout, config))]
             if isinstance(p, Path)}
    if path.resolve() in taken:
        raise ConfigError(f"--emit-summarizer-rows {path} is an input or another output of "
                          "this run; name another file")
    check_target(path, options.overwrite, options.resume and layout.checkpoint.exists())
