/**
 * The importers' front door: every source we read, as a stream of rollout records (or dataset examples),
 * plus detection of what a path holds (for `inspect`).
 */
import { createReadStream } from 'node:fs';
import { open, readFile, readdir, stat } from 'node:fs/promises';
import { basename, extname, join } from 'node:path';
import { createInterface } from 'node:readline';
import type { LocatedIssue, ReadOptions, Rollout } from '../run/format';
import { validateRollout } from '../run/format';
import { readLines } from '../store/jsonl';
import { readPart, rolloutFiles, runConfigDialect } from '../store/rollouts';
import { isStoreStep, STORE_FILES, type TokenColumns } from '../store/tokenStore';
import { importSearchR1Dataset, type DatasetExample, type DatasetImportIssue } from './dataset';
import { importSearchR1Transcripts } from './searchr1';
import { importTrlCompletions } from './trl';
import { FieldError, fromVerlDump } from './verl';

export type SourceKind = 'rollouts' | 'searchr1' | 'verl' | 'trl';
export const IMPORT_KINDS = ['searchr1', 'verl', 'trl', 'searchr1-dataset'] as const;
export type ImportKind = (typeof IMPORT_KINDS)[number];

export interface SourceItem {
  record?: Rollout;
  issues: LocatedIssue[];
  /** Where the item came from: `file:line` (or `file:row` for parquet). */
  where?: string;
}

/** Thrown when a path cannot be read as any source we know (the CLI exits 2 with its message). */
export class UnreadableInput extends Error {
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`${path}: ${why}`);
    this.name = 'UnreadableInput';
  }
}

async function firstLine(path: string): Promise<string | undefined> {
  const rl = createInterface({ input: createReadStream(path, { encoding: 'utf8', end: 1 << 20 }), crlfDelay: Infinity });
  try {
    for await (const line of rl) if (line.trim()) return line;
  } finally {
    rl.close();
  }
  return undefined;
}

async function statOrThrow(path: string) {
  try {
    return await stat(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UnreadableInput(path, code === 'ENOENT' ? 'no such file or directory' : code === 'EACCES' ? 'permission denied' : (e as Error).message);
  }
}

/** What a path holds: our rollouts (file or run directory), veRL dumps, TRL completion tables, or transcripts. */
export async function detectSource(path: string): Promise<SourceKind> {
  const st = await statOrThrow(path);
  if (st.isDirectory()) {
    if (await isStoreStep(path)) return 'rollouts';
    const names = await readdir(path);
    if (names.includes('completions') || names.some((n) => /^completions_\d+\.parquet$/.test(n))) return 'trl';
    if (names.includes('run.json') || names.includes('rollouts')) return 'rollouts';
    const jsonl = (await rolloutFiles(path)).filter((f) => f.endsWith('.jsonl'));
    if (jsonl.length === 0) throw new UnreadableInput(path, 'a directory with no run.json, rollouts/, *.jsonl or completions_*.parquet');
    return jsonlKind(jsonl[0]!);
  }
  if (basename(path) === STORE_FILES.rollouts && (await isStoreStep(join(path, '..')))) return 'rollouts';
  if (extname(path) === '.parquet') return 'trl';
  if (extname(path) === '.jsonl' || extname(path) === '.json') return jsonlKind(path);
  return 'searchr1';
}

async function jsonlKind(file: string): Promise<SourceKind> {
  const line = await firstLine(file);
  if (line === undefined) return 'rollouts';
  try {
    const o = JSON.parse(line) as Record<string, unknown>;
    if ('output' in o && ('input' in o || 'score' in o)) return 'verl';
  } catch {
    /* malformed first line: reported when read */
  }
  return 'rollouts';
}

/**
 * Whether a JSONL file holds rollouts the Reward Lab can score — by place (`rollouts/step-N.jsonl`,
 * `rollouts/val-step-N.jsonl` of a run; never a run's metrics.jsonl or events.jsonl) or by content (the first line
 * is a rollout record or a veRL dump line; a dataset or a corpus is not). Reads at most the first 64 KB.
 */
export async function rolloutFileKind(file: string): Promise<'rollouts' | 'verl' | undefined> {
  const name = basename(file);
  if (/[\\/]rollouts[\\/](val-)?step-\d+\.jsonl$/.test(file)) return 'rollouts';
  if (name === 'metrics.jsonl' || name === 'events.jsonl' || !name.endsWith('.jsonl')) return undefined;
  let head: string;
  try {
    const h = await open(file, 'r');
    try {
      const buf = Buffer.alloc(64 * 1024);
      const { bytesRead } = await h.read(buf, 0, buf.length, 0);
      head = buf.subarray(0, bytesRead).toString('utf8');
    } finally {
      await h.close();
    }
  } catch {
    return undefined;
  }
  const line = head.split('\n').find((l) => l.trim()) ?? '';
  const keys = new Set([...line.matchAll(/"([A-Za-z_]+)"\s*:/g)].map((m) => m[1]));
  if (keys.has('response') && keys.has('prompt')) return 'rollouts';
  if (keys.has('output') && (keys.has('input') || keys.has('score'))) return 'verl';
  return undefined;
}

/**
 * The records of a source, in order; malformed items come with their issues and no record. `read` says how
 * responses are read (a dialect to force, the search tool); a run's config gives the dialect otherwise.
 */
export async function* readSource(path: string, kind?: SourceKind, read: ReadOptions = {}, tokens: TokenColumns = 'all'): AsyncGenerator<SourceItem> {
  const k = kind ?? (await detectSource(path));
  await statOrThrow(path);
  switch (k) {
    case 'rollouts': {
      const runDialect = read.runDialect ?? (await runConfigDialect(path));
      const options = { ...read, ...(runDialect ? { runDialect } : {}) };
      for (const file of await rolloutFiles(path)) {
        for await (const row of readPart(file, options, undefined, tokens)) {
          yield row.record ? { record: row.record, issues: [], where: `${file}:${row.line}` } : { issues: row.errors, where: `${file}:${row.line}` };
        }
      }
      return;
    }
    case 'verl':
      for (const file of await rolloutFiles(path)) {
        const stepFromName = Number(/(\d+)\.jsonl$/.exec(basename(file))?.[1] ?? NaN);
        for await (const { line, text } of readLines(file)) {
          let obj: unknown;
          try {
            obj = JSON.parse(text);
          } catch (e) {
            yield { issues: [{ file, line, field: '', message: `invalid JSON: ${(e as Error).message}` }] };
            continue;
          }
          if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) {
            yield { issues: [{ file, line, field: '', message: 'expected a JSON object' }] };
            continue;
          }
          try {
            yield checked(fromVerlDump(obj as Record<string, unknown>, file, line, Number.isFinite(stepFromName) ? stepFromName : undefined, read), file, line);
          } catch (e) {
            if (!(e instanceof FieldError)) throw e;
            yield { issues: [{ file, line, field: e.field, message: e.message }] };
          }
        }
      }
      return;
    case 'trl':
      for (const file of await trlFiles(path)) {
        let n = 0;
        for await (const record of importTrlCompletions(file, read)) yield checked(record, file, ++n);
      }
      return;
    case 'searchr1': {
      let text: string;
      try {
        text = await readFile(path, 'utf8');
      } catch (e) {
        throw new UnreadableInput(path, (e as Error).message);
      }
      const records = importSearchR1Transcripts(text, path, read);
      if (records.length === 0) throw new UnreadableInput(path, 'no conversation found (expected transcripts: prompt and response text, Search-R1 tags or tool calls)');
      for (const r of records) yield checked(r, path, Number(r.meta?.line ?? 0));
      return;
    }
  }
}

/** Our own records are validated too, so an importer bug surfaces as an issue rather than a bad file. */
function checked(record: Rollout, file: string, line: number): SourceItem {
  const issues = validateRollout(record, file, line);
  return issues.length ? { issues, where: `${file}:${line}` } : { record, issues: [], where: `${file}:${line}` };
}

async function trlFiles(path: string): Promise<string[]> {
  const st = await statOrThrow(path);
  if (!st.isDirectory()) return [path];
  const dir = (await readdir(path)).includes('completions') ? join(path, 'completions') : path;
  const names = (await readdir(dir)).filter((n) => /^completions_\d+\.parquet$/.test(n)).sort();
  if (names.length === 0) throw new UnreadableInput(path, 'no completions_*.parquet files');
  return names.map((n) => join(dir, n));
}

export async function* importDataset(path: string, issues: DatasetImportIssue[]): AsyncGenerator<DatasetExample> {
  await statOrThrow(path);
  yield* importSearchR1Dataset(path, issues);
}

export function importKindToSource(kind: ImportKind): SourceKind | 'dataset' {
  return kind === 'searchr1-dataset' ? 'dataset' : kind;
}
