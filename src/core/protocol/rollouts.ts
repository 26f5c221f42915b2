/**
 * The rollout inspector's contract (webview/rollouts/; the host is src/extension/inspector/inspector.ts, the models
 * are built in src/core/inspect): what its two sides ask and tell, and its view models. Imports types only (it is
 * bundled into the webview).
 */
import type { Contract } from './messaging';

/** One row of the rollout inspector: the columns and what filters test (src/core/inspect/table.ts). */
export interface RowFacts {
  index: number;
  file: string;
  line: number;
  id?: string;
  step?: number;
  group?: string;
  sample?: number;
  reward?: number;
  em?: number;
  searches?: number;
  turns?: number;
  finish?: string;
  length?: number;
  lengthUnit?: 'tokens' | 'chars';
  data_source?: string;
  split?: string;
  answer?: string | null;
  golden?: string[];
  question?: string;
  valid?: boolean;
  /** How the response acts: `searchr1`, `toolcall` or `llama-json`. */
  dialect?: string;
  /** Invalid actions (Search-R1: answered turns without an action; tool calls: invalid calls too). */
  invalid?: number;
  tokens: boolean;
  /** Leaked tokens: loss mask against role, and the engine's mask against ours (src/core/audit). */
  leaks?: number;
  trained?: number;
  /** First token index where the recorded ids and the re-encoded text differ; null: no drift; absent: not checked (no tokenizer, or no tokens). */
  drift?: number | null;
  /** Max |logprob − rollout_logprob| over trained tokens, and how many trained tokens have a ratio outside the band (absent when not both recorded). */
  logprob?: number;
  ratioFlags?: number;
  /** Trained tokens a truncated (TIS) / masked (MIS) importance-sampling correction would clip / drop at the configured level and cap (src/core/audit/importance.ts). */
  isClipped?: number;
  isDropped?: number;
  /** The rollout's reward-hacking alarms (src/core/audit/alarms.ts; search-collapse is a run-level alarm, not here). */
  alarms?: string[];
  /** The first problem of a malformed row (file:line: field: message), and how many there are. */
  error?: string;
  errorCount?: number;
}

export type InspectorColumn =
  | 'index'
  | 'split'
  | 'step'
  | 'group'
  | 'sample'
  | 'reward'
  | 'em'
  | 'searches'
  | 'turns'
  | 'finish'
  | 'length'
  | 'data_source'
  | 'answer'
  | 'golden'
  | 'leaks'
  | 'drift'
  | 'logprob'
  | 'alarms'
  | 'invalid'
  | 'dialect';

export interface InspectorQuery {
  filter: string;
  search: string;
  sort?: { column: InspectorColumn; desc?: boolean };
}

/** Where the inspector's view stands: rows in the source, rows matching the query, and background work. */
export interface InspectorStatus {
  source: string;
  files: number;
  /** Rows in the source (indexed so far). */
  total: number;
  /** Rows whose facts are built (filters and sorts cover these). */
  analysed: number;
  /** Rows in the current view (after the filter and search); equals total without a query. */
  view: number;
  /** The query the view answers (the latest one sent, once it has been applied). */
  seq: number;
  indexing?: { bytes: number; totalBytes: number };
  busy: boolean;
  following: boolean;
  malformed: number;
  filterError?: { message: string; start: number; end: number };
  /** Set when the source cannot be read at all. */
  error?: string;
  /** With which tokenizer the `drift` column is checked, or why it is not. */
  drift?: string;
  /** The facts threads beside the engine's (src/core/inspect/factsPool.ts), once they have built rows: how many, and those rows. */
  threads?: { workers: number; rows: number };
  /** Another engine's dump, read through our importers (docs/engines.md, "Your own run"). */
  imported?: {
    /** The files present when it was opened are converted (what follows comes from a run still writing). */
    ready: boolean;
    engine: string;
    rollouts: number;
    steps: number;
    /** Samples that could not be read (each in `issues`: file:line: field: message). */
    skipped: number;
    /** Files not complete yet (a run still writing). */
    pending: number;
    /** Our token arrays the records carry. */
    arrays: string[];
    /** The engine's own per-token arrays its dump holds. */
    engineArrays: string[];
    /** How roles were found (`chat template (…)`, `loss mask (no tokenizer)`, …). */
    roles: string[];
    /** Per step: rollouts and arrays. */
    perStep: { step: number; rollouts: number; arrays: string[] }[];
    notes: string[];
    issues: string[];
  };
  /** Set when the query uses drift (a `drift` term, or the sort) and drift is not checked: why (the view's count
   * then says "not checked", not "0 match"). */
  notChecked?: string;
}

export interface InspectorState {
  query: InspectorQuery;
  seq: number;
  status: InspectorStatus;
  /** The first rows, before the index is built (a big file shows rows at once). */
  preview?: RowFacts[];
  scrollTop?: number;
  selected?: number[];
}

export interface InspectorContract extends Contract {
  host: {
    getState(params: void): InspectorState;
    /** Applies a query; the latest seq wins (older ones are cancelled). */
    query(params: InspectorQuery & { seq: number }): void;
    /** Rows [from, from + count) of the current view. */
    page(params: { from: number; count: number; seq: number }): { seq: number; from: number; rows: RowFacts[] };
    openRow(params: { index: number }): void;
    /** Opens two rows side by side in the replay panel. */
    compare(params: { a: number; b: number }): void;
    /** Remembers the view position (restored when the panel is shown again). */
    remember(params: { scrollTop: number; selected: number[] }): void;
  };
  view: {
    /** What is shown, for tests. */
    describe(params: void): { rows: number; firstIndex: number | null; filterError: string | null; rendered: number };
  };
  toView: { status: InspectorStatus; preview: { rows: RowFacts[] } };
  toHost: Record<string, never>;
}
