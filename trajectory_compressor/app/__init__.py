"""The command line and every piece of text for a person: commands, the run summary,
the dry run, the report and the timeline.
"""
