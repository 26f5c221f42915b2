/**
 * Training engines (DESIGN §5): one run config, three engines (`engine` in *.run.json). What an engine cannot do is a
 * table of data here, read by both validators: the host's (through the run-config schema's refine) and the trainer's
 * (the table is published in the schema as `x-engine-limits`, which config.py reads). A limit names the key, the
 * value, and the engines that can; the message a user gets says all three.
 *
 * A new engine: add its name to ENGINES, add it to `engines` of every limit it lifts, and add the limits it alone has.
 */

export const ENGINES = ['builtin', 'trl', 'verl'] as const;
export type Engine = (typeof ENGINES)[number];

/** A config value some engines cannot train with. `when` holds when the key's value is one of `equals`, is above
 * `above`, or (`present`) is set at all. */
export interface EngineLimit {
  key: string;
  when: { equals?: readonly (string | number | boolean)[]; above?: number; present?: true };
  /** The engines that can. */
  engines: readonly Engine[];
  why: string;
}

export const ENGINE_LIMITS: readonly EngineLimit[] = [
  {
    key: 'model.kind',
    when: { equals: ['tiny'] },
    engines: ['builtin'],
    why: 'TRL and veRL train Hugging Face models: model.kind "hf", with model.random_init for a random one',
  },
  {
    key: 'model.init',
    when: { present: true },
    engines: ['builtin'],
    why: 'model.init is a checkpoint of the builtin engine',
  },
  {
    key: 'model.random_init',
    when: { equals: [true] },
    engines: ['builtin', 'trl'],
    why: 'a model built from config.json with random weights',
  },
  {
    key: 'train.supervised_warmup.steps',
    when: { above: 0 },
    engines: ['builtin'],
    why: 'the supervised warm start is the builtin engine’s (for the tiny model)',
  },
  {
    key: 'algorithm.name',
    when: { equals: ['ppo'] },
    engines: ['builtin', 'verl'],
    why: 'PPO trains a critic, which TRL’s GRPOTrainer has not',
  },
  {
    key: 'algorithm.name',
    when: { equals: ['reinforce++'] },
    engines: ['builtin', 'verl'],
    why: 'TRL 1.16’s GRPOTrainer has no REINFORCE++ advantage',
  },
  {
    key: 'algorithm.preset',
    when: { equals: ['search-r1-ppo'] },
    engines: ['builtin', 'verl'],
    why: 'PPO trains a critic, which TRL’s GRPOTrainer has not',
  },
  {
    key: 'algorithm.kl_in_reward',
    when: { equals: [true] },
    engines: ['builtin', 'verl'],
    why: 'TRL puts the KL term in the loss only',
  },
  {
    key: 'algorithm.skip_zero_std_groups',
    when: { equals: [true] },
    engines: ['builtin'],
    why: 'the builtin trainer’s update; veRL’s algorithm.filter_groups (DAPO) resamples instead',
  },
  {
    key: 'algorithm.mask_advantages',
    when: { equals: [true] },
    engines: ['builtin', 'verl'],
    why: 'TRL’s advantage is one number per sequence, over the whole completion',
  },
  {
    key: 'algorithm.clip_ratio_c',
    when: { present: true },
    engines: ['builtin', 'verl'],
    why: 'TRL’s loss has no dual clip',
  },
  {
    key: 'algorithm.kl_estimator',
    when: { equals: ['k1', 'k2'] },
    engines: ['builtin', 'verl'],
    why: 'TRL’s KL term is k3 (veRL’s low_var_kl)',
  },
  {
    key: 'algorithm.loss_agg_mode',
    when: { equals: ['seq-mean-token-sum'] },
    engines: ['builtin', 'verl'],
    why: 'TRL’s loss types are token-mean (dapo), seq-mean-token-mean (grpo) and seq-mean-token-sum-norm (dr_grpo)',
  },
  {
    key: 'data.hops_mix',
    when: { present: true },
    engines: ['builtin'],
    why: 'the per-hops batch mix is the builtin engine’s data sampler',
  },
  {
    key: 'train.stages',
    when: { present: true },
    engines: ['builtin'],
    why: 'a curriculum restarts the builtin engine’s reference, optimizer and sampler between stages',
  },
  {
    key: 'devices',
    when: { above: 1 },
    engines: ['trl', 'verl'],
    why: 'the builtin engine is one process on one device',
  },
  { key: 'trl', when: { present: true }, engines: ['trl'], why: 'the trl section configures the trl engine' },
  { key: 'verl', when: { present: true }, engines: ['verl'], why: 'the verl section configures the verl engine' },
];

function at(config: unknown, key: string): unknown {
  let v: unknown = config;
  for (const k of key.split('.'))
    v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined;
  return v;
}

function applies(limit: EngineLimit, value: unknown): boolean {
  if (value === undefined) return false;
  const w = limit.when;
  if (w.present) return true;
  if (w.equals) return w.equals.includes(value as string | number | boolean);
  return w.above !== undefined && typeof value === 'number' && value > w.above;
}

/** The limits a config runs into with its engine, as key-path issues: `algorithm.name: "ppo" is not supported by
 * engine "trl" (…); engines that can: "builtin", "verl"`. */
export function engineIssues(config: unknown): { path: string; message: string }[] {
  const engine = (at(config, 'engine') as Engine | undefined) ?? 'builtin';
  const out: { path: string; message: string }[] = [];
  for (const limit of ENGINE_LIMITS) {
    const value = at(config, limit.key);
    if (limit.engines.includes(engine) || !applies(limit, value)) continue;
    const shown = limit.when.present && typeof value === 'object' ? 'this section' : JSON.stringify(value);
    out.push({
      path: limit.key,
      message: `${shown} is not supported by engine "${engine}" (${limit.why}); engines that can: ${limit.engines.map((e) => `"${e}"`).join(', ')}`,
    });
  }
  return out;
}
