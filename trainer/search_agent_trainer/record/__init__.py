"""Recording runs we did not launch (docs/engines.md, "Your own run"): a user's own TRL script or veRL job writes our
run directory (DESIGN §4.2–4.5) with one changed line, and whatever their rollout loop, every record is built the one
engine-neutral way (tokens.py), as our own engines build theirs.

  tokens.py   a rollout record from the token arrays an engine trained on (ids, its mask, roles, log-probs,
              advantages, values), through run_writer.rollout_record: shared with the veRL engine's recorder
              and a trajectory's own arrays before any training pass (an evaluation's records, a fork's)
  batch.py    the builtin engine's step records from the batch it trained on (batch.py's SequenceBatch): the
              numbers and where each is scored, the in-run checks' flags, the records' builder
  names.py    TRL's metric names as veRL and our dashboard name them (the TRL engine's too)
  trl.py      `RecordingGRPOTrainer` (TRL's GRPOTrainer that records), `record(trainer)` for a trainer already built
  verl.py     `python -m search_agent_trainer.record.verl <Hydra overrides>`: veRL's main_ppo with our recorder
"""
