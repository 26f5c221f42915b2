"""Engines other than the builtin trainer (DESIGN §5): each one plays the same rollout protocol (rollout.py) and
writes the same run directory (run_writer.py). An engine's package imports its engine's library and runs only in
that engine's Python environment; nothing in the trainer package imports an engine."""
