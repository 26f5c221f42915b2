/**
 * Finding a Python that can run the trainer, and saying exactly what it has. Spawns with argument arrays
 * (never a shell string). A candidate is usable when it imports torch at least {@link TRAINER_MINIMUM}'s (and,
 * when the run config needs them, transformers and peft at least theirs); otherwise the next candidate is tried
 * and the versions found are named.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { NO_TRAINER_PYTHON } from './protocol/replay';

/**
 * The oldest versions the trainer runs with, from what it uses: `F.scaled_dot_product_attention` (the tiny
 * policy's attention) needs torch 2.0; `from_pretrained(dtype=…)` and `logits_to_keep` need transformers 4.56;
 * LoRA goes through peft's `LoraConfig`/`get_peft_model` (0.13). trainer/pyproject.toml declares the same lower
 * bounds (a unit test keeps them in step).
 */
export const TRAINER_MINIMUM = { torch: '2.0', transformers: '4.56', peft: '0.13' } as const;

/** What a run config needs beyond torch: transformers for a Hugging Face model, peft for LoRA. */
export interface TrainerNeeds {
  transformers?: boolean;
  peft?: boolean;
}

/** The packages a run config needs (a loose object: a config may not have been validated yet). */
export function trainerNeeds(config: unknown): TrainerNeeds {
  const model = (config as { model?: { kind?: unknown; lora?: unknown } } | undefined)?.model;
  const hf = model?.kind === 'hf';
  return { transformers: hf, peft: hf && model?.lora !== undefined && model.lora !== null };
}

/** The numeric release of a version string: "2.15.0+cu132" → [2, 15, 0]; "2.0.0a0" → [2, 0, 0]. */
function release(v: string): number[] {
  return (/^\s*v?(\d+(?:\.\d+)*)/.exec(v)?.[1] ?? '0').split('.').map(Number);
}

/** Whether `version` is at least `minimum`, comparing release numbers (pre-release and local tags ignored). */
export function versionAtLeast(version: string, minimum: string): boolean {
  const a = release(version);
  const b = release(minimum);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d > 0;
  }
  return true;
}

/**
 * Why a probed interpreter cannot run the trainer for `needs`, or undefined when it can: torch missing or older
 * than the minimum, or a package the config needs missing or too old (each named with the version found).
 */
export function unusableBecause(
  p: Omit<PythonProbe, 'ok' | 'executable'>,
  needs: TrainerNeeds = {},
): string | undefined {
  if (p.error) return p.error;
  if (p.torch === undefined) return 'cannot import torch';
  const problems: string[] = [];
  if (!versionAtLeast(p.torch, TRAINER_MINIMUM.torch))
    problems.push(`torch ${p.torch} is too old (the trainer needs torch ≥ ${TRAINER_MINIMUM.torch})`);
  const optional = [
    ['transformers', needs.transformers, 'a Hugging Face model'],
    ['peft', needs.peft, 'LoRA'],
  ] as const;
  for (const [name, needed, why] of optional) {
    if (!needed) continue;
    const found = p[name];
    if (!found) problems.push(`${name} is not installed (${why} needs ${name} ≥ ${TRAINER_MINIMUM[name]})`);
    else if (!versionAtLeast(found, TRAINER_MINIMUM[name]))
      problems.push(`${name} ${found} is too old (${why} needs ${name} ≥ ${TRAINER_MINIMUM[name]})`);
  }
  return problems.length ? problems.join('; ') : undefined;
}

export interface PythonProbe {
  executable: string;
  /** True when the interpreter ran and has what the trainer needs (see {@link unusableBecause}). */
  ok: boolean;
  python?: string;
  torch?: string;
  cuda?: boolean;
  cudaDevices?: string[];
  /** Each CUDA device's memory in bytes (torch's total_memory). */
  cudaMemory?: number[];
  /** Versions of the optional packages, or null when absent. */
  transformers?: string | null;
  peft?: string | null;
  /** TRL, for engine "trl" (trainer/requirements-trl.txt). */
  trl?: string | null;
  /** veRL's version (engine "verl": its own environment, .venv-verl), or null when absent. */
  verl?: string | null;
  /** vLLM (veRL's rollouts, TRL's use_vllm), flash-attn (veRL's attention: flash_attention_2 with it, SDPA without) and
   * DeepSpeed (TRL with ZeRO), or null when absent. */
  vllm?: string | null;
  flashAttn?: string | null;
  deepspeed?: string | null;
  /** Why it is not usable (not found, no torch, torch too old, timed out, …). */
  error?: string;
}

const PROBE_SCRIPT = `
import json, sys
out = {"python": sys.version.split()[0]}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = bool(torch.cuda.is_available())
    out["cudaDevices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if out["cuda"] else []
    out["cudaMemory"] = [torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())] if out["cuda"] else []
except Exception as e:
    out["error"] = "cannot import torch: %s: %s" % (type(e).__name__, e)
from importlib import metadata
for key, name in (("transformers", "transformers"), ("peft", "peft"), ("trl", "trl"), ("verl", "verl"), ("vllm", "vllm"), ("flashAttn", "flash-attn"), ("deepspeed", "deepspeed")):
    try:
        out[key] = metadata.version(name)
    except metadata.PackageNotFoundError:
        out[key] = None
print(json.dumps(out))
`;

/** Runs `executable` to read its versions; `ok` when it can run the trainer for `needs`. */
export async function probePython(
  executable: string,
  options: { needs?: TrainerNeeds; timeoutMs?: number } = {},
): Promise<PythonProbe> {
  const timeoutMs = options.timeoutMs ?? 120_000;
  try {
    const r = await execa(executable, ['-c', PROBE_SCRIPT], { timeout: timeoutMs, reject: false, stdin: 'ignore' });
    if (r.failed && r.exitCode === undefined) {
      const code = (r as { code?: string }).code;
      const why = r.timedOut
        ? `timed out after ${timeoutMs} ms`
        : code === 'ENOENT'
          ? 'not found (ENOENT)'
          : code === 'EACCES'
            ? 'not executable (EACCES)'
            : (r.originalMessage ?? r.shortMessage);
      return { executable, ok: false, error: why };
    }
    const last = r.stdout.trim().split('\n').pop() ?? '';
    let parsed: Omit<PythonProbe, 'executable' | 'ok'>;
    try {
      parsed = JSON.parse(last);
    } catch {
      return {
        executable,
        ok: false,
        error: `exit ${r.exitCode}: ${(r.stderr || r.stdout).trim().split('\n').slice(-3).join(' | ')}`,
      };
    }
    const why = unusableBecause(parsed, options.needs);
    return { executable, ...parsed, ok: why === undefined, ...(why ? { error: why } : {}) };
  } catch (e) {
    return { executable, ok: false, error: (e as Error).message };
  }
}

/**
 * Where to look for the trainer's Python, in order: what the user named (a setting, --python, the Python
 * extension's interpreter), SAS_PYTHON, the `.venv` under each of `roots` that exists (the environment "Set Up
 * Trainer Environment" made, the workspace's, the project's own from scripts/setup.sh), python3 on PATH,
 * /usr/bin/python3. Duplicates removed.
 */
export function pythonCandidates(named: (string | undefined)[] = [], roots: string | string[] = []): string[] {
  const out: string[] = [];
  const add = (p: string | undefined) => {
    if (p && !out.includes(p)) out.push(p);
  };
  named.forEach(add);
  add(process.env.SAS_PYTHON);
  for (const root of typeof roots === 'string' ? [roots] : roots) add(join(root, '.venv', 'bin', 'python'));
  add('python3');
  add('/usr/bin/python3');
  return out.filter((p) => !p.includes('/') || existsSync(p) || named.includes(p));
}

export interface PythonSearch {
  found?: PythonProbe;
  tried: PythonProbe[];
}

/** The first candidate that can run the trainer (for `needs`), and what each one tried said. */
export async function findPython(candidates: string[], needs: TrainerNeeds = {}): Promise<PythonSearch> {
  const tried: PythonProbe[] = [];
  for (const c of candidates) {
    const probe = await probePython(c, { needs });
    tried.push(probe);
    if (probe.ok) return { found: probe, tried };
  }
  return { tried };
}

/** What a resume says about the Python the run started in (run.json `python`), once a Python was found; undefined without one. */
export function runPythonNote(search: PythonSearch, runPython: string | undefined): string | undefined {
  if (!runPython || !search.found) return undefined;
  const own = search.tried.find((p) => p.executable === runPython);
  return own?.ok
    ? `resuming in the Python the run started in: ${runPython}`
    : `the Python the run started in (${runPython}) is not usable (${own?.error ?? 'not tried'}); resuming in ${search.found.executable}`;
}

/** What the trainer needs, in words: "torch ≥ 2.0, transformers ≥ 4.56". */
export function needsText(needs: TrainerNeeds = {}): string {
  return [
    `torch ≥ ${TRAINER_MINIMUM.torch}`,
    ...(needs.transformers ? [`transformers ≥ ${TRAINER_MINIMUM.transformers}`] : []),
    ...(needs.peft ? [`peft ≥ ${TRAINER_MINIMUM.peft}`] : []),
  ].join(', ');
}

/** The message when no Python works: what was tried, why each was refused, and `remedy` (what to do). */
export function noPythonMessage(
  search: PythonSearch,
  needs: TrainerNeeds = {},
  remedy = 'Run `search-agent-studio setup` (it makes a virtual environment with the pinned torch, transformers and peft), or pass --python to a Python that has them.',
): string {
  return [
    `${NO_TRAINER_PYTHON} (${needsText(needs)}) was found. Tried:`,
    ...search.tried.map((p) => `  ${p.executable}: ${p.error ?? 'unusable'}`),
    remedy,
  ].join('\n');
}
