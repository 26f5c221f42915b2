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
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { packageRoot, resolveConfigPath } from '../paths';
import type { RunConfig } from '../run/config';
import type { Engine } from '../run/engines';
import { resolveRunConfig } from '../run/presets';
import {
  builtinPlan,
  type Change,
  type Chosen,
  type EnginePlan,
  type Part,
  type PlanContext,
  PlanError,
} from './builtin';
import { type ModelShape, ModelShapeError, modelShape, paramCounts, readModelShape } from './model';
import { DEFAULT_GPU_MEMORY, USABLE_SHARE } from './parts';
import { trlPlan } from './trl';
import { verlPlan } from './verl';

export { DEFAULT_GPU_MEMORY, PlanError, USABLE_SHARE };

export const ENGINE_PLANNERS: Partial<Record<Engine, (ctx: PlanContext) => EnginePlan>> = {
  builtin: builtinPlan,
  trl: trlPlan,
  verl: verlPlan,
};

export interface PlanOptions {
  gpuMemoryBytes?: number;
  /** GPUs the run has: the builtin engine uses one; trl and verl take their world size from the config unless given. */
  gpus?: number;
  device?: 'cuda' | 'cpu';
  /** The model's shape from another directory or config.json than model.path's (`plan --model`). */
  model?: string;
}

export interface DevicePlan {
  total_bytes: number;
  parts: Record<string, number>;
  /** Each phase's bytes: 'rollout' (generation) and 'update' (the optimizer's forward and backward), and an engine's
   * own ('sync': weights to the rollout engine; 'update_forward': the update's forward; 'critic': PPO's critic). */
  phases: Record<string, number>;
  what: Record<string, string>;
  /** How many of the run's devices this plan is (each holds the same); 1 when absent. */
  count?: number;
  /** The largest phase (the device's total) and its parts, largest first: what a change must shrink. */
  peak: { phase: string; parts: string[] };
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
  /** The keys the plan would set in the config the run launches with (where the config leaves them unset). */
  chosen: Chosen[];
  /** CPU memory per machine for what is offloaded to it. */
  cpu?: { bytes_per_machine: number; parts: Record<string, number>; what: Record<string, string> };
  /** Why the run cannot start however its memory adds up (it does not fit then). */
  problems: string[];
}

/** The model shapes that ship with the package (Qwen2.5 0.5B–7B config.json files): `plan --model qwen2.5-3b`. */
export function shippedShapesDir(): string {
  return join(packageRoot(), 'examples', 'one-gpu', 'models');
}

/** `plan --model`'s argument as a path: a model directory or config.json (relative to `cwd`), else the name of a
 * shipped shape (shippedShapesDir). */
export function resolveModelArg(arg: string, cwd = process.cwd()): string {
  const path = resolve(cwd, arg);
  if (existsSync(path)) return path;
  const shipped = join(shippedShapesDir(), arg);
  if (!/[\\/]/.test(arg) && existsSync(shipped)) return shipped;
  let names: string[] = [];
  try {
    names = readdirSync(shippedShapesDir());
  } catch {
    /* an install without the examples */
  }
  throw new PlanError(
    `--model ${arg}: no such model directory or config.json (${path})${names.length ? `, nor a shape that ships with the package (${names.join(', ')})` : ''}`,
  );
}

/** The shape of a model: a model directory, or a config.json file itself. */
export function readShapeAt(path: string): ModelShape {
  return path.endsWith('.json') ? shapeOfFile(path) : readModelShape(path);
}

function shapeOfFile(file: string): ModelShape {
  const dir = file.replace(/[\\/]config\.json$/, '');
  if (dir !== file) return readModelShape(dir);
  // a config.json under another name
  let config: unknown;
  try {
    config = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new ModelShapeError(
      `${file}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`,
    );
  }
  if (!config || typeof config !== 'object') throw new ModelShapeError(`${file}: expected a JSON object`);
  return modelShape(config as Record<string, unknown>, file);
}

/** The memory plan of a loaded run config (its model.path resolved against the config's directory, or `options.model`). */
export function planRun(loaded: { config: RunConfig; base: string }, options: PlanOptions = {}): MemoryPlan {
  const config = resolveRunConfig(loaded.config);
  if (config.model.kind !== 'hf')
    throw new PlanError(
      'model.kind "tiny": the built-in tiny policy needs a few MB; the memory plan is for Hugging Face models (model.kind "hf")',
    );
  if (!config.model.path && !options.model)
    throw new PlanError(
      'model.path: is required when model.kind is "hf" (or pass --model with a model directory or its config.json)',
    );
  const path = options.model ?? resolveConfigPath(config.model.path!, loaded.base);
  let shape: ModelShape;
  try {
    shape = readShapeAt(path);
  } catch (e) {
    if (e instanceof ModelShapeError) {
      const missing = /no such file/.test(e.message);
      throw new PlanError(
        missing && !options.model
          ? `${e.message}; the plan needs only the model's config.json: pass --model <model directory, config.json, or a shape that ships with the package: qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, qwen2.5-7b>`
          : e.message,
      );
    }
    throw e;
  }
  return planShape(config, shape, path, options, loaded.base);
}

/** The plan of a resolved config for a model of `shape` (the model at `path`). */
export function planShape(
  config: RunConfig,
  shape: ModelShape,
  path: string,
  options: PlanOptions = {},
  base?: string,
): MemoryPlan {
  const plan = planOnce(config, shape, path, options, base);
  if (!plan.fits) plan.suggestions = suggestions(config, shape, path, options, base);
  return plan;
}

function planOnce(config: RunConfig, shape: ModelShape, path: string, options: PlanOptions, base?: string): MemoryPlan {
  const engine = config.engine ?? 'builtin';
  const planner = ENGINE_PLANNERS[engine];
  if (!planner) throw new PlanError(`engine "${engine}": its memory is not planned`);
  const gpu = options.gpuMemoryBytes ?? DEFAULT_GPU_MEMORY;
  const ctx: PlanContext = {
    config,
    shape,
    gpuMemoryBytes: gpu,
    gpus: options.gpus ?? 1,
    gpusGiven: options.gpus !== undefined,
    device: options.device ?? 'cuda',
    base,
  };
  const e = planner(ctx);
  const usable = Math.floor(USABLE_SHARE * gpu);
  const devices = e.devices.map((parts, i) => devicePlan(parts, e.counts?.[i]));
  const problems = e.problems ?? [];
  const cpuParts = e.cpu ?? [];
  return {
    fits: devices.every((d) => d.total_bytes <= usable) && !problems.length,
    gpu_memory_bytes: gpu,
    usable_bytes: usable,
    devices,
    suggestions: [],
    engine,
    model: {
      path,
      model_type: shape.modelType,
      parameters: paramCounts(shape).total,
      hidden: shape.hidden,
      layers: shape.layers,
      vocab: shape.vocab,
    },
    summary: e.summary,
    notes: e.notes,
    chosen: e.chosen ?? [],
    ...(cpuParts.length
      ? {
          cpu: {
            bytes_per_machine: cpuParts.reduce((a, x) => a + x.bytes, 0),
            parts: Object.fromEntries(cpuParts.map((x) => [x.name, x.bytes])),
            what: Object.fromEntries(cpuParts.map((x) => [x.name, x.what])),
          },
        }
      : {}),
    problems,
  };
}

const phasesOf = (p: Part): string[] => (Array.isArray(p.phase) ? p.phase : [p.phase]);

function devicePlan(parts: Part[], count?: number): DevicePlan {
  const names = [
    'rollout',
    'update',
    ...new Set(parts.flatMap(phasesOf).filter((x) => x !== 'all' && x !== 'rollout' && x !== 'update')),
  ];
  const phaseTotal = (phase: string) =>
    parts.filter((p) => p.phase === 'all' || phasesOf(p).includes(phase)).reduce((a, p) => a + p.bytes, 0);
  const phases = Object.fromEntries(names.map((n) => [n, phaseTotal(n)]));
  const phaseText = (p: Part) => (p.phase === 'all' ? '' : ` (${phasesOf(p).join(', ')})`);
  const total = Math.max(...Object.values(phases));
  const peakPhase = names.find((n) => phases[n] === total)!;
  const inPeak = parts
    .filter((p) => p.phase === 'all' || phasesOf(p).includes(peakPhase))
    .sort((a, b) => b.bytes - a.bytes);
  return {
    total_bytes: total,
    parts: Object.fromEntries(parts.map((p) => [p.name, p.bytes])),
    phases,
    what: Object.fromEntries(parts.map((p) => [p.name, `${p.what}${phaseText(p)}`])),
    ...(count !== undefined && count !== 1 ? { count } : {}),
    peak: { phase: peakPhase, parts: inPeak.map((p) => p.name) },
  };
}

/** The worst device's largest phase and its three largest parts, for a verdict: "the update phase: backward_peak
 * 35.4 GiB, optimizer 23.0 GiB, weights 11.5 GiB". */
export function peakText(plan: MemoryPlan): string {
  const d = plan.devices.reduce((a, b) => (b.total_bytes > a.total_bytes ? b : a));
  const parts = d.peak.parts.slice(0, 3).map((n) => `${n} ${(d.parts[n]! / 2 ** 30).toFixed(1)} GiB`);
  return `the ${d.peak.phase.replace(/_/g, ' ')} phase: ${parts.join(', ')}`;
}

function changes(config: RunConfig, engineChanges: Change[]): Change[] {
  const out: Change[] = [];
  const clone = (c: RunConfig) => structuredClone(c) as RunConfig;
  if (config.model.gradient_checkpointing === false) {
    out.push({
      says: 'model.gradient_checkpointing: true',
      apply: (c) => ({ ...clone(c), model: { ...c.model, gradient_checkpointing: true } }),
    });
  }
  const micro = config.optim!.micro_batch_size!;
  for (let m = micro >> 1; m >= 1; m >>= 1) {
    out.push({
      says: `optim.micro_batch_size: ${m}`,
      apply: (c) => ({
        ...clone(c),
        optim: { ...c.optim, micro_batch_size: m, mini_batch_size: Math.max(m, c.optim!.mini_batch_size!) },
      }),
    });
  }
  out.push(...engineChanges);
  const mbt = config.rollout!.max_batch_tokens;
  if (mbt !== undefined && (config.engine ?? 'builtin') !== 'verl') {
    for (const f of [2, 4, 8]) {
      const v = Math.max(1, Math.floor(mbt / f));
      out.push({
        says: `rollout.max_batch_tokens: ${v} (fewer rows a wave)`,
        apply: (c) => ({ ...clone(c), rollout: { ...c.rollout, max_batch_tokens: v } }),
      });
    }
    out.push({
      says: 'rollout.max_batch_tokens left out (the trainer sizes the KV cache to what is left)',
      apply: (c) => {
        const x = clone(c);
        delete x.rollout!.max_batch_tokens;
        return x;
      },
    });
  }
  if (!config.model.lora) {
    out.push({
      says: 'model.lora: {"r": 16, "alpha": 32} (LoRA instead of a full fine-tune)',
      apply: (c) => ({
        ...clone(c),
        model: {
          ...c.model,
          lora: { r: 16, alpha: 32, dropout: 0, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj'] },
        },
      }),
    });
  }
  return out;
}

/** The cheapest changes that make the run fit, each checked by planning again: single changes in the order of
 * `changes` (what costs the least first), then pairs; at most three. */
function suggestions(
  config: RunConfig,
  shape: ModelShape,
  path: string,
  options: PlanOptions,
  base?: string,
): string[] {
  let engineChanges: Change[] = [];
  try {
    const gpu = options.gpuMemoryBytes ?? DEFAULT_GPU_MEMORY;
    engineChanges =
      ENGINE_PLANNERS[config.engine ?? 'builtin']!({
        config,
        shape,
        gpuMemoryBytes: gpu,
        gpus: options.gpus ?? 1,
        gpusGiven: options.gpus !== undefined,
        device: options.device ?? 'cuda',
        base,
      }).changes ?? [];
  } catch {
    /* planned once already */
  }
  const all = changes(config, engineChanges);
  const found: string[] = [];
  const gib = (n: number) => `${(n / 2 ** 30).toFixed(1)} GiB`;
  const tryOne = (cs: Change[]) => {
    let c: RunConfig | undefined = config;
    for (const ch of cs) c = c && ch.apply(c);
    if (!c) return;
    let p: MemoryPlan;
    try {
      p = planOnce(c, shape, path, options, base);
    } catch (e) {
      if (e instanceof PlanError) return;
      throw e;
    }
    const also = p.chosen.length
      ? ` (the plan then sets ${p.chosen.map((x) => `${x.key}: ${JSON.stringify(x.value)}`).join(', ')})`
      : '';
    if (p.fits)
      found.push(
        `${cs.map((x) => x.says).join(' and ')} → ${gib(Math.max(...p.devices.map((d) => d.total_bytes)))} of ${gib(p.gpu_memory_bytes)}${also}`,
      );
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
  const engine = config.engine ?? 'builtin';
  if (!found.length)
    found.push(
      engine === 'builtin'
        ? `nothing the builtin engine can change fits ${gib(options.gpuMemoryBytes ?? DEFAULT_GPU_MEMORY)}: a smaller model, shorter sequences (rollout.max_prompt_length + max_response_length), or an engine that shards and offloads (verl)`
        : `no single change or pair of them the plan tries fits ${gib(options.gpuMemoryBytes ?? DEFAULT_GPU_MEMORY)}: more GPUs, a smaller model or shorter sequences (rollout.max_prompt_length + max_response_length)`,
    );
  return found;
}

/** Parses a memory size: `80GiB`, `80GB`, `80G` (GiB), `79.6 GiB`, `512MiB`, or bytes. */
export function parseBytes(text: string): number {
  const m = /^\s*([\d.]+)\s*([kmgt]?)(i?b?)\s*$/i.exec(text);
  if (!m || !Number.isFinite(Number(m[1])))
    throw new PlanError(
      `--gpu-memory: expected a size such as 80GiB, 80GB or 85899345920, got ${JSON.stringify(text)}`,
    );
  const unit = m[2]!.toLowerCase();
  if (!unit) return Math.round(Number(m[1]));
  const binary = m[3]!.toLowerCase() === 'ib' || m[3] === '';
  const power = { k: 1, m: 2, g: 3, t: 4 }[unit as 'k' | 'm' | 'g' | 't'];
  return Math.round(Number(m[1]) * (binary ? 1024 : 1000) ** power);
}

/** The plan as a table, its verdict and the suggestions. */
export function formatPlan(plan: MemoryPlan, title: string): string {
  const gib = (n: number) => (n / 2 ** 30).toFixed(2).padStart(8);
  const total = plan.devices.reduce((a, d) => a + (d.count ?? 1), 0);
  const lines = [
    `memory plan: ${title}`,
    `  model: ${plan.model.model_type}, ${(plan.model.parameters / 1e9).toFixed(2)} B parameters (${plan.model.layers} layers × ${plan.model.hidden}, vocabulary ${plan.model.vocab.toLocaleString('en-US')}) from ${plan.model.path}`,
    `  run: ${plan.summary}; ${total} device${total === 1 ? '' : 's'} of ${(plan.gpu_memory_bytes / 2 ** 30).toFixed(1)} GiB (${Math.round(USABLE_SHARE * 100)} % usable: ${(plan.usable_bytes / 2 ** 30).toFixed(1)} GiB)`,
  ];
  let first = 0;
  for (const d of plan.devices) {
    const n = d.count ?? 1;
    lines.push(
      n === 1 ? `  device ${first}:` : `  devices ${first}–${first + n - 1} (each):`,
      `    ${'part'.padEnd(20)}${'GiB'.padStart(8)}  what`,
    );
    first += n;
    for (const [name, bytes] of Object.entries(d.parts))
      lines.push(`    ${name.padEnd(20)}${gib(bytes)}  ${d.what[name]}`);
    for (const [phase, bytes] of Object.entries(d.phases))
      lines.push(`    ${`${phase.replace(/_/g, ' ')} phase`.padEnd(20)}${gib(bytes)}`);
    lines.push(`    ${'total (largest)'.padEnd(20)}${gib(d.total_bytes)}`);
  }
  if (plan.cpu) {
    lines.push(
      `  CPU memory per machine for what is offloaded: ${(plan.cpu.bytes_per_machine / 2 ** 30).toFixed(1)} GiB`,
    );
    for (const [name, bytes] of Object.entries(plan.cpu.parts))
      lines.push(`    ${name.padEnd(20)}${gib(bytes)}  ${plan.cpu.what[name]}`);
  }
  for (const c of plan.chosen)
    lines.push(
      `  the plan sets ${c.key}: ${JSON.stringify(c.value)} (the config leaves it unset; train applies it)${c.why ? `: ${c.why}` : ''}`,
    );
  for (const n of plan.notes) lines.push(`  note: ${n}`);
  for (const p of plan.problems) lines.push(`  cannot start: ${p}`);
  const worst = Math.max(...plan.devices.map((d) => d.total_bytes));
  const over = worst > plan.usable_bytes;
  lines.push(
    plan.fits
      ? `fits: ${(worst / 2 ** 30).toFixed(1)} GiB of ${(plan.usable_bytes / 2 ** 30).toFixed(1)} GiB usable`
      : over
        ? `does not fit: ${(worst / 2 ** 30).toFixed(1)} GiB needed, ${(plan.usable_bytes / 2 ** 30).toFixed(1)} GiB usable (${peakText(plan)})`
        : `does not fit: ${plan.problems[0]}`,
  );
  if (!plan.fits) for (const s of plan.suggestions) lines.push(`  would fit: ${s}`);
  return lines.join('\n');
}

/** The JSON form (`plan --json`): {fits, gpu_memory_bytes, devices: [{total_bytes, parts, phases, count}], suggestions,
 * chosen, cpu, problems} and more. */
export function planJson(plan: MemoryPlan): Record<string, unknown> {
  return { ...plan };
}
