"""What runs a job: the per-row compressor, the input stream, the streaming local
engine, its writer, checkpoints, output layout and progress; `compress_dataset`. Also
what the run itself does at its end for "what would fix it": its rows over the limit
re-planned under the remedies (`replan`, over `projection`) and the table stored with the
run (`stored_fixes`). What predicts or inspects a run lives in `inspect`.
"""
