/**
 * Another engine's dump as one of our run directories, kept in step with it: each of its files (a step, a rank) is
 * converted once it is complete into `<cache>/rollouts/step-NNNNNN.jsonl` (our records), so the rollout store, the
 * inspector, the replay and the audit open it as they open a run of ours — indexed, random access, followed while the
 * engine writes. A file is complete when the engine says so (prime-rl's `STABLE` marker) or when its size and
 * modification time (and those of the files it is read with: miles' train_data shards) are unchanged between two
 * looks; a file that changes afterwards is converted again (its records replaced, which the store sees as a reset).
 * Files are numbered in the source's order (by step), so new steps append.
 *
 * The conversion is `readForeign`'s (index.ts), one file at a time, the GRPO groups kept across files (a prime-rl
 * step's groups span its ranks). What it could not read is kept: `issues` (file, line, field), `notes`.
 */
import { mkdir, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { LocatedIssue } from '../../run/format';
import { type ForeignKind, type ForeignOptions, foreignFiles, readForeign } from './index';
import { GroupKeeper } from './sample';

/** What a foreign source holds, as the editor shows it before opening it. */
export interface ForeignSurvey {
  engine: ForeignKind;
  files: number;
  steps: number[];
  rollouts: number;
  /** Per array (ours, then the engine's own), how many records carry it. */
  arrays: Record<string, number>;
  engineArrays: string[];
  /** How the records' roles were found (`chat template (…)`, `text blocks (…)`, `loss mask (no tokenizer)`), with counts. */
  roles: Record<string, number>;
  /** Per step: its rollouts and which of our arrays they carry. */
  perStep: { step: number; rollouts: number; arrays: string[] }[];
  /** Files not complete yet (a run still writing). */
  pending: number;
  skipped: number;
}

interface Converted {
  signature: string;
  out: string;
}

/** A file written more than this long ago is complete at first sight. */
const SETTLED_MS = 3000;

async function signature(file: string, kind: ForeignKind): Promise<{ sig: string; newest: number } | undefined> {
  const parts: string[] = [];
  let newest = 0;
  const add = async (f: string) => {
    const st = await stat(f).catch(() => undefined);
    if (st) {
      parts.push(`${basename(f)}:${st.size}:${Math.floor(st.mtimeMs)}`);
      newest = Math.max(newest, st.mtimeMs);
    }
    return st;
  };
  if (!(await add(file))) return undefined;
  if (kind === 'miles' && basename(dirname(file)) === 'rollout_data') {
    const rid = /^(\d+)\.pt$/.exec(basename(file))?.[1];
    const train = join(dirname(file), '..', 'train_data');
    if (rid)
      for (const n of (await readdir(train).catch(() => [] as string[])).filter((x) => x.startsWith(`${rid}_`)).sort())
        await add(join(train, n));
  }
  if (kind === 'prime-rl') {
    // the step directory's STABLE marker: every rank flushed
    if (await stat(join(dirname(file), 'STABLE')).catch(() => undefined)) parts.push('STABLE');
  }
  return { sig: parts.join('|'), newest };
}

interface FileStats {
  rollouts: number;
  skipped: number;
  steps: Set<number>;
  arrays: Record<string, number>;
  engineArrays: Set<string>;
  roles: Record<string, number>;
  perStep: Map<number, { rollouts: number; arrays: Set<string> }>;
  issues: LocatedIssue[];
}

export class ForeignMirror {
  readonly issues: LocatedIssue[] = [];
  readonly notes: string[] = [];
  private readonly converted = new Map<string, Converted>();
  /** Signatures seen at the previous look (a file is complete when its signature holds between two looks). */
  private readonly seen = new Map<string, string>();
  private readonly groups = new GroupKeeper();
  private order: string[] = [];
  private readonly survey: ForeignSurvey;
  private readonly stats = new Map<string, FileStats>();
  private running: Promise<boolean> | undefined;

  constructor(
    readonly source: string,
    readonly kind: ForeignKind,
    /** Our run directory the records go to (created; its rollouts/ replaced). */
    readonly dir: string,
    private readonly options: ForeignOptions = {},
  ) {
    this.survey = {
      engine: kind,
      files: 0,
      steps: [],
      rollouts: 0,
      arrays: {},
      engineArrays: [],
      roles: {},
      perStep: [],
      pending: 0,
      skipped: 0,
    };
  }

  static async open(
    source: string,
    kind: ForeignKind,
    dir: string,
    options: ForeignOptions = {},
  ): Promise<ForeignMirror> {
    await rm(join(dir, 'rollouts'), { recursive: true, force: true });
    await mkdir(join(dir, 'rollouts'), { recursive: true });
    const m = new ForeignMirror(source, kind, dir, options);
    await writeFile(join(dir, 'source.json'), JSON.stringify({ source, kind }, null, 2));
    return m;
  }

  /** The source's state: engine, files, steps, rollouts, which arrays the records carry. */
  summary(): ForeignSurvey {
    const steps = new Set<number>();
    const arrays: Record<string, number> = {};
    const engineArrays = new Set<string>();
    const roles: Record<string, number> = {};
    const perStep = new Map<number, { rollouts: number; arrays: Set<string> }>();
    let rollouts = 0;
    let skipped = 0;
    for (const s of this.stats.values()) {
      rollouts += s.rollouts;
      skipped += s.skipped;
      s.steps.forEach((x) => steps.add(x));
      for (const [k, v] of Object.entries(s.arrays)) arrays[k] = (arrays[k] ?? 0) + v;
      for (const [k, v] of Object.entries(s.roles)) roles[k] = (roles[k] ?? 0) + v;
      s.engineArrays.forEach((x) => engineArrays.add(x));
      for (const [step, p] of s.perStep) {
        const q = perStep.get(step) ?? { rollouts: 0, arrays: new Set<string>() };
        q.rollouts += p.rollouts;
        p.arrays.forEach((a) => q.arrays.add(a));
        perStep.set(step, q);
      }
    }
    return {
      ...this.survey,
      files: this.stats.size,
      steps: [...steps].sort((a, b) => a - b),
      rollouts,
      arrays,
      engineArrays: [...engineArrays].sort(),
      roles,
      perStep: [...perStep]
        .sort((a, b) => a[0] - b[0])
        .map(([step, p]) => ({ step, rollouts: p.rollouts, arrays: [...p.arrays] })),
      skipped,
    };
  }

  /**
   * Converts the files that are new or changed and complete. `complete`: convert every file as it is now (a source
   * that is not being written: the first look at a finished run, `import`). Returns whether records changed.
   */
  update(complete = false): Promise<boolean> {
    const run = (this.running ?? Promise.resolve(false)).then(() => this.look(complete));
    this.running = run.catch(() => false);
    return run;
  }

  private async look(complete: boolean): Promise<boolean> {
    const files = await foreignFiles(this.source, this.kind, !complete && this.kind === 'prime-rl').catch(
      () => [] as string[],
    );
    for (const f of files) if (!this.order.includes(f)) this.order.push(f);
    let changed = false;
    let pending = 0;
    for (const f of files) {
      if (this.options.signal?.aborted) break;
      const signed = await signature(f, this.kind);
      if (!signed) continue;
      const sig = signed.sig;
      const before = this.seen.get(f);
      this.seen.set(f, sig);
      const done = this.converted.get(f);
      if (done?.signature === sig) continue;
      const stable = complete || sig.endsWith('|STABLE') || before === sig || Date.now() - signed.newest > SETTLED_MS;
      if (!stable) {
        pending++;
        continue;
      }
      await this.convert(f, sig);
      changed = true;
    }
    this.survey.pending = pending;
    return changed;
  }

  private async convert(file: string, sig: string): Promise<void> {
    const k = this.order.indexOf(file);
    const out = join(this.dir, 'rollouts', `step-${String(k + 1).padStart(6, '0')}.jsonl`);
    const lines: string[] = [];
    const st: FileStats = {
      rollouts: 0,
      skipped: 0,
      steps: new Set(),
      arrays: {},
      engineArrays: new Set(),
      roles: {},
      perStep: new Map(),
      issues: [],
    };
    const notes = (n: string) => {
      if (!this.notes.includes(n)) this.notes.push(n);
      this.options.onNote?.(n);
    };
    for await (const item of readForeign(file, this.kind, { ...this.options, groups: this.groups, onNote: notes })) {
      if (!item.record) {
        st.skipped++;
        st.issues.push(...item.issues);
        continue;
      }
      const r = item.record;
      st.rollouts++;
      if (r.step !== undefined) st.steps.add(r.step);
      const arrays = Object.keys(r.tokens ?? {}).filter((a) => a !== 'text' && a !== 'ids');
      for (const a of arrays) st.arrays[a] = (st.arrays[a] ?? 0) + 1;
      const how = String(r.meta?.roles ?? 'recorded');
      st.roles[how] = (st.roles[how] ?? 0) + 1;
      const ps = st.perStep.get(r.step ?? -1) ?? { rollouts: 0, arrays: new Set<string>() };
      ps.rollouts++;
      arrays.forEach((a) => ps.arrays.add(a));
      st.perStep.set(r.step ?? -1, ps);
      for (const a of (r.meta?.engine_arrays as string[] | undefined) ?? []) st.engineArrays.add(a);
      lines.push(JSON.stringify(r));
    }
    const tmp = `${out}.${process.pid}.tmp`;
    await writeFile(tmp, lines.length ? `${lines.join('\n')}\n` : '');
    await rename(tmp, out);
    const previous = this.stats.get(file);
    if (previous) for (const i of previous.issues) this.issues.splice(this.issues.indexOf(i), 1);
    this.issues.push(...st.issues);
    this.stats.set(file, st);
    this.converted.set(file, { signature: sig, out });
  }
}
