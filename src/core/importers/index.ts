/**
 * The importers' front door: every source we read, as a stream of rollout records (or dataset examples),
 * plus detection of what a path holds (for `inspect`).
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, extname, join } from 'node:path';
import type { LocatedIssue, ReadOptions, Rollout } from '../run/format';
import { validateRollout } from '../run/format';
import { readLines, tooLongMessage } from '../store/jsonl';
import { readPart, rolloutFiles, runConfigDialect } from '../store/rollouts';
import { isStoreStep, STORE_FILES, type TokenColumns } from '../store/tokenStore';
import { FieldError, fromVerlDump } from '../store/verlDump';
import { type DatasetExample, type DatasetImportIssue, importSearchR1Dataset } from './dataset';
import {
  detectForeign,
  FOREIGN_KINDS,
  type ForeignKind,
  type ForeignOptions,
  isForeignKind,
  jsonlForeignKind,
  readForeign,
  sampleCodec,
} from './foreign';
import { PieceCache, withInferredRoles } from './foreign/sample';
import { binaryKind, binaryMessage, firstLineKeys } from './keys';
import { importSearchR1Transcripts } from './searchr1';
import { importTrlCompletions } from './trl';

export type SourceKind = 'rollouts' | 'searchr1' | 'verl' | 'trl' | ForeignKind;
/** What `import <kind>` converts; `auto` detects it as `inspect` does. */
export const IMPORT_KINDS = ['auto', 'searchr1', 'verl', 'trl', ...FOREIGN_KINDS, 'searchr1-dataset'] as const;
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

async function statOrThrow(path: string) {
  let st;
  try {
    st = await stat(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UnreadableInput(
      path,
      code === 'ENOENT' ? 'no such file or directory' : code === 'EACCES' ? 'permission denied' : (e as Error).message,
    );
  }
  // A FIFO, socket or device would block the reader (or never end): only files and directories are read.
  if (!st.isFile() && !st.isDirectory())
    throw new UnreadableInput(
      path,
      `not a regular file or directory (${st.isFIFO() ? 'a FIFO' : st.isSocket() ? 'a socket' : 'a device'}); name a file`,
    );
  return st;
}

/**
 * What a path holds: our rollouts (file or run directory), veRL dumps, TRL completion tables, transcripts, or another
 * engine's per-token dump (prime-rl, NeMo-RL, miles, slime, SkyRL: src/core/importers/foreign).
 */
export async function detectSource(path: string): Promise<SourceKind> {
  const st = await statOrThrow(path);
  if (st.isDirectory()) {
    if (await isStoreStep(path)) return 'rollouts';
    const names = await readdir(path);
    if (names.includes('completions') || names.some((n) => /^completions_\d+\.parquet$/.test(n))) return 'trl';
    if (names.includes('run.json')) return 'rollouts';
    // Another engine's dump before a `rollouts/` of ours: prime-rl's output dir has a rollouts/ of its own
    // (step_N/rank_R.bin, traces.jsonl) beside its token_exports/.
    const foreign = await detectForeign(path);
    if (foreign) return foreign;
    if (names.includes('rollouts')) return 'rollouts';
    const jsonl = (await rolloutFiles(path)).filter((f) => f.endsWith('.jsonl'));
    if (jsonl.length === 0)
      throw new UnreadableInput(path, 'a directory with no run.json, rollouts/, *.jsonl or completions_*.parquet');
    return jsonlKind(jsonl[0]!);
  }
  if (basename(path) === STORE_FILES.rollouts && (await isStoreStep(join(path, '..')))) return 'rollouts';
  if (extname(path) === '.parquet') return 'trl';
  if (extname(path) === '.pt' || extname(path) === '.pkl') return (await detectForeign(path))!;
  await refuseBinary(path);
  if (extname(path) === '.jsonl' || extname(path) === '.json') return (await jsonlForeignKind(path)) ?? jsonlKind(path);
  return 'searchr1';
}

/** A file read as text that is compressed or binary is refused, naming what it is (never read as a transcript). */
async function refuseBinary(path: string): Promise<void> {
  const binary = await binaryKind(path);
  if (binary) throw new UnreadableInput(path, binaryMessage(binary, path));
}

/** Whether a JSON line's top-level keys are a veRL dump line's (`output`, with `input` or `score`). */
const isVerlLine = (k: ReadonlySet<string>) => k.has('output') && (k.has('input') || k.has('score'));

async function jsonlKind(file: string): Promise<SourceKind> {
  // the first line's keys, scanned without parsing its values (a veRL line may be megabytes long)
  return isVerlLine(await firstLineKeys(file, { enough: isVerlLine })) ? 'verl' : 'rollouts';
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
  const keys = await firstLineKeys(file, {
    maxBytes: 64 * 1024,
    enough: (k) => (k.has('response') && k.has('prompt')) || isVerlLine(k),
  });
  if (keys.has('response') && keys.has('prompt')) return 'rollouts';
  return isVerlLine(keys) ? 'verl' : undefined;
}

/**
 * The records of a source, in order; malformed items come with their issues and no record. `read` says how
 * responses are read (a dialect to force, the search tool); a run's config gives the dialect otherwise. `foreign`:
 * how other engines' dumps are read (their tokenizer, the Python that reads pickles and `.pt` files).
 */
export async function* readSource(
  path: string,
  kind?: SourceKind,
  read: ReadOptions = {},
  tokens: TokenColumns = 'all',
  foreign: ForeignOptions = {},
): AsyncGenerator<SourceItem> {
  const k = kind ?? (await detectSource(path));
  await statOrThrow(path);
  if (isForeignKind(k)) {
    yield* readForeign(path, k, { ...foreign, read });
    return;
  }
  switch (k) {
    case 'rollouts': {
      const runDialect = read.runDialect ?? (await runConfigDialect(path));
      const options = { ...read, ...(runDialect ? { runDialect } : {}) };
      // records whose roles restate their engine's mask (the drop-in recorders'): roles from the chat template instead
      const codec = foreign.tokenizer ? sampleCodec(foreign.tokenizer) : undefined;
      const pieces = codec ? new PieceCache(codec) : undefined;
      for (const file of await rolloutFiles(path)) {
        for await (const row of readPart(file, options, undefined, tokens)) {
          yield row.record
            ? {
                record: codec ? withInferredRoles(row.record, codec, pieces) : row.record,
                issues: [],
                where: `${file}:${row.line}`,
              }
            : { issues: row.errors, where: `${file}:${row.line}` };
        }
      }
      return;
    }
    case 'verl':
      for (const file of await rolloutFiles(path)) {
        const stepFromName = Number(/(\d+)\.jsonl$/.exec(basename(file))?.[1] ?? NaN);
        for await (const { line, text, tooLong } of readLines(file)) {
          if (tooLong !== undefined) {
            yield { issues: [{ file, line, field: '', message: tooLongMessage(tooLong) }] };
            continue;
          }
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
            yield checked(
              fromVerlDump(
                obj as Record<string, unknown>,
                file,
                line,
                Number.isFinite(stepFromName) ? stepFromName : undefined,
                read,
              ),
              file,
              line,
            );
          } catch (e) {
            if (!(e instanceof FieldError)) throw e;
            yield { issues: [{ file, line, field: e.field, message: e.message }] };
          }
        }
      }
      return;
    case 'trl': {
      // which columns are rewards, said once per source (every table of a run has the same columns)
      const said = new Set<string>();
      const onNote = (n: string) => {
        if (said.has(n)) return;
        said.add(n);
        foreign.onNote?.(n);
      };
      const trl = { ...(foreign.rewardColumns ? { rewardColumns: foreign.rewardColumns } : {}), onNote };
      for (const file of await trlFiles(path)) {
        let n = 0;
        for await (const record of importTrlCompletions(file, read, trl)) yield checked(record, file, ++n);
      }
      return;
    }
    case 'searchr1': {
      await refuseBinary(path);
      let text: string;
      try {
        text = await readFile(path, 'utf8');
      } catch (e) {
        throw new UnreadableInput(path, (e as Error).message);
      }
      const records = importSearchR1Transcripts(text, path, read);
      if (records.length === 0)
        throw new UnreadableInput(
          path,
          'no conversation found (expected transcripts: prompt and response text, Search-R1 tags or tool calls)',
        );
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
  if ((await statOrThrow(path)).isDirectory())
    throw new UnreadableInput(
      path,
      'is a directory; expected a Search-R1 dataset parquet file (train.parquet or test.parquet)',
    );
  yield* importSearchR1Dataset(path, issues);
}

/**
 * The files reading `path` as `kind` takes (detected when absent): what a command that writes a file must not
 * overwrite. Empty when `path` does not exist.
 */
export async function sourceFiles(path: string, kind?: SourceKind | 'dataset'): Promise<string[]> {
  const st = await stat(path).catch(() => undefined);
  if (!st) return [];
  if (!st.isDirectory()) return [path];
  const k = kind ?? (await detectSource(path).catch(() => undefined));
  if (k === 'trl') return trlFiles(path).catch(() => []);
  if (k === 'rollouts' || k === 'verl') return rolloutFiles(path).catch(() => []);
  return (await readdir(path, { withFileTypes: true })).filter((d) => d.isFile()).map((d) => join(path, d.name));
}

export function importKindToSource(kind: Exclude<ImportKind, 'auto'>): SourceKind | 'dataset' {
  return kind === 'searchr1-dataset' ? 'dataset' : kind;
}
