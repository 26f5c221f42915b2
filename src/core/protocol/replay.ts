/**
 * The replay's contract (webview/replay/; the host is src/extension/inspector/replayPanel.ts, the models are built in
 * src/core/inspect/replay.ts and src/core/audit/microscope.ts): what its two sides ask and tell, and its view models,
 * the counterfactual fork's included. Imports types only (it is bundled into the webview).
 */
import type { Contract } from './messaging';

/** Who produced a token (DESIGN §4.3; the same names as the run format's `tokens.role`). */
export type TokenRoleName = 'generated' | 'prompt' | 'retrieved' | 'feedback';

export type LeakKind = 'trained-on-retrieved' | 'trained-on-prompt' | 'trained-on-feedback' | 'generated-masked';

export interface MaskAudit {
  /** Token indices whose mask disagrees with their role, ascending. */
  leaks: number[];
  /** Counts by kind. */
  byKind: Record<LeakKind, number>;
  /** Tokens with mask 1 (in the loss) and with role `generated`. */
  trained: number;
  generated: number;
}

/** A timeline entry: the prompt, or a segment kind of the tag parser. */
export type EntryKind = 'prompt' | 'think' | 'search' | 'information' | 'answer' | 'text' | 'feedback' | 'template';

export interface ReplayDoc {
  index: number;
  title: string;
  text: string;
  score?: number;
  id?: string;
}

export interface ReplayEntry {
  kind: EntryKind;
  /** 0 for the prompt's turn too; +1 after each observation. */
  turn: number;
  /** Text of the entry (tags included), and its span in `prompt + response`. */
  text: string;
  start: number;
  end: number;
  /** Tokens [tokenStart, tokenEnd) of this entry. */
  tokenStart: number;
  tokenEnd: number;
  /** A search's query (a tool call's decoded `arguments.query`). */
  query?: string;
  /** Tool-call dialects: the tool called, and why the call is invalid (then it is no search). */
  tool?: string;
  error?: string;
  /** An information block's documents. */
  docs?: ReplayDoc[];
}

/** Token colourings: a recorded number, or the log-prob microscope's Δ = logprob − rollout_logprob and ratio exp(Δ) (trained tokens only). */
export type Overlay =
  | 'rollout_logprob'
  | 'logprob'
  | 'ref_logprob'
  | 'kl'
  | 'advantage'
  | 'value'
  | 'entropy'
  | 'delta'
  | 'ratio';

export type ImportanceLevel = 'token' | 'sequence';

/** What a truncated (TIS) or masked (MIS) importance-sampling correction with cap C would do (src/core/audit/importance.ts). */
export interface ImportancePreview {
  level: ImportanceLevel;
  cap: number;
  /** Trained-token indices TIS would clip (ρ > C: weight C instead of ρ), ascending; at sequence level all of a clipped sequence's. */
  clipped: number[];
  /** Trained-token indices MIS would drop (ρ outside [1/C, C]: weight 0), ascending; at sequence level all of a dropped sequence's. */
  dropped: number[];
  /** The sequence-level ratio ρ_seq = exp(Σ Δ) over the scored trained tokens (1 when none). */
  seq_ratio: number;
  /** Trained tokens with both log-probs. */
  scored: number;
}

/** One side of a drift: ids from the window's start, each with its decoded text. */
export interface DriftPiece {
  id: number;
  text: string;
}

/** The replay's audit of one rollout (src/core/audit/microscope.ts). */
export interface ReplayMicroscope {
  /** Trained tokens whose ratio exp(Δ) lies outside the audit's band. */
  flagged: number[];
  /** The importance-sampling preview at the panel's level and cap; null without both log-prob arrays. */
  importance: ImportancePreview | null;
  /** The first re-tokenisation drift, its window decoded on both sides; null: none, or not checked (see driftNote). */
  drift: {
    token: number;
    from: number;
    kind: 'text' | 'split' | 'template';
    recorded: DriftPiece[];
    reencoded: DriftPiece[];
  } | null;
  /** With which tokenizer drift was checked, or why it was not. */
  driftNote: string;
  /** The mask the engine trained with (`meta.engine_loss_mask`), when the record carries one; where it disagrees with loss_mask. */
  engineMask?: (0 | 1)[];
  maskMismatch: number[];
}

export interface ReplayTokens {
  text: string[];
  role: TokenRoleName[];
  /** Loss mask; absent at segment level (unknown). */
  mask?: (0 | 1)[];
  ids?: number[];
  /** Token level: each token's first character in prompt + response (response tokens counted from the prompt's end). */
  start?: number[];
  /** Recorded numbers per token (null where not recorded for that token). */
  overlays: Partial<Record<Overlay, (number | null)[]>>;
}

export interface ReplayModel {
  index: number;
  file: string;
  line: number;
  id: string;
  /** How the response acts: `searchr1`, `toolcall` or `llama-json`. */
  dialect: string;
  level: 'token' | 'segment' | 'tokenizer';
  tokenizer?: string;
  step?: number;
  group?: string;
  sample?: number;
  question?: string;
  golden?: string[];
  answer: string | null;
  reward?: number;
  rewardParts?: Record<string, number>;
  finish?: string;
  searches?: number;
  dataSource?: string;
  prompt: string;
  response: string;
  entries: ReplayEntry[];
  tokens: ReplayTokens;
  audit?: MaskAudit;
  /** Drift, the log-prob microscope's flags, the importance-sampling preview, the engine's mask (token level only). */
  microscope?: ReplayMicroscope;
  /** Where token text and recorded text disagree (first differing character in prompt + response), if anywhere. */
  alignment?: { mismatchAt: number };
  /** Problems with the record that do not stop the replay (token arrays of different lengths, …). */
  warnings: string[];
}

export interface ReplayPosition {
  /** Current token (index into the model's tokens) and timeline entry. */
  token: number;
  entry: number;
  overlay: Overlay | 'none';
  speed: number;
}

export interface ReplayState {
  models: ReplayModel[];
  position: ReplayPosition;
  /** The importance-sampling preview's level and cap (the microscopes' `importance` are computed with them). */
  importance: { level: ImportanceLevel; cap: number };
  /** Set when the row cannot be replayed (malformed): its errors, with file and line. */
  error?: { file: string; line: number; messages: string[]; raw?: string };
}

// --- counterfactual replay (fork; the host side is src/core/host/fork.ts, the trainer side fork.py) -------------

/** A document the user wrote for a fork: `Title\ntext` (as a corpus' `contents`), or its parts. */
export type ForkDocument = string | { contents: string; id?: string } | { title?: string; text: string; id?: string };

/** What a fork asks: turns count the generation turns from 1; an edit replaces the observation before turn `turn`. */
export interface ForkOptions {
  turn: number;
  /** A checkpoint name (`step-NNNNNN`); default: the one that produced the rollout (defaultCheckpoint). */
  checkpoint?: string;
  /** Re-runs the search before turn `turn` with this query. */
  query?: string;
  /** Replaces that search's documents. */
  documents?: ForkDocument[];
  /** Sampled continuations at the run's temperature (default: one greedy). */
  samples?: number;
  greedy?: boolean;
  /** Another Search-R1-compatible retriever for the fork's searches (the reward stays the run's). */
  retrieverUrl?: string;
}

/** One continuation of a fork, as the policy server returns it (`tokens` cover prompt + response). */
export interface Continuation {
  response: string;
  answer: string | null;
  reward: number | null;
  /** The first token index (prompt included) where it differs from the recorded rollout; null when identical. */
  diverges_at: number | null;
  tokens: {
    text: string[];
    ids: number[];
    role: TokenRoleName[];
    loss_mask: (0 | 1)[];
    rollout_logprob: (number | null)[];
  };
  finish: string | null;
  turns: number;
  searches: number;
  reward_parts: Record<string, number>;
  retrieval: { query: string; hits: { id: string; score: number | null }[] }[];
  reward_error?: string;
}

export interface ForkResult {
  /** The checkpoint the continuations come from. */
  checkpoint: string;
  continuations: Continuation[];
}

/** The fork panel's choices: the run's checkpoints and the default one for the shown rollout. */
export interface ForkChoices {
  /** Why forking is not possible here (no run directory, no tokens, untrusted workspace, no checkpoint…). */
  unavailable?: string;
  checkpoints: string[];
  defaultCheckpoint?: string;
  /** Why there is no default (no checkpoint at or before the rollout's producing step): nothing is preselected. */
  noDefault?: string;
  /** The checkpoints after the rollout's producing step (not the policy that wrote it; labelled so). */
  later?: string[];
  /** Generation turns of the rollout (1..turns). */
  turns: number;
  /** The checkpoints whose policy server this panel has started already (a fork from another starts one first). */
  started?: string[];
}

/** How a fork's failure begins when no Python can run the trainer (the replay offers Set Up Trainer Environment). */
export const NO_TRAINER_PYTHON = 'No usable Python for the trainer';

export interface ReplayContract extends Contract {
  host: {
    getState(params: void): ReplayState | null;
    /** What the fork form offers for the shown rollout (`model` indexes ReplayState.models). */
    forkChoices(params: { model: number }): ForkChoices;
    /** Forks the shown rollout (the policy server is started once per run and checkpoint, and reused). */
    fork(params: ForkOptions & { model: number }): ForkResult;
    /** The webview reports where it is, so a re-created view restores it. */
    position(params: ReplayPosition): void;
    /** Opens a tokenizer.json to split a token-less rollout into tokens. */
    chooseTokenizer(params: void): void;
    /** Recomputes the importance-sampling preview of the rollouts shown at another level or cap (one per model). */
    importance(params: { level: ImportanceLevel; cap: number }): (ImportancePreview | null)[];
    /** Runs "Search Agent: Set Up Trainer Environment" (offered where a fork failed for want of a Python). */
    setUpTrainerEnvironment(params: void): void;
  };
  view: {
    describe(params: void): {
      entry: number;
      token: number;
      tokenText: string | null;
      entryKind: string | null;
      leaks: number;
      overlay: string;
      level: string;
      columns: number;
      drift: number | null;
      driftShown: boolean;
      clipped: number;
      dropped: number;
      excluded: number;
    };
  };
  toView: { state: ReplayState };
  toHost: Record<string, never>;
}
