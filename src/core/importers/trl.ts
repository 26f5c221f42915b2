/**
 * TRL completion tables: `completions/completions_{step:05d}.parquet` with columns `step`, `prompt`,
 * `completion`, one column per reward function, and `advantage`. Prompts and completions are strings, or
 * lists of chat messages in TRL's conversational format. The samples of one prompt within a step (and split: a
 * `mode` column of train/eval, as newer TRL writes) form a GRPO group; the reward is the sum of the reward columns
 * (TRL's default weights of 1).
 */

import { derivedFields, jsonSafe, messageText, toNumber } from '../run/fields';
import { type ReadOptions, ROLLOUT_RECORD_VERSION, type Rollout, rolloutContext } from '../run/format';
import { extractQuestion } from '../tags/transcript';
import { parquetRows } from './parquet';

const KNOWN = new Set(['step', 'prompt', 'completion', 'advantage', 'image', 'images', 'mode']);

/** TRL's mode (`train` / `eval`) as our split names it (`train` / `val`). */
function splitOf(mode: unknown): string | undefined {
  if (typeof mode !== 'string' || !mode) return undefined;
  return mode === 'eval' ? 'val' : mode;
}

export async function* importTrlCompletions(path: string, read: ReadOptions = {}): AsyncGenerator<Rollout> {
  const stepFromName = Number(/completions_(\d+)\.parquet$/.exec(path)?.[1] ?? NaN);
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
      if (n !== undefined && typeof v !== 'string') parts[k] = n;
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
