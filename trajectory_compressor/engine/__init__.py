"""What runs a job: the per-row compressor, the input stream, the streaming local
engine, its writer, checkpoints, output layout and progress; `compress_dataset`.
"""
