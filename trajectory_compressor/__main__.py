"""``python -m trajectory_compressor``."""

from .app.cli import main

main()
