"""Containers (JSON Lines, Parquet, `datasets`): one module each, reader and writer
together, and the registry table that names them.
"""
