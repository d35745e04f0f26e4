"""The pure core: the conversation model, planning, assembly, metrics, summaries'
rules, the extractive summarizer, deadlines, redaction and reasons. No file, network or
terminal I/O; imports nothing from the rest of the package.
"""
