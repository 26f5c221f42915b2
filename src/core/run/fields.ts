/**
 * Turning loosely-typed source fields into our record's fields: shared by the importers and the store's reading of
 * veRL dumps (store/verlDump.ts).
 */
import { turnsOf } from '../tags/searchr1';
import { hasToolMessages, renderToolMessages } from '../tags/toolcall';
import { parseResponse, type ResponseContext, searchCount } from '../tags/trajectory';
import type { Rollout } from './format';

/** Golden answers from the shapes sources use: a string, a list, `{target: …}` (Search-R1's ground truth), JSON text of those. */
export function goldenList(value: unknown): string[] {
  if (value === null || value === undefined) return [];
  if (typeof value === 'string') {
    const t = value.trim();
    if ((t.startsWith('[') && t.endsWith(']')) || (t.startsWith('{') && t.endsWith('}'))) {
      try {
        return goldenList(JSON.parse(t));
      } catch {
        /* a plain string that looks like JSON */
      }
    }
    return [value];
  }
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return [String(value)];
  if (Array.isArray(value)) return value.flatMap((v) => goldenList(v));
  if (typeof value === 'object') {
    const o = value as Record<string, unknown>;
    if ('target' in o) return goldenList(o.target);
    if ('ground_truth' in o) return goldenList(o.ground_truth);
  }
  return [];
}

/**
 * Text from a string or a list of chat messages (`[{role, content}]`, as TRL's conversational format). Messages
 * with tool calls or tool results are laid out as the Qwen2.5 template does (so the calls stay readable).
 */
export function messageText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (Array.isArray(value) && hasToolMessages(value)) return renderToolMessages(value);
  if (Array.isArray(value)) {
    return value
      .map((m) =>
        m && typeof m === 'object' && 'content' in m
          ? String((m as { content: unknown }).content ?? '')
          : String(m ?? ''),
      )
      .join('\n');
  }
  if (value === null || value === undefined) return '';
  return String(value);
}

/**
 * Searches, turns and finish reason read from the response text (for sources that do not record them), in the
 * response's dialect; the dialect is kept on the record when it is not Search-R1's (or was given).
 */
export function derivedFields(
  response: string,
  context: ResponseContext = {},
): Pick<Rollout, 'searches' | 'turns' | 'finish' | 'dialect'> {
  const parsed = parseResponse(response, context, { expectAnswer: false });
  const searches = searchCount(parsed);
  const turns = turnsOf(parsed);
  const answered = parsed.segments.some((s) => s.kind === 'answer' && s.opened && s.closed);
  // Cut off mid-block: the generation ran out of length. A last turn with no action: invalid — an empty response too
  // (the model ended its turn at once: no block was cut off, no action taken).
  const lastBlock = [...parsed.segments].reverse().find((s) => s.kind !== 'text' && s.kind !== 'template');
  const truncated = lastBlock !== undefined && !lastBlock.closed && lastBlock.kind !== 'feedback';
  const lastInvalid = turns.length === 0 || turns[turns.length - 1]!.action === null;
  const given = context.dialect !== undefined && context.dialect !== 'auto';
  return {
    searches,
    turns: turns.length,
    finish: answered ? 'answer' : truncated ? 'length' : lastInvalid ? 'invalid' : 'length',
    ...(given || parsed.dialect !== 'searchr1' ? { dialect: parsed.dialect } : {}),
  };
}

export function toNumber(v: unknown): number | undefined {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v === 'bigint') return Number(v);
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v))) return Number(v);
  return undefined;
}

/** JSON-safe copy (bigint → number, Date → ISO string, typed arrays → arrays). */
export function jsonSafe(v: unknown): unknown {
  if (typeof v === 'bigint') return Number(v);
  if (v instanceof Date) return v.toISOString();
  if (ArrayBuffer.isView(v)) return Array.from(v as unknown as ArrayLike<number>);
  if (Array.isArray(v)) return v.map(jsonSafe);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, jsonSafe(x)]));
  return v;
}
