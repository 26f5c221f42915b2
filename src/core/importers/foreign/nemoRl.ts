/**
 * NeMo-RL's training data (nemo_rl/algorithms/grpo.py, unless `env.should_log_nemo_gym_responses`):
 * `<log_dir>/train_data_step<N>.jsonl` through `Logger.log_batched_dict_as_jsonl`, which writes one line per sample
 * from a one-row slice of the batch — so every value is wrapped in a list: per-token fields are `[[…]]`, per-sample
 * ones `[x]` (a reader unwraps one level when it finds one). Fields: `content` (the conversation's message texts),
 * `rewards`, `filtered_rewards` (dynamic sampling), `input_lengths` (the real length: the batch is right-padded to
 * its longest), `token_ids`, `token_loss_mask`, `sample_loss_mask` (0: the whole sample excluded — the loss's mask
 * is token_loss_mask × sample_loss_mask, and so is the record's), `advantages`,
 * `generation_logprobs` (the sampler's), `prev_logprobs` (the trainer's old log-probs), `agent_ref`, and `idx`
 * (the line's number). Log-probs are aligned with the ids (position 0 holds 0). `val_data_step<N>.jsonl` holds
 * the held-out `content` (message logs) and `rewards`, without tokens; distillation and grpo_sync may write train
 * lines without `token_ids` too: those are read as texts.
 */
import { readdir, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { messageText } from '../../run/fields';
import type { SampleItem } from './primeRl';
import { readJsonLines, SampleError, type TokenSample } from './sample';

export const NEMO_FILE = /^(train|val)_data_step(\d+)\.jsonl$/;

/** One level of NeMo-RL's one-row wrapping, when present. */
function unwrap(v: unknown): unknown {
  return Array.isArray(v) && v.length === 1 ? v[0] : v;
}

const num = (v: unknown): number | undefined => {
  const x = unwrap(v);
  return typeof x === 'number' && Number.isFinite(x) ? x : undefined;
};

function tokenList(o: Record<string, unknown>, k: string, required: boolean): unknown[] | undefined {
  let v = o[k];
  if (v === undefined || v === null) {
    if (required) throw new SampleError(k, 'missing (a list per token)');
    return undefined;
  }
  // [[…]] (a one-row slice) or […]
  if (Array.isArray(v) && v.length === 1 && Array.isArray(v[0])) v = v[0];
  if (!Array.isArray(v)) throw new SampleError(k, `expected a list per token, got ${typeof v}`);
  return v;
}

/** The files of a NeMo-RL log directory (or the file itself), train before val within a step, by step. */
export async function nemoRlFiles(path: string): Promise<string[]> {
  if (
    !(await stat(path).then(
      (s) => s.isDirectory(),
      () => false,
    ))
  )
    return [path];
  const found: string[] = [];
  const walk = async (dir: string, depth: number) => {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (e.isFile() && NEMO_FILE.test(e.name)) found.push(join(dir, e.name));
      else if (e.isDirectory() && depth < 2 && !e.name.startsWith('.')) await walk(join(dir, e.name), depth + 1);
    }
  };
  await walk(path, 0);
  const key = (f: string) => {
    const m = NEMO_FILE.exec(basename(f))!;
    return Number(m[2]) * 2 + (m[1] === 'val' ? 1 : 0);
  };
  return found.sort((a, b) => key(a) - key(b) || a.localeCompare(b));
}

/** A train_data line as a token sample (padding cut at input_lengths). */
export function nemoRlSample(o: Record<string, unknown>, file: string, line: number): TokenSample {
  const m = NEMO_FILE.exec(basename(file));
  const step = m ? Number(m[2]) : undefined;
  const ids = tokenList(o, 'token_ids', true)!;
  const length = num(o.input_lengths);
  if (o.input_lengths !== undefined && (length === undefined || !Number.isInteger(length) || length < 0))
    throw new SampleError(
      'input_lengths',
      `expected the sample's length (an integer), got ${JSON.stringify(o.input_lengths)}`,
    );
  const n = Math.min(ids.length, length ?? ids.length);
  const cut = (k: string, required = false) => {
    const v = tokenList(o, k, required);
    if (!v) return undefined;
    if (v.length < n)
      throw new SampleError(k, `has ${v.length} entries but the sample has ${n} tokens (input_lengths)`);
    return v.slice(0, n);
  };
  // NeMo-RL trains on token_loss_mask × sample_loss_mask (its loss functions: `token_mask * sample_mask`): a sample
  // whose sample_loss_mask is 0 (left out: overlong filtering, a sequence-level log-prob error) is trained on nowhere
  const sampleMask = num(o.sample_loss_mask);
  const tokenMask = cut('token_loss_mask', true)!.map((x) => (x === 1 || x === true || x === 1.0 ? 1 : 0));
  const mask = sampleMask === 0 ? tokenMask.map(() => 0) : tokenMask;
  // the prompt still ends where the token mask's first trained token is (its group is found by its prompt ids)
  const promptLength = sampleMask === 0 && tokenMask.includes(1) ? tokenMask.indexOf(1) : undefined;
  const nums = (k: string) => cut(k)?.map((x) => (typeof x === 'number' && Number.isFinite(x) ? x : null));
  const arrays = {
    rollout_logprob: nums('generation_logprobs'),
    logprob: nums('prev_logprobs'),
    advantage: nums('advantages'),
  };
  const reward = num(o.rewards);
  const content = unwrap(o.content);
  const present = Object.keys(o).filter((k) => Array.isArray(unwrap(o[k])) && k !== 'content');
  return {
    engine: 'nemo-rl',
    file,
    line,
    ...(step !== undefined ? { step } : {}),
    split: 'train',
    ids: ids.slice(0, n) as number[],
    ...(promptLength !== undefined ? { prompt_length: promptLength } : {}),
    loss_mask: mask,
    arrays: Object.fromEntries(Object.entries(arrays).filter(([, v]) => v)),
    ...(reward !== undefined ? { reward } : {}),
    engine_arrays: present,
    meta: {
      nemo_rl: {
        ...(o.idx !== undefined ? { idx: unwrap(o.idx) } : {}),
        ...(sampleMask !== undefined ? { sample_loss_mask: sampleMask } : {}),
        ...(num(o.filtered_rewards) !== undefined ? { filtered_reward: num(o.filtered_rewards) } : {}),
        ...(o.agent_ref !== undefined ? { agent_ref: unwrap(o.agent_ref) } : {}),
      },
      ...(Array.isArray(content) ? { content } : {}),
      ...(sampleMask === 0 ? { sample_excluded: 'sample_loss_mask 0 (NeMo-RL)' } : {}),
    },
  };
}

/**
 * A line without token ids — val_data (message logs), distillation's train data (`content`, `input_lengths`),
 * grpo_sync's when it did not keep the ids —: its texts only. Message dicts split at the first assistant message; a
 * list of message texts (no roles) at its first entry.
 */
function nemoRlTextRecord(
  o: Record<string, unknown>,
  file: string,
): { prompt: string; response: string; reward?: number; step?: number } {
  const m = NEMO_FILE.exec(basename(file));
  const log = unwrap(o.content);
  if (!Array.isArray(log))
    throw new SampleError(
      'content',
      'expected the conversation (a list of messages or message texts), and there are no token_ids',
    );
  const roles = log.every((x) => x && typeof x === 'object' && typeof (x as { role?: unknown }).role === 'string');
  const firstAssistant = roles
    ? log.findIndex((x) => (x as { role: string }).role === 'assistant')
    : Math.min(1, log.length);
  const cutAt = firstAssistant < 0 ? log.length : firstAssistant;
  const text = (xs: unknown[]) => (roles ? messageText(xs) : xs.map((x) => String(x ?? '')).join(''));
  return {
    prompt: text(log.slice(0, cutAt)),
    response: text(log.slice(cutAt)),
    ...(num(o.rewards) !== undefined ? { reward: num(o.rewards) } : {}),
    ...(m ? { step: Number(m[2]) } : {}),
  };
}

export type NemoItem =
  | SampleItem
  | {
      text: {
        prompt: string;
        response: string;
        reward?: number;
        step?: number;
        split: string;
        file: string;
        line: number;
      };
    };

/** Token samples of NeMo-RL's train data (and the texts of its val data), in order; malformed lines are issues. */
export async function* readNemoRl(path: string, files?: string[]): AsyncGenerator<NemoItem> {
  for (const file of files ?? (await nemoRlFiles(path))) {
    const split = basename(file).startsWith('val_') ? 'val' : 'train';
    yield* readJsonLines<NemoItem>(file, 'a NeMo-RL train_data line', (o, line) => [
      o.token_ids === undefined || o.token_ids === null
        ? { text: { ...nemoRlTextRecord(o, file), split, file, line } }
        : { sample: nemoRlSample(o, file, line) },
    ]);
  }
}
