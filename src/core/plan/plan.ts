/**
 * The memory plan of a run before it starts (`search-agent-studio plan`, the check `train` makes, "New Training Run…"
 * and `doctor --config`): from the model's config.json (no weights) and the run config, the bytes of each part on
 * each device (weights, gradients, optimizer states, reference, activations, logits, KV cache, …), the verdict, and
 * for a run that does not fit the cheapest changes that make it fit, each checked by planning it again.
 *
 * Engines plan themselves (ENGINE_PLANNERS): the builtin engine's parts are builtin.ts's; an engine that shards,
 * offloads or runs its own rollout engine (veRL, TRL) adds a planner that returns its devices' parts, built from the
 * same part functions (parts.ts).
 */
import { resolveConfigPath } from '../paths';
import type { RunConfig } from '../run/config';
import type { Engine } from '../run/engines';
import { resolveRunConfig } from '../run/presets';
import { type EnginePlan, type Part, type PlanContext, builtinPlan } from './builtin';
import { ModelShapeError, type ModelShape, paramCounts, readModelShape } from './model';

/** The share of a device's memory a plan may fill: the CUDA context and the caching allocator's fragmentation take
 * the rest. */
export const USABLE_SHARE = 0.95;
export const DEFAULT_GPU_MEMORY = 80 * 2 ** 30;

export const ENGINE_PLANNERS: Partial<Record<Engine, (ctx: PlanContext) => EnginePlan>> = {
  builtin: builtinPlan,
};

export class PlanError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PlanError';
  }
}

export interface PlanOptions {
  gpuMemoryBytes?: number;
  gpus?: number;
  device?: 'cuda' | 'cpu';
}

export interface DevicePlan {
  total_bytes: number;
  parts: Record<string, number>;
  /** Each phase's bytes: 'rollout' (generation) and 'update' (the optimizer's forward and backward). */
  phases: Record<string, number>;
  what: Record<string, string>;
}

export interface MemoryPlan {
  fits: boolean;
  gpu_memory_bytes: number;
  usable_bytes: number;
  devices: DevicePlan[];
  suggestions: string[];
  engine: string;
  model: { path: string; model_type: string; parameters: number; hidden: number; layers: number; vocab: number };
  summary: string;
  notes: string[];
}

/** The memory plan of a loaded run config (its model.path resolved against the config's directory). */
export function planRun(loaded: { config: RunConfig; base: string }, options: PlanOptions = {}): MemoryPlan {
  const config = resolveRunConfig(loaded.config);
  if (config.model.kind !== 'hf') throw new PlanError('model.kind "tiny": the built-in tiny policy needs a few MB; the memory plan is for Hugging Face models (model.kind "hf")');
  if (!config.model.path) throw new PlanError('model.path: is required when model.kind is "hf"');
  const path = resolveConfigPath(config.model.path, loaded.base);
  let shape: ModelShape;
  try {
    shape = readModelShape(path);
  } catch (e) {
    if (e instanceof ModelShapeError) throw new PlanError(e.message);
    throw e;
  }
  return planShape(config, shape, path, options);
}

/** The plan of a resolved config for a model of `shape` (the model at `path`). */
export function planShape(config: RunConfig, shape: ModelShape, path: string, options: PlanOptions = {}): MemoryPlan {
  const plan = planOnce(config, shape, path, options);
  if (!plan.fits) plan.suggestions = suggestions(config, shape, path, options);
  return plan;
}

function planOnce(config: RunConfig, shape: ModelShape, path: string, options: PlanOptions): MemoryPlan {
  const engine = config.engine ?? 'builtin';
  const planner = ENGINE_PLANNERS[engine];
  if (!planner) throw new PlanError(`engine "${engine}": its memory is not planned yet (the planner knows the builtin engine's; veRL's and TRL's parts are issue 45)`);
  const gpu = options.gpuMemoryBytes ?? DEFAULT_GPU_MEMORY;
  const ctx: PlanContext = { config, shape, gpuMemoryBytes: gpu, gpus: options.gpus ?? 1, device: options.device ?? 'cuda' };
  const e = planner(ctx);
  const usable = Math.floor(USABLE_SHARE * gpu);
  const devices = e.devices.map(devicePlan);
  return {
    fits: devices.every((d) => d.total_bytes <= usable),
    gpu_memory_bytes: gpu,
    usable_bytes: usable,
    devices,
    suggestions: [],
    engine,
    model: { path, model_type: shape.modelType, parameters: paramCounts(shape).total, hidden: shape.hidden, layers: shape.layers, vocab: shape.vocab },
    summary: e.summary,
    notes: e.notes,
  };
}

function devicePlan(parts: Part[]): DevicePlan {
  const phaseTotal = (phase: string) => parts.filter((p) => p.phase === 'all' || p.phase === phase).reduce((a, p) => a + p.bytes, 0);
  const phases = { rollout: phaseTotal('rollout'), update: phaseTotal('update') };
  return {
    total_bytes: Math.max(phases.rollout, phases.update),
    parts: Object.fromEntries(parts.map((p) => [p.name, p.bytes])),
    phases,
    what: Object.fromEntries(parts.map((p) => [p.name, `${p.what}${p.phase === 'all' ? '' : ` (${p.phase})`}`])),
  };
}

/** A change to a config that may make it fit: what it sets, and the config with it. */
interface Change {
  says: string;
  apply: (c: RunConfig) => RunConfig | undefined;
}

function changes(config: RunConfig, shape: ModelShape): Change[] {
  const out: Change[] = [];
  const clone = (c: RunConfig) => structuredClone(c) as RunConfig;
  if (config.model.gradient_checkpointing === false) {
    out.push({ says: 'model.gradient_checkpointing: true', apply: (c) => ({ ...clone(c), model: { ...c.model, gradient_checkpointing: true } }) });
  }
  const micro = config.optim!.micro_batch_size!;
  for (let m = micro >> 1; m >= 1; m >>= 1) {
    out.push({ says: `optim.micro_batch_size: ${m}`, apply: (c) => ({ ...clone(c), optim: { ...c.optim, micro_batch_size: m, mini_batch_size: Math.max(m, c.optim!.mini_batch_size!) } }) });
  }
  const mbt = config.rollout!.max_batch_tokens;
  if (mbt !== undefined) {
    for (const f of [2, 4, 8]) {
      const v = Math.max(1, Math.floor(mbt / f));
      out.push({ says: `rollout.max_batch_tokens: ${v} (fewer rows a wave)`, apply: (c) => ({ ...clone(c), rollout: { ...c.rollout, max_batch_tokens: v } }) });
    }
    out.push({ says: 'rollout.max_batch_tokens left out (the trainer sizes the KV cache to what is left)', apply: (c) => {
      const x = clone(c);
      delete x.rollout!.max_batch_tokens;
      return x;
    } });
  }
  if (!config.model.lora) {
    out.push({ says: 'model.lora: {"r": 16, "alpha": 32} (LoRA instead of a full fine-tune)', apply: (c) => ({ ...clone(c), model: { ...c.model, lora: { r: 16, alpha: 32, dropout: 0, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj'] } } }) });
  }
  void shape;
  return out;
}

/** The cheapest changes that make the run fit, each checked by planning again: single changes in the order of
 * `changes` (what costs the least first), then pairs; at most three. */
function suggestions(config: RunConfig, shape: ModelShape, path: string, options: PlanOptions): string[] {
  const all = changes(config, shape);
  const found: string[] = [];
  const gib = (n: number) => `${(n / 2 ** 30).toFixed(1)} GiB`;
  const tryOne = (cs: Change[]) => {
    let c: RunConfig | undefined = config;
    for (const ch of cs) c = c && ch.apply(c);
    if (!c) return;
    const p = planOnce(c, shape, path, options);
    if (p.fits) found.push(`${cs.map((x) => x.says).join(' and ')} → ${gib(Math.max(...p.devices.map((d) => d.total_bytes)))} of ${gib(p.gpu_memory_bytes)}`);
  };
  // the smallest micro-batch that fits is the one to name (not every smaller one)
  const isMicro = (c: Change) => c.says.startsWith('optim.micro_batch_size');
  let microFound = false;
  for (const ch of all) {
    if (found.length >= 3) break;
    if (isMicro(ch) && microFound) continue;
    const before = found.length;
    tryOne([ch]);
    if (isMicro(ch) && found.length > before) microFound = true;
  }
  if (!found.length) {
    for (let i = 0; i < all.length && found.length < 3; i++) {
      for (let j = i + 1; j < all.length && found.length < 3; j++) {
        if (isMicro(all[i]!) && isMicro(all[j]!)) continue;
        const before = found.length;
        tryOne([all[i]!, all[j]!]);
        if (found.length > before && isMicro(all[j]!)) break;
      }
    }
  }
  if (!found.length) found.push(`nothing the builtin engine can change fits ${gib(options.gpuMemoryBytes ?? DEFAULT_GPU_MEMORY)}: a smaller model, shorter sequences (rollout.max_prompt_length + max_response_length), or an engine that shards and offloads (verl)`);
  return found;
}

/** Parses a memory size: `80GiB`, `80GB`, `80G` (GiB), `79.6 GiB`, `512MiB`, or bytes. */
export function parseBytes(text: string): number {
  const m = /^\s*([\d.]+)\s*([kmgt]?)(i?b?)\s*$/i.exec(text);
  if (!m || !Number.isFinite(Number(m[1]))) throw new PlanError(`--gpu-memory: expected a size such as 80GiB, 80GB or 85899345920, got ${JSON.stringify(text)}`);
  const unit = m[2]!.toLowerCase();
  if (!unit) return Math.round(Number(m[1]));
  const binary = m[3]!.toLowerCase() === 'ib' || m[3] === '';
  const power = { k: 1, m: 2, g: 3, t: 4 }[unit as 'k' | 'm' | 'g' | 't'];
  return Math.round(Number(m[1]) * (binary ? 1024 : 1000) ** power);
}

/** The plan as a table, its verdict and the suggestions. */
export function formatPlan(plan: MemoryPlan, title: string): string {
  const gib = (n: number) => (n / 2 ** 30).toFixed(2).padStart(8);
  const lines = [
    `memory plan: ${title}`,
    `  model: ${plan.model.model_type}, ${(plan.model.parameters / 1e9).toFixed(2)} B parameters (${plan.model.layers} layers × ${plan.model.hidden}, vocabulary ${plan.model.vocab.toLocaleString('en-US')}) from ${plan.model.path}`,
    `  run: ${plan.summary}; ${plan.devices.length} device${plan.devices.length === 1 ? '' : 's'} of ${(plan.gpu_memory_bytes / 2 ** 30).toFixed(1)} GiB (${Math.round(USABLE_SHARE * 100)} % usable: ${(plan.usable_bytes / 2 ** 30).toFixed(1)} GiB)`,
  ];
  plan.devices.forEach((d, i) => {
    lines.push(`  device ${i}:`, `    ${'part'.padEnd(20)}${'GiB'.padStart(8)}  what`);
    for (const [name, bytes] of Object.entries(d.parts)) lines.push(`    ${name.padEnd(20)}${gib(bytes)}  ${d.what[name]}`);
    lines.push(`    ${'rollout phase'.padEnd(20)}${gib(d.phases.rollout!)}`, `    ${'update phase'.padEnd(20)}${gib(d.phases.update!)}`, `    ${'total (largest)'.padEnd(20)}${gib(d.total_bytes)}`);
  });
  for (const n of plan.notes) lines.push(`  note: ${n}`);
  const worst = Math.max(...plan.devices.map((d) => d.total_bytes));
  lines.push(plan.fits ? `fits: ${(worst / 2 ** 30).toFixed(1)} GiB of ${(plan.usable_bytes / 2 ** 30).toFixed(1)} GiB usable` : `does not fit: ${(worst / 2 ** 30).toFixed(1)} GiB needed, ${(plan.usable_bytes / 2 ** 30).toFixed(1)} GiB usable`);
  if (!plan.fits) for (const s of plan.suggestions) lines.push(`  would fit: ${s}`);
  return lines.join('\n');
}

/** The JSON form (`plan --json`): {fits, gpu_memory_bytes, devices: [{total_bytes, parts}], suggestions} and more. */
export function planJson(plan: MemoryPlan): Record<string, unknown> {
  return { ...plan };
}
