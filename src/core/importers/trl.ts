/**
 * TRL completion tables: `completions/completions_{step:05d}.parquet` as GRPOTrainer writes them (a pandas
 * DataFrame: `step`, `prompt`, `completion`, one column per reward function — named as `reward_func_names`: the
 * function's name, or a reward model's id's last part —, the columns reward functions log through `log_extra`
 * (sorted), and `advantage`). Prompts and completions are strings, or lists of chat messages in TRL's
 * conversational format. The samples of one prompt within a step (and split: a `mode` column of train/eval, as newer
 * TRL writes) form a GRPO group; the reward is the sum of the reward columns (TRL's default weights of 1).
 *
 * Which columns are the reward functions' the table does not say: TRL puts `log_extra`'s columns between them and
 * `advantage`. What is known is used, in this order: the columns the user names (`--reward-columns`); the reward
 * functions the run logged (`rewards/<name>/mean` in the `log_history` of a `trainer_state.json` in the output dir or
 * its `checkpoint-*` folders); else every float column — TRL writes each reward function's values from a float
 * tensor, so an integer, boolean or string column is never one, but a float `log_extra` column cannot be told apart
 * (a note says what was assumed). Other columns go to `meta`.
 */

import { readdir, readFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { derivedFields, jsonSafe, messageText, toNumber } from '../run/fields';
import { type ReadOptions, ROLLOUT_RECORD_VERSION, type Rollout, rolloutContext } from '../run/format';
import { extractQuestion } from '../tags/transcript';
import { parquetColumnTypes, parquetRows } from './parquet';

export interface TrlOptions {
  /** The reward functions' columns, named by the user (`--reward-columns`). */
  rewardColumns?: readonly string[];
  /** Told what was assumed (which columns were taken as rewards, and why). */
  onNote?: (note: string) => void;
}

const KNOWN = new Set(['step', 'prompt', 'completion', 'advantage', 'image', 'images', 'mode']);

/** TRL's mode (`train` / `eval`) as our split names it (`train` / `val`). */
function splitOf(mode: unknown): string | undefined {
  if (typeof mode !== 'string' || !mode) return undefined;
  return mode === 'eval' ? 'val' : mode;
}

const FLOAT_TYPES = new Set(['DOUBLE', 'FLOAT']);

/**
 * The reward functions a TRL run logged (`rewards/<name>/mean`, `eval_rewards/<name>/mean`, or older TRL's
 * `rewards/<name>`), read from the `trainer_state.json` files of the output dir a completions table is in (its own and
 * its `checkpoint-*` folders'); undefined when there is none.
 */
export async function trlRewardNames(table: string): Promise<Set<string> | undefined> {
  const dir = dirname(table);
  const output = basename(dir) === 'completions' ? dirname(dir) : dir;
  const candidates = [join(output, 'trainer_state.json')];
  for (const n of await readdir(output).catch(() => [] as string[]))
    if (/^checkpoint-\d+$/.test(n)) candidates.push(join(output, n, 'trainer_state.json'));
  let found: Set<string> | undefined;
  for (const f of candidates) {
    let state: { log_history?: unknown };
    try {
      state = JSON.parse(await readFile(f, 'utf8')) as { log_history?: unknown };
    } catch {
      continue; // absent or unreadable: another may say
    }
    if (!Array.isArray(state.log_history)) continue;
    found ??= new Set();
    for (const entry of state.log_history)
      if (entry && typeof entry === 'object')
        for (const k of Object.keys(entry)) {
          const m = /^(?:eval_)?rewards\/(.+?)(?:\/(?:mean|std))?$/.exec(k);
          if (m) found.add(m[1]!);
        }
  }
  return found?.size ? found : undefined;
}

/** Which columns of a table are its reward columns, and the note that says what was assumed (if anything was). */
export async function trlRewardColumns(
  path: string,
  o: TrlOptions = {},
): Promise<{ rewards: Set<string>; note?: string }> {
  const types = await parquetColumnTypes(path);
  const columns = [...types.keys()].filter((k) => !KNOWN.has(k));
  if (o.rewardColumns?.length) {
    const missing = o.rewardColumns.filter((c) => !types.has(c));
    return {
      rewards: new Set(o.rewardColumns.filter((c) => types.has(c))),
      ...(missing.length
        ? {
            note: `--reward-columns: ${missing.join(', ')} ${missing.length === 1 ? 'is not a column' : 'are not columns'} of ${basename(path)} (columns: ${columns.join(', ')})`,
          }
        : {}),
    };
  }
  const floats = columns.filter((k) => FLOAT_TYPES.has(types.get(k)!));
  const logged = await trlRewardNames(path);
  if (logged) {
    const named = columns.filter((k) => logged.has(k));
    if (named.length) return { rewards: new Set(named) };
  }
  return {
    rewards: new Set(floats),
    ...(floats.length > 1
      ? {
          note: `${basename(dirname(path)) === 'completions' ? dirname(dirname(path)) : dirname(path)}: reward = the sum of the float columns ${floats.join(', ')} — assumed: TRL writes each reward function's values as floats, but a float column a reward function logs with log_extra looks the same, and ${logged ? "the run's trainer_state.json names none of them" : 'no trainer_state.json of the run says which are reward functions'}; name them with --reward-columns`,
        }
      : {}),
  };
}

export async function* importTrlCompletions(
  path: string,
  read: ReadOptions = {},
  o: TrlOptions = {},
): AsyncGenerator<Rollout> {
  const stepFromName = Number(/completions_(\d+)\.parquet$/.exec(path)?.[1] ?? NaN);
  const { rewards: rewardColumns, note } = await trlRewardColumns(path, o);
  if (note) o.onNote?.(note);
  const groups = new Map<string, number>();
  const samples = new Map<string, number>();
  let row = 0;
  for await (const r of parquetRows(path)) {
    row++;
    const prompt = messageText(r.prompt);
    const response = messageText(r.completion);
    const step = toNumber(r.step) ?? (Number.isFinite(stepFromName) ? stepFromName : undefined);
    const split = splitOf(r.mode);
    const groupKey = `${split ?? ''}\u0000${step}\u0000${prompt}`;
    if (!groups.has(groupKey)) groups.set(groupKey, groups.size);
    const sample = samples.get(groupKey) ?? 0;
    samples.set(groupKey, sample + 1);
    const parts: Record<string, number> = {};
    const meta: Record<string, unknown> = { source: path, row };
    for (const [k, v] of Object.entries(r)) {
      if (KNOWN.has(k)) continue;
      const n = toNumber(v);
      if (rewardColumns.has(k) && n !== undefined && typeof v !== 'string') parts[k] = n;
      else if (v !== null && v !== undefined) meta[k] = jsonSafe(v);
    }
    const advantage = toNumber(r.advantage);
    if (advantage !== undefined) meta.advantage = advantage;
    const rewards = Object.values(parts);
    const question = extractQuestion(prompt);
    yield {
      v: ROLLOUT_RECORD_VERSION,
      id: `trl-${step ?? 'x'}-${row}`,
      ...(step !== undefined ? { step: Math.max(0, Math.trunc(step)) } : {}),
      group: groups.get(groupKey)!,
      sample,
      ...(split ? { split } : {}),
      ...(question ? { question } : {}),
      prompt,
      response,
      ...(rewards.length ? { reward: rewards.reduce((a, b) => a + b, 0), reward_parts: parts } : {}),
      ...derivedFields(response, rolloutContext({ v: 1, id: '', prompt, response }, read)),
      meta,
    };
  }
}
