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
  applyChange,
  builtinPlan,
  type Change,
  type Chosen,
  changeText,
  type EnginePlan,
  type Part,
  type PlanContext,
} from './builtin';
import { PlanError } from './errors';
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
  /** The change each suggestion prints, in order (all but a last "nothing … fits" line), key by key (dotted, as the
   * config file writes them; no `value`: the key left out), and the largest device's bytes with it. */
  suggested_changes: { changes: { key: string; value?: unknown }[]; total_bytes: number }[];
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
  return modelShape(config as Record<string, unknown>, file);
}

/** The memory plan of a loaded run config (its model.path resolved against the config's directory, or `options.model`).
 * A PlanError about the config (a field the planner cannot plan) names its file when `loaded.file` says it; one about
 * the model's config.json names that file. */
export function planRun(
  loaded: { config: RunConfig; base: string; file?: string },
  options: PlanOptions = {},
): MemoryPlan {
  try {
    return planLoaded(loaded, options);
  } catch (e) {
    if (e instanceof PlanError && !(e instanceof ModelShapeError) && loaded.file && !e.message.startsWith(loaded.file))
      throw new PlanError(`${loaded.file}: ${e.message}`);
    throw e;
  }
}

function planLoaded(loaded: { config: RunConfig; base: string }, options: PlanOptions): MemoryPlan {
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
      throw new ModelShapeError(
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
  if (!plan.fits) {
    const found = suggestions(config, shape, path, options, base);
    plan.suggestions = found.map((x) => x.text);
    plan.suggested_changes = found
      .filter((x) => x.changes.length)
      .map((x) => ({
        changes: x.changes.flatMap((ch) =>
          ch.sets.map(([key, value]) => (value === undefined ? { key } : { key, value })),
        ),
        total_bytes: x.bytes,
      }));
  }
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
    suggested_changes: [],
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

/** The changes worth trying, cheapest first: checkpointing back on, smaller micro-batches, the engine's own (a smaller
 * KV budget for our generator, vLLM's share, veRL's offload and GPUs), and last LoRA instead of a full fine-tune (a
 * different training, not a setting). */
function changes(config: RunConfig, engineChanges: Change[]): { cheap: Change[]; lora: Change[] } {
  const cheap: Change[] = [];
  if (config.model.gradient_checkpointing === false) cheap.push({ sets: [['model.gradient_checkpointing', true]] });
  const micro = config.optim!.micro_batch_size!;
  for (let m = micro >> 1; m >= 1; m >>= 1)
    cheap.push({ sets: [['optim.micro_batch_size', m]], knob: 'optim.micro_batch_size' });
  cheap.push(...engineChanges);
  const lora: Change[] = config.model.lora
    ? []
    : [{ sets: [['model.lora', { r: 16, alpha: 32 }]], why: 'LoRA instead of a full fine-tune' }];
  return { cheap, lora };
}

const knobOf = (c: Change) => c.knob ?? changeText(c);

/** The cheapest changes that make the run fit, each checked by planning again (at most three): single changes in the
 * order of `changes` — of one knob only the mildest that fits —, then pairs of them (one per pair of knobs) where no
 * single one fits; LoRA after those, alone, then with one of them. */
function suggestions(
  config: RunConfig,
  shape: ModelShape,
  path: string,
  options: PlanOptions,
  base?: string,
): { text: string; changes: Change[]; bytes: number }[] {
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
  const { cheap, lora } = changes(config, engineChanges);
  const found: { text: string; changes: Change[]; bytes: number }[] = [];
  const gib = (n: number) => `${(n / 2 ** 30).toFixed(1)} GiB`;
  const fits = (cs: Change[]): boolean => {
    const c = cs.reduce((x, ch) => applyChange(x, ch), config);
    let p: MemoryPlan;
    try {
      p = planOnce(c, shape, path, options, base);
    } catch (e) {
      if (e instanceof PlanError) return false;
      throw e;
    }
    if (!p.fits) return false;
    const also = p.chosen.length
      ? ` (the plan then sets ${p.chosen.map((x) => `${x.key}: ${JSON.stringify(x.value)}`).join(', ')})`
      : '';
    const bytes = Math.max(...p.devices.map((d) => d.total_bytes));
    found.push({
      text: `${cs.map(changeText).join(' and ')} → ${gib(bytes)} of ${gib(p.gpu_memory_bytes)}${also}`,
      changes: cs,
      bytes,
    });
    return true;
  };
  const singles = (list: Change[]) => {
    const done = new Set<string>();
    for (const ch of list) {
      if (found.length >= 3) return;
      if (!done.has(knobOf(ch)) && fits([ch])) done.add(knobOf(ch));
    }
  };
  const pairs = (list: [Change, Change][]) => {
    const done = new Set<string>();
    for (const [a, b] of list) {
      if (found.length >= 3) return;
      const key = `${knobOf(a)}\n${knobOf(b)}`;
      if (knobOf(a) === knobOf(b) || done.has(key)) continue;
      if (fits([a, b])) done.add(key);
    }
  };
  singles(cheap);
  if (!found.length) pairs(cheap.flatMap((a, i) => cheap.slice(i + 1).map((b): [Change, Change] => [a, b])));
  singles(lora);
  if (!found.length) pairs(lora.flatMap((a) => cheap.map((b): [Change, Change] => [a, b])));
  const engine = config.engine ?? 'builtin';
  if (!found.length)
    found.push({
      text:
        engine === 'builtin'
          ? `nothing the builtin engine can change fits ${gib(options.gpuMemoryBytes ?? DEFAULT_GPU_MEMORY)}: a smaller model, shorter sequences (rollout.max_prompt_length + max_response_length), or an engine that shards and offloads (verl)`
          : `no single change or pair of them the plan tries fits ${gib(options.gpuMemoryBytes ?? DEFAULT_GPU_MEMORY)}: more GPUs, a smaller model or shorter sequences (rollout.max_prompt_length + max_response_length)`,
      changes: [],
      bytes: 0,
    });
  return found;
}

/** The smallest GPU memory the planner takes: below it a size is surely a unit left out (`80` is 80 bytes). */
export const MIN_GPU_MEMORY = 2 ** 30;

const SIZE_UNITS = 'KiB, MiB, GiB, TiB (or K, M, G, T), KB, MB, GB, TB (powers of 1,000), none for bytes';

/** Parses a memory size: `80GiB`, `80GB`, `80G` (GiB), `79.6 GiB`, `512MiB`, or bytes; at least MIN_GPU_MEMORY.
 * `option` names the command-line option in errors. */
export function parseBytes(text: string, option = '--gpu-memory'): number {
  const m = /^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b?)\s*$/i.exec(text);
  if (!m)
    throw new PlanError(
      `${option}: expected a size such as 80GiB, 80GB or 85899345920 (units: ${SIZE_UNITS}), got ${JSON.stringify(text)}`,
    );
  const unit = m[2]!.toLowerCase();
  const binary = m[3]!.toLowerCase() === 'ib' || m[3] === '';
  const power = unit ? { k: 1, m: 2, g: 3, t: 4 }[unit as 'k' | 'm' | 'g' | 't'] : 0;
  const bytes = Math.round(Number(m[1]) * (binary ? 1024 : 1000) ** power);
  if (bytes < MIN_GPU_MEMORY)
    throw new PlanError(
      `${option}: ${JSON.stringify(text)} is ${bytes.toLocaleString('en-US')} bytes, less than 1 GiB: no GPU's memory (a unit left out? 80GiB is 80 GiB; units: ${SIZE_UNITS})`,
    );
  return bytes;
}

/** The plan as a table, its verdict and the suggestions. */
export function formatPlan(plan: MemoryPlan, title: string, options: { device?: 'cuda' | 'cpu' } = {}): string {
  const gib = (n: number) => (n / 2 ** 30).toFixed(2).padStart(8);
  const total = plan.devices.reduce((a, d) => a + (d.count ?? 1), 0);
  // A CPU run: the machine's memory holds it, no GPU's (its size and usable share do not apply)
  const cpu = options.device === 'cpu';
  const lines = [
    `memory plan: ${title}`,
    `  model: ${plan.model.model_type}, ${(plan.model.parameters / 1e9).toFixed(2)} B parameters (${plan.model.layers} layers × ${plan.model.hidden}, vocabulary ${plan.model.vocab.toLocaleString('en-US')}) from ${plan.model.path}`,
    cpu
      ? `  run: ${plan.summary}; on the CPU (the machine's memory; no GPU)`
      : `  run: ${plan.summary}; ${total} device${total === 1 ? '' : 's'} of ${(plan.gpu_memory_bytes / 2 ** 30).toFixed(1)} GiB (${Math.round(USABLE_SHARE * 100)} % usable: ${(plan.usable_bytes / 2 ** 30).toFixed(1)} GiB)`,
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
  if (cpu && !plan.problems.length) {
    lines.push(`needs ${(worst / 2 ** 30).toFixed(1)} GiB of the machine's memory (a CPU run: no GPU memory to fit)`);
    return lines.join('\n');
  }
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
