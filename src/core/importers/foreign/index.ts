/**
 * Other engines' per-token dumps, read as our rollout records (docs/engines.md, "Your own run"; run-format.md):
 *
 * | kind | what a user opens | read by |
 * |---|---|---|
 * | `prime-rl` | the output dir, `token_exports/`, a `step_N/` or a `rank_R.jsonl` | primeRl.ts (JSON lines) |
 * | `nemo-rl` | the log dir, a `train_data_stepN.jsonl` | nemoRl.ts (JSON lines) |
 * | `miles` | the `--dump-details` dir (`rollout_data/*.pt`, `train_data/*.pt`, `trajectory/*.jsonl`) | the trainer's Python |
 * | `slime` | the `--save-debug-rollout-data` dir or a `.pt` | the trainer's Python |
 * | `skyrl` | `export_path`, `dumped_data/`, a `global_step_N_training_input.pkl` | the trainer's Python |
 *
 * Pickles and `.pt` files are never unpickled in this process: `python -m search_agent_trainer.dumps` (the trainer's
 * Python) reads them with restricted loaders and writes token samples as JSON lines on its stdout (dumps.py says
 * exactly what loading trusts). Every sample becomes a record through sample.ts, with roles from the tokenizer's
 * chat template where one is given (roles.ts).
 */
import { spawn } from 'node:child_process';
import { readdir, stat } from 'node:fs/promises';
import { basename, dirname, extname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { packageRoot } from '../../paths';
import { findPython, pythonCandidates } from '../../python';
import { derivedFields } from '../../run/fields';
import {
  type LocatedIssue,
  type ReadOptions,
  ROLLOUT_RECORD_VERSION,
  type Rollout,
  rolloutContext,
  validateRollout,
} from '../../run/format';
import { extractQuestion } from '../../tags/transcript';
import { firstLineKeys } from '../keys';
import { NEMO_FILE, nemoRlFiles, readNemoRl } from './nemoRl';
import { primeRlFiles, readPrimeRl, type SampleItem } from './primeRl';
import { templateMarkers } from './roles';
import {
  FOREIGN_KINDS,
  type ForeignKind,
  GroupKeeper,
  PieceCache,
  recordOfSample,
  type SampleCodec,
  SampleError,
  type TokenSample,
} from './sample';

export { FOREIGN_KINDS, type ForeignKind } from './sample';

/** A dump file named by its rollout id (slime's `{rollout_id}`: `3.pt`, `rollout_3.pt`, `eval_3.pt`). */
const SLIME_FILE = /(^|[_-])(eval_)?\d+\.pt$/;

export function isForeignKind(k: string): k is ForeignKind {
  return (FOREIGN_KINDS as readonly string[]).includes(k);
}

/** The engines whose dumps the trainer's Python reads (pickles and `.pt`). */
export const PYTHON_KINDS: readonly ForeignKind[] = ['miles', 'slime', 'skyrl'];

/** The tokenizer a reader decodes with: `encode` is not needed, the chat template is. */
export interface ForeignCodec {
  name: string;
  decode(ids: readonly number[]): string;
  chatTemplate?: string;
}

export interface ForeignOptions {
  /** The model's tokenizer: token text, and roles from its chat template. Without one, text shows ids and roles restate the mask. */
  tokenizer?: ForeignCodec;
  /** The Python that reads pickles and `.pt` files (default: the trainer's, as `train` finds it). */
  python?: string;
  /** Load pickles and `.pt` files the restricted loaders refuse (runs code the file names): only for dumps you trust. */
  trustPickle?: boolean;
  /** TRL completion tables: the reward functions' columns (`--reward-columns`; trl.ts says what is assumed without). */
  rewardColumns?: readonly string[];
  /** Only complete steps of a run still writing (prime-rl's STABLE markers). */
  stableOnly?: boolean;
  /** Told what the user should know (a file loaded with full unpickling, a tokenizer without a chat template). */
  onNote?: (note: string) => void;
  read?: ReadOptions;
  signal?: AbortSignal;
  /** GRPO groups found so far (a reader converting a source file by file keeps one across files). */
  groups?: GroupKeeper;
}

export interface ForeignItem {
  record?: Rollout;
  issues: LocatedIssue[];
  where?: string;
}

async function isDir(p: string): Promise<boolean> {
  return stat(p).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

async function names(dir: string): Promise<string[]> {
  return readdir(dir).catch(() => [] as string[]);
}

/** Which engine's JSON lines a file holds, by its name and first line. */
export async function jsonlForeignKind(file: string): Promise<ForeignKind | undefined> {
  if (NEMO_FILE.test(basename(file))) return 'nemo-rl';
  // scanned as a stream until the keys decide: a long sequence's loss_mask comes after megabytes of token_ids
  const keys = await firstLineKeys(file, { enough: (k) => jsonlKindOfKeys(k) !== undefined });
  return jsonlKindOfKeys(keys);
}

function jsonlKindOfKeys(keys: ReadonlySet<string>): ForeignKind | undefined {
  if (keys.has('token_ids') && keys.has('token_loss_mask')) return 'nemo-rl';
  if (
    keys.has('token_ids') &&
    keys.has('loss_mask') &&
    (keys.has('schema_version') || keys.has('trainer_logprobs') || keys.has('inference_logprobs'))
  )
    return 'prime-rl';
  return undefined;
}

/** Which engine's dump a path is (a file or a folder), if any. */
export async function detectForeign(path: string): Promise<ForeignKind | undefined> {
  if (!(await isDir(path))) {
    const ext = extname(path);
    if (ext === '.pkl') return 'skyrl';
    if (ext === '.pt')
      return basename(dirname(path)) === 'rollout_data' && (await isDir(join(dirname(path), '..', 'train_data')))
        ? 'miles'
        : 'slime';
    if (ext === '.jsonl') return jsonlForeignKind(path);
    return undefined;
  }
  const here = await names(path);
  if (
    here.includes('token_exports') ||
    /^token_exports$|^step_\d+$/.test(basename(path)) ||
    (await Promise.all(here.map((n) => isDir(join(path, n, 'token_exports'))))).some(Boolean)
  ) {
    if ((await primeRlFiles(path)).length) return 'prime-rl';
  }
  if (here.includes('rollout_data') && (await names(join(path, 'rollout_data'))).some((n) => n.endsWith('.pt'))) {
    return here.includes('train_data') || here.includes('trajectory') || here.includes('dashboard_columns')
      ? 'miles'
      : 'slime';
  }
  if (here.includes('dumped_data') && (await names(join(path, 'dumped_data'))).some((n) => n.endsWith('.pkl')))
    return 'skyrl';
  if (here.some((n) => /^global_step_\d+.*\.pkl$/.test(n))) return 'skyrl';
  // slime's --save-debug-rollout-data path template names files by rollout id (`rollout_{rollout_id}.pt`)
  if (here.some((n) => SLIME_FILE.test(n))) return 'slime';
  if ((await nemoRlFiles(path)).length) return 'nemo-rl';
  return undefined;
}

/**
 * The files of a foreign source, in the order their records come (by step), each read on its own by `readForeign`;
 * with `stableOnly`, prime-rl steps every rank has flushed.
 */
export async function foreignFiles(path: string, kind: ForeignKind, stableOnly = false): Promise<string[]> {
  if (!(await isDir(path))) return [path];
  const byNumber = (dir: string, test: (n: string) => boolean) =>
    names(dir).then((ns) =>
      ns
        .filter(test)
        .map((n) => ({
          n,
          k: /^eval_/.test(n) ? 1 : 0,
          step: Number(/(\d+)(?:_training_input)?\.(?:pt|pkl)$/.exec(n)?.[1] ?? /(\d+)/.exec(n)?.[1] ?? 0),
        }))
        .sort((a, b) => a.step - b.step || a.k - b.k || a.n.localeCompare(b.n))
        .map((x) => join(dir, x.n)),
    );
  switch (kind) {
    case 'prime-rl':
      return primeRlFiles(path, stableOnly);
    case 'nemo-rl':
      return nemoRlFiles(path);
    case 'skyrl': {
      const dir = (await isDir(join(path, 'dumped_data'))) ? join(path, 'dumped_data') : path;
      return byNumber(dir, (n) => n.endsWith('.pkl'));
    }
    default: {
      const dir = (await isDir(join(path, 'rollout_data'))) ? join(path, 'rollout_data') : path;
      return byNumber(dir, (n) => SLIME_FILE.test(n));
    }
  }
}

/** The trainer's Python for the dump reader: the one given, else the first candidate with torch. */
export async function dumpPython(given?: string): Promise<string> {
  if (given) return given;
  const search = await findPython(pythonCandidates([], [process.cwd(), packageRoot()]));
  if (!search.found)
    throw new Error(
      `reading pickles and .pt files needs the trainer's Python (with torch); none found (tried ${search.tried.map((t) => `${t.executable}: ${t.error ?? 'unusable'}`).join('; ')}); pass --python`,
    );
  return search.found.executable;
}

type PyLine = { sample?: TokenSample; issue?: LocatedIssue; note?: string; file?: string; samples?: number };

/** Token samples from `python -m search_agent_trainer.dumps` (streamed; the child is killed if the reader stops early). */
async function* readWithPython(path: string, kind: ForeignKind, o: ForeignOptions): AsyncGenerator<SampleItem> {
  const python = await dumpPython(o.python);
  const trainer = join(packageRoot(), 'trainer');
  const args = ['-m', 'search_agent_trainer.dumps', path, '--kind', kind, ...(o.trustPickle ? ['--trust-pickle'] : [])];
  const child = spawn(python, args, {
    env: {
      ...process.env,
      PYTHONPATH: [trainer, process.env.PYTHONPATH].filter(Boolean).join(':'),
      PYTHONUNBUFFERED: '1',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d: string) => (stderr = (stderr + d).slice(-4000)));
  const exited = new Promise<number | null>((resolve) => {
    child.once('error', (e) => {
      stderr += `\n${e.message}`;
      resolve(-1);
    });
    child.once('close', (code) => resolve(code));
  });
  const onAbort = () => child.kill('SIGTERM');
  o.signal?.addEventListener('abort', onAbort, { once: true });
  let finished = false;
  try {
    const rl = createInterface({ input: child.stdout, crlfDelay: Infinity });
    for await (const text of rl) {
      if (!text.trim()) continue;
      let m: PyLine;
      try {
        m = JSON.parse(text) as PyLine;
      } catch {
        o.onNote?.(`${path}: the dump reader wrote a line that is not JSON: ${text.slice(0, 200)}`);
        continue;
      }
      if (m.sample) yield { sample: m.sample };
      else if (m.issue) yield { issues: [m.issue] };
      else if (m.note) o.onNote?.(m.note);
    }
    const code = await exited;
    finished = true;
    if (code !== 0 && code !== 2)
      throw new Error(
        `${path}: the dump reader (${python} -m search_agent_trainer.dumps) failed (exit ${code}): ${stderr.trim().split('\n').slice(-3).join(' ')}`,
      );
  } finally {
    o.signal?.removeEventListener('abort', onAbort);
    if (!finished) child.kill('SIGTERM');
  }
}

/** A codec with the chat template's markers worked out once. */
export function sampleCodec(t: ForeignCodec, onNote?: (note: string) => void): SampleCodec {
  const markers = t.chatTemplate ? templateMarkers(t.chatTemplate) : undefined;
  if (!t.chatTemplate)
    onNote?.(
      `${t.name}: no chat_template (tokenizer_config.json): roles are read from <information> and <tool_response> blocks, the prompt ends at the dump's prompt length or first trained token`,
    );
  else if (!markers)
    onNote?.(
      `${t.name}: its chat template does not render a separate assistant turn: roles are read from <information> and <tool_response> blocks only`,
    );
  return { name: t.name, decode: (ids) => t.decode(ids), ...(markers ? { markers } : {}) };
}

/** The token samples of a foreign source (before conversion; NeMo-RL's held-out texts come as records). */
export async function* foreignSamples(
  path: string,
  kind: ForeignKind,
  o: ForeignOptions = {},
): AsyncGenerator<SampleItem | { record: Rollout; where: string }> {
  switch (kind) {
    case 'prime-rl':
      yield* readPrimeRl(path, await primeRlFiles(path, o.stableOnly));
      return;
    case 'nemo-rl':
      for await (const item of readNemoRl(path)) {
        if ('text' in item && item.text) {
          const t = item.text;
          const rec: Rollout = {
            v: ROLLOUT_RECORD_VERSION,
            id: `nemo-rl:${t.split}:${t.step ?? 'x'}:0:${t.line}`,
            ...(t.step !== undefined ? { step: t.step } : {}),
            split: t.split,
            ...(extractQuestion(t.prompt) ? { question: extractQuestion(t.prompt)! } : {}),
            prompt: t.prompt,
            response: t.response,
            ...(t.reward !== undefined ? { reward: t.reward } : {}),
            ...derivedFields(
              t.response,
              rolloutContext({ v: 1, id: '', prompt: t.prompt, response: t.response }, o.read),
            ),
            meta: { source: t.file, line: t.line, engine: 'nemo-rl' },
          };
          yield { record: rec, where: `${t.file}:${t.line}` };
        } else yield item as SampleItem;
      }
      return;
    default:
      yield* readWithPython(path, kind, o);
  }
}

/**
 * The records of a foreign source, in order: each sample converted (sample.ts) and validated; a sample that cannot
 * be read or converted is an issue naming its file, line and field, and the others go on.
 */
export async function* readForeign(
  path: string,
  kind: ForeignKind,
  o: ForeignOptions = {},
): AsyncGenerator<ForeignItem> {
  const codec = o.tokenizer ? sampleCodec(o.tokenizer, o.onNote) : undefined;
  if (!codec)
    o.onNote?.(
      `${path}: no tokenizer given: token text shows ids and roles restate the dump's loss mask (pass --tokenizer <model dir|tokenizer.json> to read roles from the chat template)`,
    );
  const pieces = codec ? new PieceCache(codec) : undefined;
  const groups = o.groups ?? new GroupKeeper();
  for await (const item of foreignSamples(path, kind, o)) {
    if ('record' in item && item.record) {
      yield { record: item.record, issues: [], where: item.where };
      continue;
    }
    const it = item as SampleItem;
    if (!it.sample) {
      yield { issues: it.issues!, where: it.issues![0] ? `${it.issues![0].file}:${it.issues![0].line}` : undefined };
      continue;
    }
    const s = it.sample;
    const where = `${s.file}:${s.line}`;
    let rec: Rollout;
    try {
      rec = recordOfSample(s, groups, { ...(codec ? { codec } : {}), ...(o.read ? { read: o.read } : {}) }, pieces);
    } catch (e) {
      if (!(e instanceof SampleError)) throw e;
      yield { issues: [{ file: s.file, line: s.line, field: e.field, message: e.message }], where };
      continue;
    }
    const issues = validateRollout(rec, s.file, s.line);
    yield issues.length ? { issues, where } : { record: rec, issues: [], where };
  }
}
