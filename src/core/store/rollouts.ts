/**
 * Rollouts from a JSONL file, a run directory (`runs/<id>/rollouts/step-NNNNNN.jsonl`, or the token store's
 * `rollouts/step-NNNNNN/` step directories: tokenStore.ts), one store step, or a directory of JSONL files (e.g.
 * veRL's `{step}.jsonl` dumps), as one sequence of rows: indexed, random access, followed while a run writes. Rows
 * are parsed and validated when read; a malformed row is reported with its file (a store step's directory), line (a
 * store row's number, from 1) and field, and the others are unaffected.
 */
import { type FSWatcher, watch } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { formerBuiltinName, resolveConfigPath } from '../paths';
import { applyDialect, type LocatedIssue, type ReadOptions, type Rollout, validateRollout } from '../run/format';
import { DIALECTS, type Dialect } from '../tags/parser';
import { type IndexProgress, JsonlFile, readLines, tooLongMessage } from './jsonl';
import {
  isStoreStep,
  STEP_DIR,
  STORE_FILES,
  StoreFileError,
  StoreStep,
  stepOfDir,
  type TokenColumns,
} from './tokenStore';
import { FieldError, fromVerlDump } from './verlDump';

export interface RolloutRow {
  /** Row number across all files (0-based). */
  index: number;
  file: string;
  line: number;
  /** The record, when the line is valid JSON that passes the schema. */
  record?: Rollout;
  /** The parsed JSON when it is JSON but fails the schema (for showing what is there). */
  value?: unknown;
  errors: LocatedIssue[];
}

/**
 * Parses and validates one line. A veRL dump line (`input`/`output`/`gts`/`score`, no `v`) is converted to a
 * rollout record on the way (so a folder of veRL's `{step}.jsonl` dumps opens in the inspector as it is). The
 * record's `dialect` is set as the read options say (a forced one, else its own, else the run config's).
 */
export function parseRolloutLine(
  text: string,
  file: string,
  line: number,
  read: ReadOptions = {},
): Omit<RolloutRow, 'index'> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { file, line, errors: [{ file, line, field: '', message: `invalid JSON: ${(e as Error).message}` }] };
  }
  if (isVerlLine(value)) {
    try {
      const step = Number(/(\d+)\.jsonl$/.exec(basename(file))?.[1] ?? NaN);
      value = fromVerlDump(value, file, line, Number.isFinite(step) ? step : undefined, read);
    } catch (e) {
      if (!(e instanceof FieldError)) throw e;
      return { file, line, value, errors: [{ file, line, field: e.field, message: e.message }] };
    }
  }
  const errors = validateRollout(value, file, line);
  return errors.length
    ? { file, line, value, errors }
    : { file, line, record: applyDialect(value as Rollout, read), errors };
}

/** The resolved config of the run `path` is or lies in (its run.json, up to two levels above), and that run's directory. */
export async function runConfigNear(
  path: string,
): Promise<{ dir: string; config: Record<string, unknown> } | undefined> {
  for (const dir of [path, dirname(path), dirname(dirname(path))]) {
    let text: string;
    try {
      text = await readFile(join(dir, 'run.json'), 'utf8');
    } catch {
      continue;
    }
    try {
      const config = (JSON.parse(text) as { config?: unknown }).config;
      return config && typeof config === 'object' ? { dir, config: config as Record<string, unknown> } : undefined;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/**
 * The model directory a run names (run.json's config.model.path: `builtin:NAME` in this install, or a path, relative
 * to the run), for a run dir or a file in one. An older run.json's path into a former install: formerBuiltinName.
 */
export async function runModelDir(path: string): Promise<string | undefined> {
  const run = await runConfigNear(path);
  const p = (run?.config.model as { path?: unknown } | undefined)?.path;
  if (!run || typeof p !== 'string') return undefined;
  try {
    return resolveConfigPath(formerBuiltinName(p) ?? p, run.dir);
  } catch {
    return undefined; // an unknown builtin: name
  }
}

/**
 * The run config's `rollout.dialect` for a path inside a run (the run directory, its rollouts/ folder, or a step
 * file), when it names a known dialect.
 */
export async function runConfigDialect(path: string): Promise<Dialect | undefined> {
  const d = ((await runConfigNear(path))?.config as { rollout?: { dialect?: unknown } } | undefined)?.rollout?.dialect;
  return typeof d === 'string' && (DIALECTS as readonly string[]).includes(d) ? (d as Dialect) : undefined;
}

/** A raw line as shown beside a malformed row's errors: at most 20,000 characters. */
export function rawPreview(text: string, max = 20_000): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

function isVerlLine(v: unknown): v is Record<string, unknown> {
  return (
    typeof v === 'object' &&
    v !== null &&
    !Array.isArray(v) &&
    !('v' in v) &&
    'output' in v &&
    ('input' in v || 'gts' in v || 'score' in v)
  );
}

/**
 * The parts a path stands for, in step order: a JSONL file, or a token-store step directory (its rollouts.parquet
 * or the directory itself); a run's rollouts/ (or any directory): its *.jsonl files and step directories by number
 * (a step recorded both ways is read from its store directory). Each part is a "file" of RolloutRow.
 */
export async function rolloutFiles(path: string): Promise<string[]> {
  const st = await stat(path);
  if (!st.isDirectory()) return basename(path) === STORE_FILES.rollouts ? [dirname(path)] : [path];
  if (await isStoreStep(path)) return [path];
  let dir = path;
  try {
    if ((await stat(join(path, 'rollouts'))).isDirectory()) dir = join(path, 'rollouts');
  } catch {
    /* not a run directory: the directory's own files */
  }
  const names = await readdir(dir);
  const steps = new Set<string>();
  for (const n of names) if (STEP_DIR.test(n) && (await isStoreStep(join(dir, n)))) steps.add(n);
  const parts = [...steps, ...names.filter((n) => n.endsWith('.jsonl') && !steps.has(n.slice(0, -'.jsonl'.length)))];
  const num = (n: string) => {
    const m = /(\d+)(\.jsonl)?$/.exec(n);
    return m ? Number(m[1]) : Number.POSITIVE_INFINITY;
  };
  const val = (n: string) => (n.startsWith('val-') ? 1 : 0);
  parts.sort((a, b) => num(a) - num(b) || val(a) - val(b) || a.localeCompare(b));
  return parts.map((n) => join(dir, n));
}

/** What one committed store step recorded (its `sas.store` metadata): `recorded` of the step's `of` rollouts. */
export interface StepRecording {
  step: number;
  split: string;
  recorded: number;
  of: number;
}

/**
 * What the store steps of a path recorded (the trainer's recorder writes `recorded` and `of` into each step's
 * metadata; a step that does not say, or cannot be read, is left out). Only the steps' footers are read.
 */
export async function storeRecording(path: string): Promise<StepRecording[]> {
  const out: StepRecording[] = [];
  let files: string[];
  try {
    files = await rolloutFiles(path);
  } catch {
    return out;
  }
  for (const f of files) {
    const r = await stepRecording(f);
    if (r) out.push(r);
  }
  return out;
}

/**
 * Beside a JSONL step file of the trainer's recorder (`step-000012.jsonl`): `step-000012.recording.json`, the step's
 * `{step, split, recorded, of}` — what a store step keeps in its `sas.store` metadata.
 */
export const RECORDING_SUFFIX = '.recording.json';

/** What one part of rolloutFiles recorded, when it is a store step or a JSONL step that says (undefined otherwise). */
export async function stepRecording(part: string): Promise<StepRecording | undefined> {
  const stem = part.endsWith('.jsonl') ? part.slice(0, -'.jsonl'.length) : part;
  let info: Partial<StepRecording> | null;
  try {
    if (stem !== part)
      // a JSONL step's recording (its `.recording.json`, written by the recorder since stop 61)
      info = JSON.parse(await readFile(stem + RECORDING_SUFFIX, 'utf8')) as typeof info;
    else if (await isStorePart(part)) info = (await StoreStep.open(part)).info as typeof info;
    else return undefined;
  } catch {
    return undefined; // an older JSONL run or no recorder's file; an unreadable store step is reported by the readers
  }
  const { step, split, recorded, of } = info ?? {};
  if (typeof recorded !== 'number' || typeof of !== 'number') return undefined;
  return {
    step: typeof step === 'number' ? step : stepOfDir(stem),
    split: typeof split === 'string' ? split : basename(part).startsWith('val-') ? 'val' : 'train',
    recorded,
    of,
  };
}

/**
 * The sample a path's training steps are (rollout counts summed over the steps that recorded fewer than they had),
 * undefined when none did: rates over the records are then rates over a sample, which keeps flagged groups always.
 */
export interface Sampling {
  /** Training steps that recorded only part of their rollouts, and how many training steps say what they recorded. */
  steps: number;
  of_steps: number;
  /** Rollouts recorded / of those steps' rollouts. */
  recorded: number;
  of: number;
  /** Per sampled step: recorded / of. */
  by_step: Record<number, { recorded: number; of: number }>;
}

export function samplingOf(recording: readonly StepRecording[]): Sampling | undefined {
  const train = recording.filter((r) => r.split === 'train');
  const sampled = train.filter((r) => r.recorded < r.of);
  if (!sampled.length) return undefined;
  return {
    steps: sampled.length,
    of_steps: train.length,
    recorded: sampled.reduce((t, r) => t + r.recorded, 0),
    of: sampled.reduce((t, r) => t + r.of, 0),
    by_step: Object.fromEntries(sampled.map((r) => [r.step, { recorded: r.recorded, of: r.of }])),
  };
}

/** Whether a part of rolloutFiles is a token-store step (else a JSONL file). */
export async function isStorePart(file: string): Promise<boolean> {
  return !file.endsWith('.jsonl') && (await isStoreStep(file));
}

/**
 * The issue of a store step one of whose files could not be read (StoreFileError): its directory, the file(s) and
 * why; `line` the first row not read (0: the step could not be opened: none was), `count` the step's rows.
 */
export function storeFileIssue(e: StoreFileError, line: number, count?: number): LocatedIssue {
  const unread =
    line === 0 || count === undefined
      ? 'the step was not read'
      : line === 1
        ? `none of the step's ${count} rollouts was read`
        : `rollouts ${line}–${count} of the step's ${count} were not read`;
  return { file: e.dir, line, field: e.files.join(', '), message: `${e.reason}; ${unread}`, unreadable: true };
}

/**
 * Every row of one part, in order, without an index: a JSONL file line by line, a store step in row groups.
 * `tokens`: which token arrays a store reads (a JSONL line always has what it has). A store step whose files cannot
 * be read (missing, cut short, damaged, of another step) ends with one row whose issue names the step, the file and
 * why (storeFileIssue), after the rows read before it: the caller goes on with the next part.
 */
export async function* readPart(
  file: string,
  read: ReadOptions = {},
  signal?: AbortSignal,
  tokens: TokenColumns = 'all',
): AsyncGenerator<Omit<RolloutRow, 'index'>> {
  if (await isStorePart(file)) {
    let step: StoreStep;
    try {
      step = await StoreStep.open(file);
    } catch (e) {
      if (!(e instanceof StoreFileError)) throw e;
      yield { file, line: 0, errors: [storeFileIssue(e, 0)] };
      return;
    }
    for (let from = 0; from < step.count; from += 256) {
      if (signal?.aborted) throw signal.reason ?? new Error('aborted');
      let rows: Awaited<ReturnType<StoreStep['rows']>>;
      try {
        rows = await step.rows(from, from + 256, tokens);
      } catch (e) {
        if (!(e instanceof StoreFileError)) throw e;
        yield { file, line: from + 1, errors: [storeFileIssue(e, from + 1, step.count)] };
        return;
      }
      for (const r of rows)
        yield r.record
          ? { file, line: r.line, record: applyDialect(r.record, read), errors: [] }
          : { file, line: r.line, value: r.value, errors: r.errors };
    }
    return;
  }
  for await (const { line, text, tooLong } of readLines(file, signal)) {
    if (tooLong !== undefined)
      yield { file, line, errors: [{ file, line, field: '', message: tooLongMessage(tooLong) }] };
    else yield parseRolloutLine(text, file, line, read);
  }
}

/** The row at `line` of a part (a JSONL line number, or a store row's number from 1); undefined past its end. */
export async function readPartRow(
  file: string,
  line: number,
  read: ReadOptions = {},
): Promise<(Omit<RolloutRow, 'index'> & { raw?: string }) | undefined> {
  if (await isStorePart(file)) {
    let r: Awaited<ReturnType<StoreStep['rows']>>[number] | undefined;
    try {
      const step = await StoreStep.open(file);
      r = (await step.rows(line - 1, line))[0];
    } catch (e) {
      if (!(e instanceof StoreFileError)) throw e;
      const issue = { ...storeFileIssue(e, line), message: e.reason };
      return { file, line, errors: [issue] };
    }
    if (!r) return undefined;
    return r.record
      ? { file, line, record: applyDialect(r.record, read), errors: [] }
      : { file, line, value: r.value, errors: r.errors, raw: JSON.stringify(r.value ?? null) };
  }
  for await (const l of readLines(file))
    if (l.line === line) return { ...parseRolloutLine(l.text, file, l.line, read), raw: l.text };
  return undefined;
}

export interface StoreOptions {
  follow?: boolean;
  /** How records are read (dialect); the run config's dialect is looked up when the store opens. */
  read?: ReadOptions;
  onProgress?: (p: IndexProgress & { file: string }) => void;
  signal?: AbortSignal;
}

/** One part of a store's sequence of rows: a JSONL file (indexed by lines) or a token-store step. */
interface Part {
  readonly path: string;
  readonly count: number;
  readonly indexBytes: number;
  rows(from: number, to: number, read: ReadOptions, tokens: TokenColumns): Promise<Omit<RolloutRow, 'index'>[]>;
  raw(from: number, to: number): Promise<{ line: number; text: string }[]>;
  update(): Promise<{ reset: boolean }>;
  finish(): Promise<void>;
  close(): Promise<void>;
}

class JsonlPart implements Part {
  constructor(private readonly f: JsonlFile) {}
  get path() {
    return this.f.path;
  }
  get count() {
    return this.f.count;
  }
  get indexBytes() {
    return this.f.indexBytes;
  }
  async rows(from: number, to: number, read: ReadOptions): Promise<Omit<RolloutRow, 'index'>[]> {
    return (await this.f.readRows(from, to)).map((r) => parseRolloutLine(r.text, this.f.path, r.line, read));
  }
  raw(from: number, to: number) {
    return this.f.readRows(from, to);
  }
  update() {
    return this.f.update();
  }
  async finish() {
    await this.f.finish();
  }
  close() {
    return this.f.close();
  }
}

/**
 * Rows [from, to) of a store step as a store reads them (the record with the read options' dialect, or its issues):
 * a {@link RolloutStore}'s part, and the inspector's facts threads (src/core/inspect/factsWorker.ts) reading the
 * same step on their own.
 */
export async function storeStepRows(
  step: StoreStep,
  from: number,
  to: number,
  read: ReadOptions,
  tokens: TokenColumns,
): Promise<Omit<RolloutRow, 'index'>[]> {
  const file = step.dir;
  let rows: Awaited<ReturnType<StoreStep['rows']>>;
  try {
    rows = await step.rows(from, to, tokens);
  } catch (e) {
    if (!(e instanceof StoreFileError)) throw e;
    // each row asked for shows why it could not be read (the inspector lists them as malformed rows)
    const out: Omit<RolloutRow, 'index'>[] = [];
    for (let line = Math.max(0, from) + 1; line <= Math.min(step.count, to); line++)
      out.push({ file, line, errors: [{ ...storeFileIssue(e, line), message: e.reason }] });
    return out;
  }
  return rows.map((r) =>
    r.record
      ? { file, line: r.line, record: applyDialect(r.record, read), errors: [] }
      : { file, line: r.line, value: r.value, errors: r.errors },
  );
}

/** A committed store step whose rollouts.parquet cannot be read: one row, its issue (the step, the file and why). */
class UnreadableStorePart implements Part {
  constructor(
    readonly path: string,
    private readonly error: StoreFileError,
  ) {}
  get count() {
    return 1;
  }
  get indexBytes() {
    return 0;
  }
  async rows(from: number, to: number): Promise<Omit<RolloutRow, 'index'>[]> {
    return from < 1 && to > 0 ? [{ file: this.path, line: 0, errors: [storeFileIssue(this.error, 0)] }] : [];
  }
  async raw(from: number, to: number) {
    return from < 1 && to > 0 ? [{ line: 0, text: this.error.message }] : [];
  }
  async update() {
    return { reset: false };
  }
  async finish() {}
  async close() {}
}

/** A committed store step: immutable, unless a resume removed it or a writer replaced it whole (then reset). */
class StorePart implements Part {
  private constructor(
    private step: StoreStep,
    private stamp: string,
  ) {}
  static async open(dir: string): Promise<StorePart> {
    return new StorePart(await StoreStep.open(dir), await StorePart.stampOf(dir));
  }
  private static async stampOf(dir: string): Promise<string> {
    const st = await stat(join(dir, STORE_FILES.rollouts)).catch(() => undefined);
    return st ? `${st.ino}:${st.size}:${st.mtimeMs}` : 'gone';
  }
  get path() {
    return this.step.dir;
  }
  get count() {
    return this.step.count;
  }
  get indexBytes() {
    return 0;
  }
  rows(from: number, to: number, read: ReadOptions, tokens: TokenColumns): Promise<Omit<RolloutRow, 'index'>[]> {
    return storeStepRows(this.step, from, to, read, tokens);
  }
  async raw(from: number, to: number) {
    return (await this.step.searchTexts(from, to)).map((text, k) => ({ line: from + k + 1, text }));
  }
  async update(): Promise<{ reset: boolean }> {
    const stamp = await StorePart.stampOf(this.step.dir);
    if (stamp === this.stamp) return { reset: false };
    this.stamp = stamp;
    if (stamp !== 'gone') this.step = await StoreStep.open(this.step.dir);
    return { reset: true };
  }
  async finish() {}
  async close() {}
}

export class RolloutStore {
  private files: Part[] = [];
  /** prefix[k] = rows before part k. */
  private prefix: number[] = [0];
  private watchers: FSWatcher[] = [];
  private poll: ReturnType<typeof setInterval> | undefined;
  /** Which token arrays a store step reads for `rows` (set by a reader that needs fewer: the audit's). */
  tokens: TokenColumns = 'all';

  private constructor(
    readonly path: string,
    private readonly options: StoreOptions,
  ) {}

  /** How this store reads records (with the run config's dialect, when there is one). */
  get read(): ReadOptions {
    return this.options.read ?? {};
  }

  static async open(path: string, options: StoreOptions = {}): Promise<RolloutStore> {
    const runDialect = options.read?.runDialect ?? (await runConfigDialect(path));
    const store = new RolloutStore(path, {
      ...options,
      read: { ...options.read, ...(runDialect ? { runDialect } : {}) },
    });
    try {
      for (const f of await rolloutFiles(path)) await store.addFile(f);
    } catch (e) {
      await store.close();
      throw e;
    }
    return store;
  }

  private async addFile(file: string): Promise<void> {
    if (await isStorePart(file)) {
      try {
        this.files.push(await StorePart.open(file));
      } catch (e) {
        if (!(e instanceof StoreFileError)) throw e;
        this.files.push(new UnreadableStorePart(file, e)); // shown as one malformed row; the other steps read
      }
      this.options.onProgress?.({ bytes: 0, totalBytes: 0, rows: this.files[this.files.length - 1]!.count, file });
    } else {
      // Only the last file is followed (has a pending partial line); earlier ones are complete.
      const jf = await JsonlFile.open(file, {
        follow: this.options.follow,
        signal: this.options.signal,
        onProgress: this.options.onProgress && ((p) => this.options.onProgress!({ ...p, file })),
      });
      // A file that is no longer the last is complete: its pending line (if any) is a row.
      const previous = this.files[this.files.length - 1];
      if (previous && this.options.follow) await previous.finish();
      this.files.push(new JsonlPart(jf));
    }
    this.recount();
  }

  private recount(): void {
    this.prefix = [0];
    for (const f of this.files) this.prefix.push(this.prefix[this.prefix.length - 1]! + f.count);
  }

  get count(): number {
    return this.prefix[this.prefix.length - 1]!;
  }

  get fileNames(): string[] {
    return this.files.map((f) => f.path);
  }

  /** Memory held by the indexes. */
  get indexBytes(): number {
    return this.files.reduce((n, f) => n + f.indexBytes, 0);
  }

  /** The part and local row of global row i. */
  private locate(i: number): { k: number; local: number } {
    let lo = 0;
    let hi = this.files.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.prefix[mid]! <= i) lo = mid;
      else hi = mid - 1;
    }
    return { k: lo, local: i - this.prefix[lo]! };
  }

  /** Rows [from, to) part by part. */
  private async collect<T>(
    from: number,
    to: number,
    get: (part: Part, lo: number, hi: number, base: number) => Promise<T[]>,
  ): Promise<T[]> {
    from = Math.max(0, from);
    to = Math.min(this.count, to);
    const out: T[] = [];
    let i = from;
    while (i < to) {
      const { k, local } = this.locate(i);
      const f = this.files[k]!;
      const n = Math.min(to - i, f.count - local);
      out.push(...(await get(f, local, local + n, this.prefix[k]!)));
      i += n;
    }
    return out;
  }

  /**
   * Raw text of rows [from, to): a JSONL row's line; a store row's record without its token arrays, as JSON (what
   * the inspector's text search reads).
   */
  async rawRows(from: number, to: number): Promise<{ index: number; file: string; line: number; text: string }[]> {
    return this.collect(from, to, async (f, lo, hi, base) =>
      (await f.raw(lo, hi)).map((r, k) => ({ index: base + lo + k, file: f.path, line: r.line, text: r.text })),
    );
  }

  /**
   * How rows [from, to) lie in the parts: each part's share as its path, the index of its first row (`base`), its
   * local rows [lo, hi), and whether it is a token-store step (immutable, readable by another thread on its own).
   */
  parts(from: number, to: number): { path: string; base: number; lo: number; hi: number; storeStep: boolean }[] {
    from = Math.max(0, from);
    to = Math.min(this.count, to);
    const out: { path: string; base: number; lo: number; hi: number; storeStep: boolean }[] = [];
    let i = from;
    while (i < to) {
      const { k, local } = this.locate(i);
      const f = this.files[k]!;
      const n = Math.min(to - i, f.count - local);
      out.push({ path: f.path, base: this.prefix[k]!, lo: local, hi: local + n, storeStep: f instanceof StorePart });
      i += n;
    }
    return out;
  }

  /** Parsed, validated rows [from, to) (a store step reads the token arrays `tokens` says; default this.tokens). */
  async rows(from: number, to: number, tokens: TokenColumns = this.tokens): Promise<RolloutRow[]> {
    return this.collect(from, to, async (f, lo, hi, base) =>
      (await f.rows(lo, hi, this.read, tokens)).map((r, k) => ({ index: base + lo + k, ...r })),
    );
  }

  async row(i: number): Promise<RolloutRow | undefined> {
    return (await this.rows(i, i + 1, 'all'))[0];
  }

  /** Picks up appended rows and new files. `reset` when a file was truncated or replaced. */
  async update(): Promise<{ added: number; reset: boolean }> {
    const before = this.count;
    let reset = false;
    for (const f of this.files) {
      const r = await f.update();
      reset ||= r.reset;
    }
    let names: string[] = [];
    try {
      names = await rolloutFiles(this.path);
    } catch {
      /* vanished: keep what we have */
    }
    const known = new Set(this.files.map((f) => f.path));
    if (this.files.some((f) => !names.includes(f.path)) && names.length) {
      // a part went (a resume removed later steps): start over from what is there
      for (const f of this.files) await f.close();
      this.files = [];
      for (const n of names) await this.addFile(n);
      return { added: this.count, reset: true };
    }
    for (const n of names) if (!known.has(n)) await this.addFile(n);
    this.recount();
    return { added: reset ? this.count : this.count - before, reset };
  }

  /** The writer has ended: pending partial lines become rows. */
  async finish(): Promise<void> {
    this.stopWatching();
    await this.update();
    for (const f of this.files) await f.finish();
    this.recount();
  }

  /**
   * Follows the files: calls `onChange` after rows were appended, files appeared, or a file was reset.
   * File-system events where available, plus a poll every `pollMs` (network file systems miss events).
   */
  watch(onChange: (e: { added: number; reset: boolean; count: number }) => void, pollMs = 1000): void {
    let running = false;
    let again = false;
    const tick = async () => {
      if (running) {
        again = true;
        return;
      }
      running = true;
      try {
        do {
          again = false;
          const r = await this.update();
          if (r.added > 0 || r.reset) onChange({ ...r, count: this.count });
        } while (again);
      } finally {
        running = false;
      }
    };
    // the directories and the JSONL files (a store step never changes: its directory is not watched)
    const targets = new Set<string>([
      this.path,
      join(this.path, 'rollouts'),
      ...this.files.filter((f) => f instanceof JsonlPart).map((f) => f.path),
    ]);
    for (const t of targets) {
      try {
        this.watchers.push(watch(t, { persistent: false }, () => void tick()));
      } catch {
        /* polling covers it */
      }
    }
    this.poll = setInterval(() => void tick(), pollMs);
    this.poll.unref?.();
  }

  stopWatching(): void {
    for (const w of this.watchers.splice(0)) w.close();
    if (this.poll) clearInterval(this.poll);
    this.poll = undefined;
  }

  async close(): Promise<void> {
    this.stopWatching();
    await Promise.all(this.files.map((f) => f.close()));
    this.files = [];
    this.recount();
  }
}

/** Streams every row of a path in order without building an index (summaries, conversions). */
export async function* streamRollouts(
  path: string,
  signal?: AbortSignal,
  read: ReadOptions = {},
  tokens: TokenColumns = 'all',
): AsyncGenerator<Omit<RolloutRow, 'index'>> {
  for (const file of await rolloutFiles(path)) yield* readPart(file, read, signal, tokens);
}
