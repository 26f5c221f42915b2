/**
 * The runs on disk: run directories (`<parent>/<id>/run.json`) read without trusting them — a run.json that says
 * `running` while its trainer's pid is gone was interrupted (a killed machine, a crash of everything), and is shown
 * as such so it can be resumed.
 */
import { existsSync } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, isAbsolute, join } from 'node:path';
import type { RunStage } from '../protocol/dashboard';
import { runStages } from '../run/config';
import type { RunJson } from '../run/format';
import { MetricsTail } from './metricsTail';
import { isAlive } from './processes';

export type RunState = 'running' | 'finished' | 'failed' | 'stopped' | 'interrupted';

export interface RunInfo {
  dir: string;
  id: string;
  state: RunState;
  step: number;
  total?: number;
  pid?: number;
  /** The Python the trainer ran in (run.json `python`): a resume tries it first. */
  python?: string;
  created?: string;
  updated?: string;
  error?: string;
  /** Why a `stopped` run stopped: asked to (`signal`), or its host went away (`host-gone`: a reload, a crash). */
  stopReason?: 'signal' | 'host-gone';
  /**
   * Last values of a few metrics (from the end of metrics.jsonl): the last batch's reward (noisy), its mean over the
   * last {@link SMOOTHING} steps (what the Runs view shows), and the last held-out exact match.
   */
  last?: { reward?: number; rewardSmoothed?: number; valEm?: number; step?: number };
  /** Where the trainer is (the last `progress` event): its phase, and during the warm start its step and loss. */
  progress?: RunProgress;
  /** Steps with a rollouts file, ascending. */
  rolloutSteps: number[];
  /** A curriculum run's stages (`train.stages` of its config); absent for a one-stage run. */
  stages?: RunStage[];
}

export interface RunProgress {
  phase: string;
  step?: number;
  total?: number;
  warmup?: { step: number; steps: number; loss?: number };
}

/** Steps the Runs view's reward is averaged over (one batch's reward is noise for a small batch). */
export const SMOOTHING = 10;

/** A `progress` event as a RunProgress (undefined for anything else). */
export function progressOf(e: Record<string, unknown>): RunProgress | undefined {
  if (e.event !== 'progress' || typeof e.phase !== 'string') return undefined;
  const p: RunProgress = { phase: e.phase };
  if (typeof e.step === 'number') p.step = e.step;
  if (typeof e.total === 'number') p.total = e.total;
  if (e.phase === 'warmup' && typeof e.warmup_step === 'number' && typeof e.warmup_steps === 'number')
    p.warmup = { step: e.warmup_step, steps: e.warmup_steps, ...(typeof e.loss === 'number' ? { loss: e.loss } : {}) };
  return p;
}

/** The last complete lines of a file, reading only its tail. */
export async function lastLines(file: string, maxBytes = 64 * 1024): Promise<string[]> {
  const { open } = await import('node:fs/promises');
  const h = await open(file, 'r');
  try {
    const size = (await h.stat()).size;
    const start = Math.max(0, size - maxBytes);
    const buf = Buffer.alloc(size - start);
    await h.read(buf, 0, buf.length, start);
    const lines = buf.toString('utf8').split('\n');
    if (start > 0) lines.shift();
    return lines.filter((l) => l.trim());
  } finally {
    await h.close();
  }
}

/**
 * run.json's `python`, when it looks like a Python interpreter: an absolute path whose file is named python, python3 or
 * python3.N. A resume runs it (to probe it, then to train), so a run directory from elsewhere must not be able to name
 * just any program; the workspace's trust (the editor) and the user's own `--run-dir` (the CLI) cover the rest.
 */
export function interpreterPath(p: unknown): string | undefined {
  return typeof p === 'string' && isAbsolute(p) && /^python(3(\.\d+)?)?(\.exe)?$/.test(basename(p)) ? p : undefined;
}

export async function readRun(dir: string): Promise<RunInfo | undefined> {
  let run: Partial<RunJson>;
  try {
    run = JSON.parse(await readFile(join(dir, 'run.json'), 'utf8'));
  } catch {
    return undefined;
  }
  let state: RunState = (run.status as RunState) ?? 'interrupted';
  if (state === 'running' && !(run.pid && isAlive(run.pid))) state = 'interrupted';
  const info: RunInfo = {
    dir,
    id: run.id ?? basename(dir),
    state,
    step: run.step ?? 0,
    total: run.total_steps,
    pid: run.pid,
    python: interpreterPath(run.python),
    created: run.created,
    updated: run.updated,
    error: run.error?.message,
    stopReason: run.stop_reason,
    rolloutSteps: [],
  };
  const stages = runStages(run.config);
  if (stages.length > 1) info.stages = stages;
  const metrics = join(dir, 'metrics.jsonl');
  if (existsSync(metrics)) {
    const last: NonNullable<RunInfo['last']> = {};
    const rewards: number[] = [];
    for (const line of (await lastLines(metrics, 256 * 1024)).reverse()) {
      try {
        const m = JSON.parse(line) as Record<string, number>;
        last.step ??= m.step;
        if (typeof m['critic/score/mean'] === 'number' && rewards.length < SMOOTHING)
          rewards.push(m['critic/score/mean']);
        if (last.valEm === undefined && typeof m['val/em'] === 'number') last.valEm = m['val/em'];
        if (rewards.length >= SMOOTHING && last.valEm !== undefined) break;
      } catch {
        /* a partial line being written */
      }
    }
    if (rewards.length) {
      last.reward = rewards[0];
      last.rewardSmoothed = rewards.reduce((a, b) => a + b, 0) / rewards.length;
    }
    info.last = last;
  }
  if (state === 'running') {
    const events = join(dir, 'events.jsonl');
    if (existsSync(events)) {
      for (const line of (await lastLines(events, 16 * 1024)).reverse()) {
        try {
          const p = progressOf(JSON.parse(line));
          if (p) {
            info.progress = p;
            break;
          }
        } catch {
          /* a partial line being written */
        }
      }
    }
  }
  try {
    // rollouts/step-N.jsonl (v2 JSONL) or rollouts/step-N/ (the token store: only committed steps have that name)
    info.rolloutSteps = [
      ...new Set(
        (await readdir(join(dir, 'rollouts')))
          .map((f) => /^step-(\d+)(\.jsonl)?$/.exec(f))
          .filter((m): m is RegExpExecArray => m !== null)
          .map((m) => Number(m[1])),
      ),
    ].sort((a, b) => a - b);
  } catch {
    /* no rollouts yet */
  }
  return info;
}

/** Every run directory directly under the given parents, newest first. */
export async function listRuns(parents: string[]): Promise<RunInfo[]> {
  const out: RunInfo[] = [];
  for (const parent of parents) {
    let names: string[];
    try {
      names = await readdir(parent);
    } catch {
      continue;
    }
    for (const name of names) {
      const dir = join(parent, name);
      if (!existsSync(join(dir, 'run.json'))) continue;
      const info = await readRun(dir);
      if (info) out.push(info);
    }
  }
  const time = async (r: RunInfo) => r.created ?? (await stat(r.dir)).mtime.toISOString();
  const keyed = await Promise.all(out.map(async (r) => [await time(r), r] as const));
  return keyed.sort((a, b) => (a[0] < b[0] ? 1 : a[0] > b[0] ? -1 : 0)).map(([, r]) => r);
}

/**
 * A run's rollouts of one training step: the token store's step directory (`rollouts/step-000042/`) when it has one,
 * else its JSONL file (`rollouts/step-000042.jsonl`); every reader takes either.
 */
export function rolloutFile(dir: string, step: number): string {
  const name = `step-${String(step).padStart(6, '0')}`;
  const store = join(dir, 'rollouts', name);
  return existsSync(join(store, 'rollouts.parquet')) ? store : join(dir, 'rollouts', `${name}.jsonl`);
}

/**
 * Per step, what is cheaply known of its GRPO groups without reading its rollouts: the trainer's fraction of groups
 * whose rewards are all equal (`reward/frac_zero_std_groups` in metrics.jsonl) and, when run.json's resolved config
 * says how many prompts a step samples (`rollout.batch_size`, one group each), the number of groups. Steps without
 * the metric are absent; malformed metrics lines are skipped.
 */
export async function zeroVarianceSteps(dir: string): Promise<Map<number, { frac: number; groups?: number }>> {
  let groups: number | undefined;
  try {
    const run = JSON.parse(await readFile(join(dir, 'run.json'), 'utf8')) as Partial<RunJson>;
    const b = (run.config?.rollout as { batch_size?: unknown } | undefined)?.batch_size;
    if (typeof b === 'number' && Number.isInteger(b) && b > 0) groups = b;
  } catch {
    /* no run.json: fractions only */
  }
  const out = new Map<number, { frac: number; groups?: number }>();
  const tail = new MetricsTail(join(dir, 'metrics.jsonl'));
  for (let r = await tail.read(); r.rows.length || r.malformed.length; r = await tail.read()) {
    for (const row of r.rows) {
      const frac = row['reward/frac_zero_std_groups'];
      if (typeof frac === 'number' && Number.isFinite(frac)) out.set(row.step, { frac, ...(groups ? { groups } : {}) });
    }
  }
  return out;
}
