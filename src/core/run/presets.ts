/**
 * `algorithm.preset`: Search-R1's training settings, declared once here (the trainer reads them from its schema copy,
 * `x-presets`), and `resolveRunConfig`, a config as the trainer completes it (the preset under the file's keys, then the
 * schema's defaults), which the memory planner reads.
 *
 * Read from PeterGriffinJin/Search-R1 at a14dc3a: train_ppo.sh and train_grpo.sh over its
 * verl/trainer/config/ppo_trainer.yaml, and the rollout loop search_r1/llm_agent/generation.py. docs/trainer.md
 * ("Presets") has each value's source line and what still differs.
 * - Warm-ups are veRL's `lr_warmup_steps_ratio` × train.steps (`{ ratio }`: int(ratio × steps), as veRL rounds).
 * - Mini-batches are 256 sequences. train_grpo.sh sets ppo_mini_batch_size=256 with n_agent=5 and rollout.n=1: a
 *   prompt's 5 samples are the batch repeated before the rollout (ray_trainer.py:702) and fsdp_workers.py:100 scales
 *   the mini-batch by rollout.n (1), not n_agent, so a step's 512 × 5 = 2,560 sequences make 10 optimizer steps
 *   (PPO: 512 sequences, 2 steps).
 * - vLLM samples at top_p 0.95 (ppo_trainer.yaml's rollout.top_p) with an entropy bonus of 0.001 (actor.entropy_coeff).
 * - The rollout's shape: 512 prompts a step (data.train_batch_size), turns of 500 tokens (data.max_response_length is
 *   per generation call), observations cut to 500 (max_obs_length), the response cut to 4,096 tokens (generation.py's
 *   _update_right_side cuts it to max_prompt_length), prompts of at most 2,048 (max_start_length: we skip longer
 *   ones, Search-R1 cuts their start), 4 turns (scripts/nq_hotpotqa/v0.2, the runs logged with the first paper; the
 *   root scripts' quick start says 2) and the forced final turn.
 * - The critic is a separate model there (lr 1e-5, warm-up ratio 0.015, grad clip 1.0); ours is the value head, with
 *   its own lr, warm-up and clip.
 */
import type { Node } from '../schema/schema';
import { type RunConfig, RunConfigSchema } from './config';

export type PresetValue = string | number | boolean | { ratio: number };

const SEARCH_R1_COMMON: Record<string, PresetValue> = {
  'rollout.batch_size': 512,
  'rollout.max_turns': 4,
  'rollout.max_turn_tokens': 500,
  'rollout.max_obs_length': 500,
  'rollout.max_response_length': 4096,
  'rollout.max_prompt_length': 2048,
  'rollout.temperature': 1.0,
  'rollout.top_p': 0.95,
  'algorithm.gamma': 1.0,
  'algorithm.clip_ratio_low': 0.2,
  'algorithm.clip_ratio_high': 0.2,
  'algorithm.kl_coef': 0.001,
  'algorithm.entropy_coef': 0.001,
  'algorithm.loss_agg_mode': 'token-mean',
  'algorithm.loss_masking': true,
  'algorithm.mask_advantages': false,
  'optim.lr': 1e-6,
  'optim.grad_clip': 1.0,
  'optim.ppo_epochs': 1,
  'optim.mini_batch_size': 256,
};

export const PRESETS: Record<'search-r1-ppo' | 'search-r1-grpo', Record<string, PresetValue>> = {
  'search-r1-ppo': {
    ...SEARCH_R1_COMMON,
    'rollout.n': 1,
    'algorithm.name': 'ppo',
    'algorithm.kl_estimator': 'k1',
    'algorithm.kl_in_reward': true,
    'algorithm.lam': 1.0,
    'algorithm.value_clip': 0.5,
    'optim.critic_lr': 1e-5,
    'optim.warmup_steps': { ratio: 0.285 },
    'optim.critic_warmup_steps': { ratio: 0.015 },
  },
  'search-r1-grpo': {
    ...SEARCH_R1_COMMON,
    'rollout.n': 5,
    'algorithm.name': 'grpo',
    'algorithm.kl_estimator': 'k3',
    'algorithm.kl_in_reward': false,
    'algorithm.norm_adv_by_std': true,
    'optim.warmup_steps': { ratio: 0.285 },
  },
};

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/** `raw` with its preset's values under it (the keys `raw` sets win); as the trainer's config.apply_preset. */
export function applyPreset(raw: Obj, steps: number): Obj {
  const name = raw.algorithm?.preset as keyof typeof PRESETS | undefined;
  if (!name || !PRESETS[name]) return raw;
  const out: Obj = Object.fromEntries(Object.entries(raw).map(([k, v]) => [k, isObj(v) ? { ...v } : v]));
  for (const [dotted, value] of Object.entries(PRESETS[name])) {
    const [section, key] = dotted.split('.') as [string, string];
    const sec = (out[section] ??= {});
    if (!(key in sec)) sec[key] = typeof value === 'object' ? Math.trunc(value.ratio * steps) : value;
  }
  return out;
}

/** Sections filled in only when the config has them (as the trainer's schema.OPT_IN_SECTIONS). */
const OPT_IN = new Set(['lora', 'test', 'trl', 'verl', 'hops_mix']);

function withDefaults(node: Node & { default?: unknown }, value: unknown): unknown {
  if (node.t !== 'object') return value;
  const out: Obj = isObj(value) ? { ...value } : {};
  for (const [k, sub] of Object.entries(node.props) as [string, Node & { default?: unknown }][]) {
    if (k in out) out[k] = withDefaults(sub, out[k]);
    else if (sub.default !== undefined) out[k] = structuredClone(sub.default);
    else if (sub.t === 'object' && !OPT_IN.has(k)) out[k] = withDefaults(sub, {});
  }
  return out;
}

/** A run config as the trainer completes it: train.steps from its stages, the preset, then the schema's defaults. */
export function resolveRunConfig(config: RunConfig): RunConfig {
  const raw = structuredClone(config) as Obj;
  const stages = raw.train?.stages as { steps: number }[] | undefined;
  if (stages?.length) raw.train = { ...raw.train, steps: stages.reduce((a, s) => a + s.steps, 0) };
  const train = (RunConfigSchema.node as Extract<Node, { t: 'object' }>).props.train as Extract<Node, { t: 'object' }>;
  const steps =
    (raw.train?.steps as number | undefined) ?? ((train.props.steps as { default?: number }).default as number);
  return withDefaults(RunConfigSchema.node, applyPreset(raw, steps)) as RunConfig;
}
