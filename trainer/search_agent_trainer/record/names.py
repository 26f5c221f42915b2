"""TRL's metric names that veRL and our dashboard name otherwise — one table, read by the TRL engine
(engines/trl/engine.py) and by a user's own TRL script recorded (trl.py). TRL's own names are kept too, as trl/<name>."""

TRL_NAMES = {
    "entropy": "actor/entropy",
    "kl": "actor/kl_loss",
    "clip_ratio/region_mean": "actor/pg_clipfrac",
    "clip_ratio/low_mean": "actor/pg_clipfrac_low",
    "clip_ratio/high_mean": "actor/pg_clipfrac_high",
    "grad_norm": "actor/grad_norm",
    "learning_rate": "actor/lr",
    "policy_loss": "actor/pg_loss",
}

# A user's script has none of our engine's own reward and length metrics: TRL's stand for them.
TRL_SCRIPT_NAMES = {
    **TRL_NAMES,
    "reward": "critic/score/mean",
    "reward_std": "critic/score/std",
    "frac_reward_zero_std": "reward/frac_zero_std_groups",
    "completions/mean_length": "response_length/mean",
}
