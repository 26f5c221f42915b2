/**
 * A trajectory document (a `.traj` file, or a transcript opened as one): its conversations, each split into
 * prompt and response and parsed, and what the editor shows from them: diagnostics, folding ranges, an
 * outline of turns, the documents behind a search. Incremental: a conversation whose text did not change
 * since the last analysis is not parsed again (an edit re-parses one conversation, not a 10 MB file).
 * Positions are character offsets; the editor layer turns them into lines.
 */
import type { Dialect, ParsedTrajectory, Segment, TagDiagnostic } from './parser';
import { pythonStrip, type RetrievedDoc, type Turn, turnsOf } from './searchr1';
import { documentsOf } from './trajectory';
import { type ParsedTranscript, parseTranscript, splitConversations } from './transcript';

export interface Conversation {
  /** Offsets of the conversation in the document. */
  start: number;
  end: number;
  label?: string;
  /** Analysis relative to `start` (cached between edits). */
  rel: ParsedTranscript & { turns: Turn[] };
}

export interface DocDiagnostic extends TagDiagnostic {
  /** Absolute offsets in the document. */
  start: number;
  end: number;
}

export type OutlineKind = 'trajectory' | 'prompt' | 'turn' | 'think' | 'search' | 'information' | 'answer' | 'feedback';

export interface OutlineNode {
  name: string;
  detail: string;
  kind: OutlineKind;
  start: number;
  end: number;
  /** The part to reveal when the node is picked (the query, the answer, …). */
  selectionStart: number;
  selectionEnd: number;
  children: OutlineNode[];
}

export interface SearchInfo {
  turn: number;
  dialect: Dialect;
  /** The query ('' for an invalid tool call, whose `error` says why). */
  query: string;
  error?: string;
  /** The tool called, in the tool-call dialects. */
  tool?: string;
  start: number;
  end: number;
  /** Documents of the observation that answered the search (none if it did not come back). */
  docs: RetrievedDoc[];
}

/** How the document reads its trajectories: a forced dialect (a setting) or detection per conversation. */
export interface DocumentOptions {
  dialect?: Dialect | 'auto';
  searchTool?: string;
}

export const MAX_DIAGNOSTICS = 1000;

export class TrajectoryDocument {
  /**
   * The last analysis, by a cheap fingerprint (length + both ends) of each conversation's text; a hit is
   * confirmed by comparing the texts (a memcmp, much cheaper than hashing every conversation as a Map key).
   */
  private cache = new Map<string, { text: string; rel: Conversation['rel'] }[]>();
  conversations: Conversation[] = [];
  /** Conversations parsed in the last `update` (the others came from the cache). */
  parsedLastUpdate = 0;

  constructor(
    text = '',
    readonly options: DocumentOptions = {},
  ) {
    this.update(text);
  }

  update(text: string): this {
    const next = new Map<string, { text: string; rel: Conversation['rel'] }[]>();
    this.parsedLastUpdate = 0;
    this.conversations = splitConversations(text).map((span) => {
      const slice = text.slice(span.start, span.end);
      const key = `${slice.length}\u0000${slice.slice(0, 48)}\u0000${slice.slice(-48)}`;
      const find = (m: Map<string, { text: string; rel: Conversation['rel'] }[]>) =>
        m.get(key)?.find((e) => e.text === slice)?.rel;
      let rel = find(this.cache) ?? find(next);
      if (!rel) {
        const t = parseTranscript(slice, this.options);
        rel = { ...t, turns: turnsOf(t.parsed) };
        this.parsedLastUpdate++;
      }
      const bucket = next.get(key);
      if (bucket) bucket.push({ text: slice, rel });
      else next.set(key, [{ text: slice, rel }]);
      return { start: span.start, end: span.end, ...(span.label !== undefined ? { label: span.label } : {}), rel };
    });
    this.cache = next;
    return this;
  }

  diagnostics(limit = MAX_DIAGNOSTICS): DocDiagnostic[] {
    const out: DocDiagnostic[] = [];
    let total = 0;
    for (const c of this.conversations) {
      for (const d of c.rel.parsed.diagnostics) {
        total++;
        if (out.length < limit) out.push({ ...d, start: d.start + c.start, end: d.end + c.start });
      }
    }
    if (total > limit) {
      const last = this.conversations[this.conversations.length - 1]!;
      out.push({
        code: 'text-between-tags',
        severity: 'info',
        message: `${total - limit} more problems not shown (${total} in this file)`,
        start: last.end,
        end: last.end,
      });
    }
    return out;
  }

  /** Multi-character spans worth folding: each conversation, each prompt, each block. */
  foldingSpans(): { start: number; end: number; kind: 'region' | 'comment' }[] {
    const out: { start: number; end: number; kind: 'region' | 'comment' }[] = [];
    for (const c of this.conversations) {
      out.push({ start: c.start, end: c.end, kind: 'region' });
      if (c.rel.promptEnd > c.rel.promptStart)
        out.push({ start: c.start + c.rel.promptStart, end: c.start + c.rel.promptEnd, kind: 'region' });
      for (const s of c.rel.parsed.segments) {
        if (s.kind === 'text' || s.kind === 'template') continue;
        out.push({
          start: c.start + s.start,
          end: c.start + s.end,
          kind: s.kind === 'information' ? 'comment' : 'region',
        });
      }
    }
    return out;
  }

  /** The outline: conversations → prompt and turns → blocks. */
  outline(text: string): OutlineNode[] {
    return this.conversations.map((c, k) => conversationOutline(text, c, k));
  }

  /** The search block at an offset, with its turn and the documents that came back. */
  searchAt(text: string, offset: number): SearchInfo | undefined {
    const c = this.conversations.find((x) => offset >= x.start && offset <= x.end);
    if (!c) return undefined;
    const rel = offset - c.start;
    const segs = c.rel.parsed.segments;
    const k = segs.findIndex((s) => s.kind === 'search' && rel >= s.start && rel <= s.end);
    if (k < 0) return undefined;
    const s = segs[k]!;
    const parsed = c.rel.parsed;
    const turn = c.rel.turns.findIndex((t) => t.segments.includes(k));
    const t = turn >= 0 ? c.rel.turns[turn]! : undefined;
    // Search-R1 answers a turn's action with one observation; tool calls are answered in order, one response each.
    const nth =
      parsed.dialect === 'searchr1'
        ? 0
        : (t?.segments.filter((i) => segs[i]!.kind === 'search' && segs[i]!.call).indexOf(k) ?? -1);
    const obs = t && nth >= 0 ? t.observations[nth] : undefined;
    const info = obs !== undefined && segs[obs]!.kind === 'information' ? segs[obs]! : undefined;
    const docs = info
      ? documentsOf(parsed, info).map((d) => ({ ...d, start: d.start + c.start, end: d.end + c.start }))
      : [];
    const call = s.call;
    return {
      turn: turn + 1,
      dialect: parsed.dialect,
      query: call ? (call.query ?? '') : pythonStrip(text.slice(c.start + s.contentStart, c.start + s.contentEnd)),
      ...(call?.error !== undefined ? { error: call.error } : {}),
      ...(call?.name !== undefined ? { tool: call.name } : {}),
      start: c.start + s.start,
      end: c.start + s.end,
      docs,
    };
  }
}

const clip = (s: string, n = 60) => {
  const one = s.replace(/\s+/g, ' ').trim();
  return one.length > n ? `${one.slice(0, n - 1)}…` : one;
};

/** How an outline names a search segment: its query, or (tool calls) what is wrong with it, or the other tool. */
function searchName(s: Segment): string {
  const c = s.call;
  if (!c) return 'tool call (incomplete)';
  if (c.query !== undefined) return `search: ${clip(c.query)}`;
  if (c.error !== undefined) return `invalid tool call: ${clip(c.error)}`;
  return `tool call: ${c.name ?? '?'}`;
}

function blockNode(text: string, base: number, parsed: ParsedTrajectory, s: Segment): OutlineNode {
  const content = text.slice(base + s.contentStart, base + s.contentEnd);
  const tool = parsed.dialect !== 'searchr1';
  const names: Record<string, string> = {
    think: `think: ${clip(content, 40)}`,
    search: tool ? searchName(s) : `search: ${clip(content)}`,
    information: `${tool ? 'tool response' : 'information'}: ${documentsOf(parsed, s).length} documents`,
    answer: `answer: ${clip(content)}`,
    feedback: s.opened ? `error reply (feedback): ${clip(content, 40)}` : 'invalid action (feedback)',
  };
  return {
    name: names[s.kind] ?? s.kind,
    detail: s.closed || s.kind === 'feedback' ? '' : 'unclosed',
    kind: s.kind as OutlineKind,
    start: base + s.start,
    end: base + s.end,
    selectionStart: base + s.contentStart,
    selectionEnd: base + Math.max(s.contentStart, s.contentEnd),
    children: [],
  };
}

function conversationOutline(text: string, c: Conversation, k: number): OutlineNode {
  const { rel } = c;
  const base = c.start;
  const children: OutlineNode[] = [];
  if (rel.promptEnd > rel.promptStart) {
    children.push({
      name: 'prompt',
      detail: rel.template,
      kind: 'prompt',
      start: base + rel.promptStart,
      end: base + rel.promptEnd,
      selectionStart: base + rel.promptStart,
      selectionEnd: base + rel.promptStart,
      children: [],
    });
  }
  const parsed = rel.parsed;
  const segs = parsed.segments;
  for (const t of rel.turns) {
    const blocks = t.segments.map((i) => segs[i]!).filter((s) => s.kind !== 'text' && s.kind !== 'template');
    const observations = t.observations.map((i) => segs[i]!);
    const end = observations.length ? observations[observations.length - 1]!.end : t.end;
    const actionBlock = blocks.find(
      (s) =>
        s.kind === (t.action === 'tool' ? 'search' : t.action) &&
        (t.action !== 'search' || !s.call || s.call.query !== undefined),
    );
    const queries = blocks.filter((s) => s.call?.query !== undefined).map((s) => `“${clip(s.call!.query!, 40)}”`);
    const name =
      t.action === 'search'
        ? queries.length > 1
          ? `Turn ${t.index + 1}: ${queries.length} searches ${queries.join(', ')}`
          : `Turn ${t.index + 1}: search “${clip(t.content)}”`
        : t.action === 'answer'
          ? `Turn ${t.index + 1}: answer “${clip(t.content)}”`
          : t.action === 'tool'
            ? `Turn ${t.index + 1}: tool call ${t.content}`
            : `Turn ${t.index + 1}: invalid action`;
    const docs = observations
      .filter((o) => o.kind === 'information')
      .reduce((n, o) => n + documentsOf(parsed, o).length, 0);
    children.push({
      name,
      detail: observations.some((o) => o.kind === 'information') ? `${docs} documents` : '',
      kind: 'turn',
      start: base + t.start,
      end: base + end,
      selectionStart: base + (actionBlock?.contentStart ?? t.start),
      selectionEnd: base + (actionBlock?.contentEnd ?? t.start),
      children: [...blocks, ...observations].map((s) => blockNode(text, base, parsed, s)),
    });
  }
  // `### trajectory 7 (step 3)` → "Trajectory 7 (step 3)"; no label → its position.
  const title = c.label ? `Trajectory ${c.label}` : `Trajectory ${k + 1}`;
  return {
    name: rel.question ? `${title}: ${clip(rel.question, 100)}` : title,
    detail: `${rel.turns.length} turns${parsed.dialect === 'searchr1' ? '' : ` · ${parsed.dialect}`}`,
    kind: 'trajectory',
    start: c.start,
    end: c.end,
    selectionStart: c.start,
    selectionEnd: c.start,
    children,
  };
}
