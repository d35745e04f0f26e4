"""Row ↔ conversation: the only code that knows how a row spells its turns.
"""
