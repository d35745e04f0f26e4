"""`RunWriter`'s cut before and between files (issue 26, item 5: survivors of the
whole-module mutation run of engine/writer.py).

Expected values from the module's contract: a checkpoint records the cut (the input
file, the lines of it handled, the sampler's draws), a fresh run's cut is the start of
the first file, a finished file moves the cut to the start of the next.
"""

from __future__ import annotations

from tests.test_writer_routing import make_writer, record, result
from trajectory_compressor.engine.checkpoint import Checkpoint
from trajectory_compressor.formats.base import InputFile

ROW = {"id": "a", "conversations": [{"from": "human", "value": "hi"}]}


def test_a_fresh_run_checkpoints_the_start_of_its_first_file(tmp_path):
    writer = make_writer(tmp_path, open_file=False)
    assert writer.sink is None
    writer.checkpoint()
    saved = Checkpoint.load(writer.layout.checkpoint)
    assert (saved.file_index, saved.skip, saved.draws, saved.output) == (0, 0, 0, None)


def test_the_file_opened_is_the_one_the_cut_names(tmp_path):
    writer = make_writer(tmp_path, open_file=False)
    (tmp_path / "in2.jsonl").write_text("")
    sink = writer.open_file(1, InputFile(tmp_path / "in2.jsonl", "jsonl"))
    assert sink is writer.sink and sink is not None
    writer.write(record(4, ROW), result(ROW), draws=6)
    writer.checkpoint()
    saved = Checkpoint.load(writer.layout.checkpoint)
    assert (saved.file_index, saved.skip, saved.draws) == (1, 4, 6)


def test_a_finished_file_is_checkpointed_when_one_is_due(tmp_path):
    """With a checkpoint due at every step, finishing the file records the next file's
    start."""
    writer = make_writer(tmp_path, checkpoint_seconds=1e-9)
    writer.write(record(1, ROW), result(ROW), draws=2)
    writer.finish_file(draws=3)
    saved = Checkpoint.load(writer.layout.checkpoint)
    assert (saved.file_index, saved.skip, saved.draws) == (1, 0, 3)
