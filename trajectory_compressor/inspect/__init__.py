"""What predicts or inspects a run, without running it: the dry run (`analyze`, with the
strategies side by side, `strategies`, and the distill levels, `distill_preview`), the
time estimate (`estimate`, with its timed requests, `probe`), the check of a written
output (`validate`), and a finished run's rows over the limit re-planned for `report`
(`run_fixes`).

Nothing in `engine` imports this subpackage: it builds on the engine's compressor,
stream and re-planning, as `compress` runs them.
"""
