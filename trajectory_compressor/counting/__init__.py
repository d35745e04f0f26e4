"""Token counting: loading a tokenizer offline and counting turns in batches.
"""
