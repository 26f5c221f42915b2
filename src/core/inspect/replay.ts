/**
 * The replay model of one rollout: its timeline (prompt, then each block of the response — think, search,
 * information with its documents, answer, feedback — by turn; in the tool-call dialects a tool call is a search
 * entry with its decoded query, a tool response an information entry with its documents), its tokens with role, loss mask and the recorded
 * numbers (log-prob, reference log-prob, KL, advantage, value, entropy), and the mask audit. Pure data, sent to the
 * replay webview as is; the webview only renders it (as text nodes).
 *
 * Token ↔ text: the token texts concatenate to the prompt and response as tokenised. A timeline entry covers the
 * tokens whose characters fall in its span of the response; when the decoded tokens differ from the recorded
 * response (a tokenizer that does not round-trip), spans are matched by position as closely as they go and
 * `alignment` says so.
 *
 * Rollouts without token arrays (imported from Search-R1, veRL, TRL) replay at segment level: one pseudo-token per
 * timeline entry, its role from the parser, no mask and no audit — unless a tokenizer is supplied to split the
 * text (each entry tokenised on its own, so every token has exactly one role).
 */

import { auditMask, sampleExcluded } from '../audit/masks';
import type { EntryKind, Overlay, ReplayDoc, ReplayEntry, ReplayModel, ReplayTokens } from '../protocol/replay';
import { type ReadOptions, type Rollout, rolloutContext, type TokenRole } from '../run/format';
import type { ParsedTrajectory } from '../tags/parser';
import { pythonStrip, responseAnswer } from '../tags/searchr1';
import { documentsOf, parseResponse } from '../tags/trajectory';
import type { TextTokenizer } from '../tokens/tokenizer';

export type { EntryKind, Overlay, ReplayDoc, ReplayEntry, ReplayModel, ReplayTokens };
export const OVERLAYS: readonly Overlay[] = [
  'rollout_logprob',
  'logprob',
  'ref_logprob',
  'kl',
  'advantage',
  'value',
  'entropy',
];

export type { TextTokenizer };

const ROLE_OF: Record<EntryKind, TokenRole> = {
  prompt: 'prompt',
  template: 'prompt',
  think: 'generated',
  search: 'generated',
  answer: 'generated',
  text: 'generated',
  information: 'retrieved',
  feedback: 'feedback',
};

export function roleOfEntry(kind: EntryKind): TokenRole {
  return ROLE_OF[kind];
}

interface RetrievalMeta {
  query?: string;
  hits?: { id?: string; score?: number | null }[];
}

function retrievalOf(r: Rollout): RetrievalMeta[] {
  const m = (r.meta as { retrieval?: unknown } | undefined)?.retrieval;
  return Array.isArray(m) ? (m as RetrievalMeta[]) : [];
}

/** The timeline of a rollout (token spans filled in later). */
export function timeline(
  r: Rollout,
  parsed: ParsedTrajectory = parseResponse(r.response, rolloutContext(r), { expectAnswer: false }),
): ReplayEntry[] {
  const entries: ReplayEntry[] = [];
  const base = r.prompt.length;
  if (r.prompt)
    entries.push({ kind: 'prompt', turn: 0, text: r.prompt, start: 0, end: base, tokenStart: 0, tokenEnd: 0 });
  const retrieval = retrievalOf(r);
  let info = 0;
  for (const s of parsed.segments) {
    const text = r.response.slice(s.start, s.end);
    // Whitespace between blocks joins the previous entry (it is still tokens of some role).
    const prev = entries[entries.length - 1];
    if (s.kind === 'text' && !text.trim() && prev && prev.kind !== 'prompt') {
      prev.text += text;
      prev.end = base + s.end;
      continue;
    }
    // A block resumed after a nested one continues its entry.
    if (!s.opened && prev && prev.kind === s.kind && prev.end === base + s.start) {
      prev.text += text;
      prev.end = base + s.end;
      continue;
    }
    const e: ReplayEntry = {
      kind: s.kind,
      turn: s.turn,
      text,
      start: base + s.start,
      end: base + s.end,
      tokenStart: 0,
      tokenEnd: 0,
    };
    if (s.kind === 'search') {
      if (s.call) {
        if (s.call.query !== undefined) e.query = s.call.query;
        if (s.call.error !== undefined) e.error = s.call.error;
        if (s.call.name !== undefined) e.tool = s.call.name;
      } else e.query = pythonStrip(r.response.slice(s.contentStart, s.contentEnd));
    }
    if (s.kind === 'information') {
      const meta = retrieval[info++];
      e.docs = documentsOf(parsed, s).map((d, k) => ({
        index: d.index,
        title: d.title,
        text: d.text,
        score: meta?.hits?.[k]?.score ?? undefined,
        id: meta?.hits?.[k]?.id,
      }));
    }
    entries.push(e);
  }
  return entries;
}

/** Assigns each entry its token span from the tokens' character offsets; returns each token's first character. */
function spanTokens(
  entries: ReplayEntry[],
  tokenText: readonly string[],
  promptLen: number,
  firstResponseToken: number,
): number[] {
  // Character start of each token in prompt + response: prompt tokens from 0, response tokens from the prompt's end
  // (so a prompt that does not round-trip does not shift the response).
  const starts = new Array<number>(tokenText.length);
  let pos = 0;
  for (let i = 0; i < tokenText.length; i++) {
    if (i === firstResponseToken) pos = promptLen;
    starts[i] = pos;
    pos += tokenText[i]!.length;
  }
  // A token belongs to the entry holding its last character (a token "\n\n<information>" opens the block, it
  // does not end the search before it); tokens are in order, so entries take consecutive runs.
  let t = 0;
  for (const e of entries) {
    e.tokenStart = t;
    while (t < tokenText.length && starts[t]! + Math.max(1, tokenText[t]!.length) - 1 < e.end) t++;
    e.tokenEnd = t;
  }
  const last = entries[entries.length - 1];
  if (last) last.tokenEnd = tokenText.length;
  return starts;
}

/**
 * A recorded per-token array over the first `m` tokens, null where the position was not scored. Writers now write
 * null there; an older record (an array with no null at all) held 0 instead, so there a 0 on a token that is not
 * `generated` (prompt, retrieved, feedback: never scored by default) reads as not scored.
 */
export function scoredValues(a: readonly (number | null)[], role: readonly TokenRole[], m: number): (number | null)[] {
  const legacy = !a.includes(null);
  return Array.from({ length: m }, (_, i) => {
    const v = i < a.length ? a[i]! : null;
    return legacy && v === 0 && role[i] !== 'generated' ? null : v;
  });
}

export interface ReplaySource {
  index: number;
  file: string;
  line: number;
}

/** Builds the replay model of a valid record (its response read as `read` says: dialect, search tool). */
export function replayModel(
  r: Rollout,
  at: ReplaySource,
  options: { tokenizer?: TextTokenizer; tokenizerName?: string; read?: ReadOptions } = {},
): ReplayModel {
  const parsed = parseResponse(r.response, rolloutContext(r, options.read), { expectAnswer: false });
  const entries = timeline(r, parsed);
  const warnings: string[] = [];
  const model: ReplayModel = {
    ...at,
    id: r.id,
    dialect: parsed.dialect,
    level: 'segment',
    step: r.step,
    group: r.group === undefined ? undefined : String(r.group),
    sample: r.sample,
    question: r.question,
    golden: r.golden,
    answer: responseAnswer(parsed, { strictActions: r.strict_actions === true }) ?? null,
    reward: r.reward,
    rewardParts: r.reward_parts,
    finish: r.finish,
    searches: r.searches,
    dataSource: r.data_source,
    prompt: r.prompt,
    response: r.response,
    entries,
    tokens: { text: [], role: [], overlays: {} },
    warnings,
  };
  const tk = r.tokens;
  if (tk) {
    const n = tk.text.length;
    const arrays = {
      ids: tk.ids,
      role: tk.role,
      loss_mask: tk.loss_mask,
      rollout_logprob: tk.rollout_logprob,
      logprob: tk.logprob,
      ref_logprob: tk.ref_logprob,
      advantage: tk.advantage,
      value: tk.value,
      entropy: tk.entropy,
    };
    for (const [k, a] of Object.entries(arrays))
      if (a && a.length !== n)
        warnings.push(
          `tokens.${k} has ${a.length} entries but tokens.text has ${n}: replayed over the first ${Math.min(n, a.length)}`,
        );
    const m = Math.min(n, tk.role.length, tk.loss_mask.length);
    model.level = 'token';
    model.tokens = {
      text: tk.text.slice(0, m),
      role: tk.role.slice(0, m),
      mask: tk.loss_mask.slice(0, m),
      ids: tk.ids.slice(0, m),
      overlays: {},
    };
    const o = model.tokens.overlays;
    const role = model.tokens.role;
    if (tk.rollout_logprob) o.rollout_logprob = scoredValues(tk.rollout_logprob, role, m);
    if (tk.logprob) o.logprob = scoredValues(tk.logprob, role, m);
    if (tk.ref_logprob) o.ref_logprob = scoredValues(tk.ref_logprob, role, m);
    if (tk.logprob && tk.ref_logprob)
      o.kl = o.logprob!.map((lp, i) => (lp === null || o.ref_logprob![i] === null ? null : lp - o.ref_logprob![i]!));
    if (tk.advantage) o.advantage = scoredValues(tk.advantage, role, m);
    if (tk.value) o.value = scoredValues(tk.value, role, m);
    if (tk.entropy) o.entropy = scoredValues(tk.entropy, role, m);
    model.audit = auditMask(model.tokens.role, model.tokens.mask!, sampleExcluded(r.meta) !== undefined);
    let firstResponse = model.tokens.role.findIndex((x) => x !== 'prompt');
    if (firstResponse < 0) firstResponse = m;
    model.tokens.start = spanTokens(entries, model.tokens.text, r.prompt.length, firstResponse);
    const joined = model.tokens.text.join('');
    const full = r.prompt + r.response;
    if (joined !== full) {
      let k = 0;
      while (k < joined.length && k < full.length && joined[k] === full[k]) k++;
      model.alignment = { mismatchAt: k };
    }
  } else if (options.tokenizer) {
    model.level = 'tokenizer';
    model.tokenizer = options.tokenizerName;
    const t = model.tokens;
    for (const e of entries) {
      e.tokenStart = t.text.length;
      const pieces = options.tokenizer(e.text);
      t.text.push(...pieces.text);
      (t.ids ??= []).push(...pieces.ids);
      t.role.push(...pieces.text.map(() => roleOfEntry(e.kind)));
      e.tokenEnd = t.text.length;
    }
  } else {
    const t = model.tokens;
    entries.forEach((e, k) => {
      e.tokenStart = k;
      e.tokenEnd = k + 1;
      t.text.push(e.text);
      t.role.push(roleOfEntry(e.kind));
    });
  }
  return model;
}
