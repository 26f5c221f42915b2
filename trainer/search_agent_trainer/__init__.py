"""Search Agent Studio's trainer: PPO / GRPO / REINFORCE++ over multi-turn search rollouts, with the retrieved tokens
masked out of the loss (Search-R1, arXiv 2503.09516). One file per concept:

  config.py        the run config, validated against the schema the extension uses (schema.py)
  data.py          datasets, prompts, the resumable sampler
  policy.py        the policy (tiny or Hugging Face, optional LoRA), tokenizer, value head, reference
  tiny.py          the built-in tiny causal transformer and tokenizer
  env_client.py    /retrieve and /reward on the env server
  generation.py    sampling turns from the policy: batched, KV-cached, memory-bounded, stops as a parameter
  rollout.py       the multi-turn protocol with per-token roles (the one implementation every engine calls)
  dialect.py       what a dialect is (Action, Call, Spans, the Dialect protocol); toolcall.py the tool-call one
  batch.py         trajectories as padded tensors; the loss mask
  advantages.py    GRPO, Dr. GRPO, REINFORCE++, GAE
  losses.py        clipped surrogate, KL estimators, entropy, value loss, aggregation modes
  run_writer.py    the run directory and events
  reward.py        trajectories scored by /reward
  metrics.py       every engine's rollout and held-out (val/*) metrics
  versions.py      the software versions run.json records
  recorder.py      the rollout recorder; record/ the records, built the one engine-neutral way
  checkpoint.py    checkpoints and resume
  numerics.py      the compute precision of model.dtype "fastest", measured at the start of a run
  pace.py          the warm start's pace against the reference machine's
  cpu_env.py       what every trainer process sets before it computes on a CPU (MKL's reproducibility, oneDNN's caches)
  run.py           the run every engine shares (data, prompts, rollouts, scores, evaluation, lifecycle)
  train.py         the builtin engine: the loop; engines/ the TRL and veRL engines
  benchmark.py     throughput on a GPU (and a tiny CPU run): our rollout vs Hugging Face generate, a step's phases
"""

__version__ = "0.1.0"
