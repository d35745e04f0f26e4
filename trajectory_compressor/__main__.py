"""``python -m trajectory_compressor``."""

from .cli import main

main()
