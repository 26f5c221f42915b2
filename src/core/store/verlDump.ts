/**
 * veRL rollout and validation dumps (`trainer.rollout_data_dir` / `validation_data_dir`): `{dir}/{step}.jsonl`,
 * one object per sample with `input` (the decoded prompt), `output` (the decoded response), `gts` (ground
 * truth: a string, a list, or Search-R1's `{target: [...]}`), `score`, `step`, and one field per extra reward
 * output (numbers become `reward_parts`, anything else goes to `meta`). The question is read from the prompt
 * (Search-R1's templates end with `Question: …`).
 */

import { derivedFields, goldenList, jsonSafe, toNumber } from '../run/fields';
import { type ReadOptions, ROLLOUT_RECORD_VERSION, type Rollout, rolloutContext } from '../run/format';
import { extractQuestion } from '../tags/transcript';

const KNOWN = new Set(['input', 'output', 'gts', 'score', 'step', 'data_source']);

/** A field of a source line that cannot be converted. */
export class FieldError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
    this.name = 'FieldError';
  }
}

/** Converts one dump line (already parsed). `line` and `file` identify it in ids and meta. */
export function fromVerlDump(
  obj: Record<string, unknown>,
  file: string,
  line: number,
  stepFromName?: number,
  read: ReadOptions = {},
): Rollout {
  if (typeof obj.output !== 'string')
    throw new FieldError(
      'output',
      `expected a string (the decoded response), got ${obj.output === undefined ? 'nothing' : typeof obj.output}`,
    );
  const step = toNumber(obj.step) ?? stepFromName;
  const reward = toNumber(obj.score);
  const parts: Record<string, number> = {};
  const meta: Record<string, unknown> = { source: file, line };
  for (const [k, v] of Object.entries(obj)) {
    if (KNOWN.has(k)) continue;
    const n = toNumber(v);
    if (n !== undefined && typeof v !== 'string') parts[k] = n;
    else meta[k] = jsonSafe(v);
  }
  const prompt = typeof obj.input === 'string' ? obj.input : '';
  const question = extractQuestion(prompt);
  return {
    v: ROLLOUT_RECORD_VERSION,
    id: `verl-${step ?? 'x'}-${line}`,
    ...(step !== undefined ? { step: Math.max(0, Math.trunc(step)) } : {}),
    ...(obj.data_source !== undefined ? { data_source: String(obj.data_source) } : {}),
    ...(question ? { question } : {}),
    golden: goldenList(obj.gts),
    prompt,
    response: obj.output,
    ...(reward !== undefined ? { reward } : {}),
    ...(Object.keys(parts).length ? { reward_parts: parts } : {}),
    ...derivedFields(obj.output, rolloutContext({ v: 1, id: '', prompt, response: obj.output }, read)),
    meta,
  };
}
