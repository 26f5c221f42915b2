/**
 * The webview ↔ extension-host message protocol: one module, imported by both sides.
 *
 * Every message that crosses a webview boundary is an {@link Envelope}. On top of that:
 *  - a **ready handshake**: the webview script sends `ready` once its listener is installed; the host queues
 *    what it sends until then, and hears `ready` again whenever the webview is re-created (hidden panels lose
 *    their document unless `retainContextWhenHidden`, which we do not use), so it can restore state;
 *  - **requests** with ids that resolve with the other side's result or reject with its error, or with a
 *    timeout when no answer comes;
 *  - **events**, one-way.
 *
 * Each webview has a {@link Contract} naming what each side may ask and tell, so both ends are type-checked
 * against the same declaration. This file is pure TypeScript: no `vscode`, no DOM, no Node APIs.
 */

export const PROTOCOL_VERSION = 1;

/** The names of our webviews; one folder under `webview/` each. */
export type WebviewName = 'reward-lab' | 'dashboard' | 'rollouts' | 'replay' | 'groups';

export type Envelope =
  | { t: 'ready'; v: number; webview: string }
  | { t: 'req'; id: number; method: string; params?: unknown }
  | { t: 'res'; id: number; ok: true; result?: unknown }
  | { t: 'res'; id: number; ok: false; error: { message: string; code?: string } }
  | { t: 'evt'; name: string; payload?: unknown }
  | { t: 'log'; level: LogLevel; message: string };

/** Webviews forward their own diagnostics (uncaught errors, CSP violations) to the host's log. */
export type LogLevel = 'info' | 'warn' | 'error';
const LOG_LEVELS: readonly string[] = ['info', 'warn', 'error'];

/** What one webview's two sides may ask of each other (requests) and tell each other (events). */
export interface Contract {
  /** Requests the webview sends and the extension host serves. */
  host: Record<string, (params: any) => unknown>;
  /** Requests the extension host sends and the webview serves. */
  view: Record<string, (params: any) => unknown>;
  /** Events from the extension host to the webview, by name → payload. */
  toView: Record<string, unknown>;
  /** Events from the webview to the extension host, by name → payload. */
  toHost: Record<string, unknown>;
}

/** Moves envelopes; `listen` returns a function that stops listening. */
export interface Transport {
  post(message: Envelope): unknown;
  listen(handler: (message: unknown) => void): () => void;
}

export class RemoteError extends Error {
  constructor(
    message: string,
    readonly code?: string,
  ) {
    super(message);
    this.name = 'RemoteError';
  }
}

export class RequestTimeoutError extends Error {
  constructor(
    readonly method: string,
    readonly timeoutMs: number,
  ) {
    super(`request "${method}" got no answer within ${timeoutMs} ms`);
    this.name = 'RequestTimeoutError';
  }
}

export class EndpointClosedError extends Error {
  constructor(readonly method: string) {
    super(`request "${method}" abandoned: the other side closed`);
    this.name = 'EndpointClosedError';
  }
}

type Params<F> = F extends (params: infer P) => unknown ? P : never;
type Result<F> = F extends (...args: any[]) => infer R ? Awaited<R> : never;
type ArgsFor<F> = [Params<F>] extends [void | undefined] ? [params?: Params<F>] : [params: Params<F>];
type EventArgs<P> = [P] extends [void | undefined] ? [payload?: P] : [payload: P];
type Handlers<M extends Record<string, (params: any) => unknown>> = {
  [K in keyof M]?: (params: Params<M[K]>) => Result<M[K]> | Promise<Result<M[K]>>;
};

export interface RequestOptions {
  /** Milliseconds before the request rejects with {@link RequestTimeoutError}; 0 waits for ever. */
  timeoutMs?: number;
}

export interface EndpointOptions {
  /** Default request timeout in ms (10 s). */
  timeoutMs?: number;
  /** Called with messages that are not envelopes, and with errors thrown by event listeners. */
  onProtocolError?: (error: string, message?: unknown) => void;
  /** Called with the other side's `log` messages (the host logs what its webview reports). */
  onLog?: (level: LogLevel, message: string) => void;
  /** Injectable clock, for tests. */
  setTimeout?: (fn: () => void, ms: number) => unknown;
  clearTimeout?: (handle: unknown) => void;
}

/** Checks that an untrusted value has the shape of an {@link Envelope}. */
export function isEnvelope(value: unknown): value is Envelope {
  if (typeof value !== 'object' || value === null) return false;
  const m = value as Record<string, unknown>;
  switch (m.t) {
    case 'ready':
      return typeof m.v === 'number' && typeof m.webview === 'string';
    case 'req':
      return Number.isSafeInteger(m.id) && typeof m.method === 'string';
    case 'res':
      if (!Number.isSafeInteger(m.id) || typeof m.ok !== 'boolean') return false;
      if (m.ok) return true;
      return typeof m.error === 'object' && m.error !== null && typeof (m.error as { message?: unknown }).message === 'string';
    case 'evt':
      return typeof m.name === 'string';
    case 'log':
      return typeof m.message === 'string' && LOG_LEVELS.includes(m.level as string);
    default:
      return false;
  }
}

interface Pending {
  method: string;
  resolve(value: unknown): void;
  reject(error: Error): void;
  timer: unknown;
}

/**
 * One side of a connection. `Serve` are the requests this side answers, `Call` those it sends,
 * `Emit` the events it sends, `Listen` the events it receives. Use {@link hostEndpoint} or
 * {@link viewEndpoint} rather than constructing it directly.
 */
export class Endpoint<
  Serve extends Record<string, (params: any) => unknown>,
  Call extends Record<string, (params: any) => unknown>,
  Emit extends Record<string, unknown>,
  Listen extends Record<string, unknown>,
> {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly handlers: Handlers<Serve> = {};
  private readonly listeners = new Map<string, Set<(payload: any) => void>>();
  private readonly readyListeners = new Set<() => void>();
  private readonly outbox: Envelope[] = [];
  private readonly unlisten: () => void;
  private isReady: boolean;
  private closed = false;
  private readonly timeoutMs: number;
  private readonly setTimer: (fn: () => void, ms: number) => unknown;
  private readonly clearTimer: (handle: unknown) => void;

  constructor(
    private readonly transport: Transport,
    private readonly role: 'host' | 'view',
    private readonly webview: string,
    private readonly options: EndpointOptions = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.setTimer = options.setTimeout ?? ((fn, ms) => setTimeout(fn, ms));
    this.clearTimer = options.clearTimeout ?? ((h) => clearTimeout(h as ReturnType<typeof setTimeout>));
    // The view side is ready as soon as it exists (the host's listener is installed before the HTML is set);
    // the host side waits for the view's `ready`.
    this.isReady = role === 'view';
    this.unlisten = transport.listen((message) => this.receive(message));
    if (role === 'view') this.transport.post({ t: 'ready', v: PROTOCOL_VERSION, webview });
  }

  /** Whether the other side has said it is ready (always true on the view side). */
  get ready(): boolean {
    return this.isReady;
  }

  /** Runs `fn` each time the webview (re)announces itself; at once if it already has. Returns an unsubscribe. */
  onReady(fn: () => void): () => void {
    this.readyListeners.add(fn);
    if (this.isReady && this.role === 'host') fn();
    return () => this.readyListeners.delete(fn);
  }

  /** Serves a request method. A handler that throws (or rejects) makes the caller's promise reject. */
  handle<K extends keyof Serve & string>(method: K, handler: NonNullable<Handlers<Serve>[K]>): void {
    this.handlers[method] = handler;
  }

  /** Sends a request; resolves with the result, rejects with {@link RemoteError} or a timeout. */
  request<K extends keyof Call & string>(
    method: K,
    ...args: [...ArgsFor<Call[K]>, options?: RequestOptions]
  ): Promise<Result<Call[K]>> {
    const params = args[0];
    const options = (args[1] ?? {}) as RequestOptions;
    if (this.closed) return Promise.reject(new EndpointClosedError(method));
    const id = this.nextId++;
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    return new Promise<Result<Call[K]>>((resolve, reject) => {
      const timer =
        timeoutMs > 0
          ? this.setTimer(() => {
              this.pending.delete(id);
              reject(new RequestTimeoutError(method, timeoutMs));
            }, timeoutMs)
          : undefined;
      this.pending.set(id, { method, resolve: resolve as (v: unknown) => void, reject, timer });
      this.send({ t: 'req', id, method, params });
    });
  }

  /** Sends an event. */
  emit<K extends keyof Emit & string>(name: K, ...payload: EventArgs<Emit[K]>): void {
    if (this.closed) return;
    this.send({ t: 'evt', name, payload: payload[0] });
  }

  /** Sends a diagnostic line to the other side's log (webview → host). */
  log(level: LogLevel, message: string): void {
    if (this.closed) return;
    this.send({ t: 'log', level, message });
  }

  /** Listens to an event; returns an unsubscribe. */
  on<K extends keyof Listen & string>(name: K, fn: (payload: Listen[K]) => void): () => void {
    let set = this.listeners.get(name);
    if (!set) this.listeners.set(name, (set = new Set()));
    set.add(fn);
    return () => set.delete(fn);
  }

  /** Stops listening and rejects every pending request. */
  dispose(): void {
    if (this.closed) return;
    this.closed = true;
    this.unlisten();
    for (const [id, p] of this.pending) {
      if (p.timer !== undefined) this.clearTimer(p.timer);
      p.reject(new EndpointClosedError(p.method));
      this.pending.delete(id);
    }
    this.outbox.length = 0;
  }

  private send(message: Envelope): void {
    if (this.isReady) this.transport.post(message);
    else this.outbox.push(message);
  }

  private receive(message: unknown): void {
    if (this.closed) return;
    if (!isEnvelope(message)) {
      this.options.onProtocolError?.('not a protocol envelope', message);
      return;
    }
    switch (message.t) {
      case 'ready':
        if (this.role !== 'host') return;
        if (message.v !== PROTOCOL_VERSION || message.webview !== this.webview) {
          this.options.onProtocolError?.(
            `webview "${message.webview}" speaks protocol v${message.v}; expected "${this.webview}" v${PROTOCOL_VERSION}`,
            message,
          );
          return;
        }
        this.isReady = true;
        for (const m of this.outbox.splice(0)) this.transport.post(m);
        for (const fn of [...this.readyListeners]) this.safely(fn);
        return;
      case 'req':
        void this.serve(message.id, message.method, message.params);
        return;
      case 'res': {
        const p = this.pending.get(message.id);
        if (!p) return; // late answer after a timeout: dropped
        this.pending.delete(message.id);
        if (p.timer !== undefined) this.clearTimer(p.timer);
        if (message.ok) p.resolve(message.result);
        else p.reject(new RemoteError(message.error.message, message.error.code));
        return;
      }
      case 'evt':
        for (const fn of [...(this.listeners.get(message.name) ?? [])]) this.safely(() => fn(message.payload));
        return;
      case 'log':
        this.options.onLog?.(message.level, message.message);
        return;
    }
  }

  private async serve(id: number, method: string, params: unknown): Promise<void> {
    const handler = Object.prototype.hasOwnProperty.call(this.handlers, method)
      ? (this.handlers as Record<string, ((p: unknown) => unknown) | undefined>)[method]
      : undefined;
    if (!handler) {
      this.send({ t: 'res', id, ok: false, error: { message: `no handler for "${method}"`, code: 'no-handler' } });
      return;
    }
    try {
      const result = await handler(params);
      if (!this.closed) this.send({ t: 'res', id, ok: true, result });
    } catch (e) {
      const error = e instanceof Error ? { message: e.message, code: (e as { code?: string }).code } : { message: String(e) };
      if (!this.closed) this.send({ t: 'res', id, ok: false, error });
    }
  }

  private safely(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.options.onProtocolError?.(`listener threw: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
}

export type HostEndpoint<C extends Contract> = Endpoint<C['host'], C['view'], C['toView'], C['toHost']>;
export type ViewEndpoint<C extends Contract> = Endpoint<C['view'], C['host'], C['toHost'], C['toView']>;

/** The extension-host side of webview `name`: serves `C.host`, calls `C.view`. */
export function hostEndpoint<C extends Contract>(name: WebviewName, transport: Transport, options?: EndpointOptions): HostEndpoint<C> {
  return new Endpoint(transport, 'host', name, options);
}

/** The webview side: announces `ready` at once, serves `C.view`, calls `C.host`. */
export function viewEndpoint<C extends Contract>(name: WebviewName, transport: Transport, options?: EndpointOptions): ViewEndpoint<C> {
  return new Endpoint(transport, 'view', name, options);
}

// ---------------------------------------------------------------------------------------------------------
// Contracts, one per webview.

/** The Reward Lab's view of one reward module scored against one rollout source. */
export interface RewardLabReport {
  count: number;
  scored: number;
  errors: number;
  /** Failures by kind (`timeout`, `throw`, `memory`, `skipped`, …). */
  errorsByKind?: Partial<Record<string, number>>;
  mean: number | null;
  std: number | null;
  recordedMean: number | null;
  agreement: number | null;
  frac_zero_std_groups: number | null;
  frac_zero_std_groups_recorded: number | null;
  groups: number;
  histogram: { edges: number[]; recorded: number[]; scored: number[] };
  bySource: { data_source: string; count: number; recordedMean: number | null; mean: number | null }[];
  changed: { id: string; where: string; recorded: number | null; reward: number | null }[];
  changedCount: number;
  failures: { id: string; where: string; message: string; error: { kind: string; message: string; file?: string; line?: number; column?: number; stack?: string } }[];
}

export interface RewardLabState {
  /** The reward module's path and its file name. */
  module: string;
  moduleName: string;
  /** The rollout file or run directory scored against (null until chosen). */
  rollouts: string | null;
  status: 'idle' | 'running' | 'done' | 'failed' | 'cancelled' | 'untrusted';
  /** While scoring: rollouts done, of how many, and the failures so far by kind (timeouts as they happen). */
  progress?: { done: number; total: number | null; errors?: Partial<Record<string, number>> };
  /** The last finished run's numbers: shown dimmed while a new run scores (or after one was cancelled). */
  report?: RewardLabReport;
  /**
   * The rollouts re-scoring compares on: the set the first run after choosing them read (a live run keeps growing;
   * "before the edit" and "now" score the same rollouts). Choosing the rollouts again takes a new set.
   */
  pinned?: { count: number; at: string };
  /** The previous run's numbers (before the last edit), to compare with. */
  previous?: { mean: number | null; frac_zero_std_groups: number | null; agreement: number | null };
  compileError?: { file: string; line: number; column: number; message: string };
  /** A failure of the run itself (not of items). */
  message?: string;
  /** Run number, increasing (lets the view and tests tell runs apart). */
  run: number;
  finishedAt?: string;
}

const REWARD_FAILURE_WORDS: Record<string, [string, string]> = {
  timeout: ['timeout', 'timeouts'],
  throw: ['error', 'errors'],
  memory: ['out of memory', 'out of memory'],
  skipped: ['not run', 'not run'],
};

/** `3 timeouts · 1 error` from a reward run's failures by kind (the kinds not named above count as errors): the Reward Lab and its lens. */
export function failedSoFar(errors: Partial<Record<string, number>> | undefined): string {
  if (!errors) return '';
  const counts = new Map<string, number>();
  for (const [k, n] of Object.entries(errors)) {
    if (!n) continue;
    const key = k in REWARD_FAILURE_WORDS ? k : 'throw';
    counts.set(key, (counts.get(key) ?? 0) + n);
  }
  return ['timeout', 'throw', 'memory', 'skipped']
    .filter((k) => counts.get(k))
    .map((k) => `${counts.get(k)!.toLocaleString()} ${REWARD_FAILURE_WORDS[k]![counts.get(k) === 1 ? 0 : 1]}`)
    .join(' · ');
}

export interface RewardLabContract extends Contract {
  host: {
    getState(params: void): RewardLabState;
    rescore(params: void): void;
    /** Stops the run in flight (its scoring process is killed). */
    cancel(params: void): void;
    chooseRollouts(params: void): void;
    /** Opens `file:line` (a rollout's line, or a stack frame) in an editor. */
    openLocation(params: { where: string }): void;
  };
  view: Record<string, never>;
  toView: { state: RewardLabState };
  toHost: Record<string, never>;
}

/**
 * The alarms (named here, the dashboard charts them; docs/instruments.md has each rule and threshold): the
 * reward-hacking alarms (src/core/audit/alarms.ts), run health (health.ts), group diagnostics (groupChecks.ts) and
 * search behaviour (search.ts). Run-level ones (RUN_ALARMS) fire on steps, the others on rollouts.
 */
export const ALARMS = [
  'answer-enumeration',
  'think-degenerate',
  'length-capped',
  'search-repeat',
  'answer-in-search',
  'search-collapse',
  'tags-in-document',
  // run health (issue 46)
  'step-stall',
  'retriever-slow',
  'retriever-timeouts',
  'reward-slow',
  'truncation-high',
  'length-collapse',
  'non-finite',
  // group diagnostics
  'zero-std-high',
  'group-split',
  'group-size',
  'phantom-advantage',
  'kl-only-gradient',
  'stale-group',
  // search behaviour
  'query-copies-question',
  'search-after-found',
  'think-drift',
] as const;
export type Alarm = (typeof ALARMS)[number];
/** The alarms that fire on a step of the run (advisories), not on a rollout; `non-finite` does both. */
export const RUN_ALARMS: readonly Alarm[] = ['step-stall', 'retriever-slow', 'retriever-timeouts', 'reward-slow', 'truncation-high', 'length-collapse', 'non-finite', 'zero-std-high', 'think-drift'];

/** The metric names the dashboard charts the audit's per-step series is sent as (`audit/…`, beside the trainer's; src/core/audit/series.ts). */
export const AUDIT_METRICS = {
  drift: 'audit/drift_rate',
  meanAbsDiff: 'audit/logprob/mean_abs_diff',
  ratioOutside: 'audit/logprob/ratio_outside',
  seqRatio: 'audit/logprob/seq_ratio',
  leaks: 'audit/leaks',
  /** Rollouts audited at the step (what an alarm's count is a share of). */
  rollouts: 'audit/rollouts',
  alarm: (name: string) => `audit/alarm/${name}`,
  /** The alarm an `alarm` key counts (`audit/alarm/search-repeat` → search-repeat); undefined for any other key. Generic
   * over names: the dashboard charts and lanes every alarm the audit counts, whatever its name. */
  alarmOf: (key: string): string | undefined => /^audit\/alarm\/(.+)$/.exec(key)?.[1],
  /** Search behaviour per step (src/core/audit/search.ts): answer_retrieved, repeated_query, copied_query, search_after_found, em, think_nonword, think_entropy. */
  search: (name: string) => `audit/search/${name}`,
} as const;

/** The trainer's held-out metrics by the searches a question needs (its dataset line's `meta.hops`; train.py
 * `_eval_report`): exact match, searches per question, and the share whose searches returned a golden answer (the
 * env server's `answer_retrieved`: low EM with a high share is a reading failure). The dashboard charts hops 1 and 2,
 * the demo prints them. */
export const HOPS_METRICS = {
  em: (hops: number) => `val/em_by_hops/${hops}`,
  searches: (hops: number) => `val/searches_by_hops/${hops}`,
  retrieved: (hops: number) => `val/answer_retrieved_by_hops/${hops}`,
  /** A search after the first named the question's bridge entity (its dataset line's `meta.bridge`; data.py
   * `bridge_searched`): what the second search of a multi-hop question is for. */
  bridge: (hops: number) => `val/bridge_searched_by_hops/${hops}`,
  /** The hops an `em` key is about (`val/em_by_hops/2` → 2); undefined for any other key. */
  hopsOf: (key: string): number | undefined => {
    const m = /^val\/em_by_hops\/(\d+)$/.exec(key);
    return m ? Number(m[1]) : undefined;
  },
} as const;

/** The trainer's held-out metrics by the question's type (its dataset line's `meta.kind`, when the eval set names 2–16
 * kinds; train.py `_eval_report`, kind names made metric-safe): exact match, searches, answer retrieved. The dashboard
 * charts EM and answer retrieved by kind: a mean over mixed types hides the one the policy fails. */
export const KIND_METRICS = {
  em: (kind: string) => `val/em_by_kind/${kind}`,
  searches: (kind: string) => `val/searches_by_kind/${kind}`,
  retrieved: (kind: string) => `val/answer_retrieved_by_kind/${kind}`,
  /** The kind an `em` key is about (`val/em_by_kind/river` → river); undefined for any other key. */
  kindOf: (key: string): string | undefined => /^val\/em_by_kind\/(.+)$/.exec(key)?.[1],
} as const;

/** A stage of a curriculum run (`train.stages`; src/core/run/config.ts's runStages): the run's step before its
 * first step (the policy it starts from), its steps, and its batches' hops mix (null: the data's own). */
export interface RunStage {
  start: number;
  steps: number;
  hopsMix: Record<string, number> | null;
}

/** A run shown in the dashboard (several are overlaid). */
export interface DashboardRun {
  id: string;
  dir: string;
  state: 'running' | 'finished' | 'failed' | 'stopped' | 'interrupted';
  step: number;
  total?: number;
  /** A running run's phase (`warmup`, `rollout`, `update`, `eval`, …), and the warm start's progress and loss. */
  phase?: string;
  warmup?: { step: number; steps: number; loss?: number };
  /** A curriculum run's stages (train.stages), marked on the charts where each after the first starts. */
  stages?: RunStage[];
}

/** One metrics.jsonl line: `step` and named numbers (DESIGN §4.3); the trainer adds `time` (Unix seconds). */
export type MetricsRow = { step: number } & Record<string, number>;

/**
 * The dashboard's settings (`searchAgent.dashboard.*`), sent by the host at start and when they change.
 * `alarmThresholds`: per alarm name, the share of a step's audited rollouts (0–1) at or above which the alarm lane marks
 * the step (0: any rollout); `*` is the share for alarms it does not name.
 */
export interface DashboardSettings {
  alarmThresholds: Record<string, number>;
}

/** What the user set in the dashboard (kept in the webview's state): smoothing (TensorBoard's debiased EMA weight,
 * 0 = none), the x-axis, the alarm lane shown or not, the charts on a log scale and pinned (keys), the chart search. */
export interface DashboardView {
  smoothing: number;
  xAxis: 'step' | 'time';
  alarms: boolean;
  log: string[];
  pinned: string[];
  search: string;
}

export interface DashboardContract extends Contract {
  host: {
    /** The runs shown and every metrics line so far (after a re-created view too). */
    getState(params: void): { runs: DashboardRun[]; metrics: { dir: string; rows: MetricsRow[] }[]; audit: { dir: string; rows: MetricsRow[] }[]; settings: DashboardSettings };
    /** Adds a run to the overlay (a quick pick of the workspace's runs). */
    addRun(params: void): void;
    removeRun(params: { dir: string }): void;
    /** Opens the rollouts of a step (the nearest step with rollouts at or before it). */
    openStep(params: { dir: string; step: number }): void;
    /** Opens the GRPO groups of a step (the nearest step with rollouts at or before it): the zero-variance chart's click. */
    openGroups(params: { dir: string; step: number }): void;
  };
  view: {
    /** What the charts hold, for tests and diagnostics. */
    describe(params: void): {
      charts: { key: string; title: string; series: number; points: number; colors: string[]; markers: string[]; log: boolean; pinned: boolean; hidden: boolean; lane: { run: string; steps: number[] }[] }[];
      runs: string[];
      theme: string;
      view: DashboardView;
    };
  };
  toView: {
    runs: { runs: DashboardRun[] };
    settings: DashboardSettings;
    /** Lines appended to a run's metrics.jsonl since the last message (or all of them with `reset`). */
    metrics: { dir: string; rows: MetricsRow[]; reset?: boolean };
    /** The audit of the run's rollouts per step (`audit/…` metrics, src/core/audit/series.ts), all of it each time. */
    audit: { dir: string; rows: MetricsRow[] };
  };
  toHost: Record<string, never>;
}

// --- rollout inspector and replay (the models are built in src/core/inspect) ------------------------------------

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
export type Overlay = 'rollout_logprob' | 'logprob' | 'ref_logprob' | 'kl' | 'advantage' | 'value' | 'entropy' | 'delta' | 'ratio';

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
  drift: { token: number; from: number; kind: 'text' | 'split' | 'template'; recorded: DriftPiece[]; reencoded: DriftPiece[] } | null;
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

export type InspectorColumn = 'index' | 'split' | 'step' | 'group' | 'sample' | 'reward' | 'em' | 'searches' | 'turns' | 'finish' | 'length' | 'data_source' | 'answer' | 'golden' | 'leaks' | 'drift' | 'logprob' | 'alarms' | 'invalid' | 'dialect';

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
  tokens: { text: string[]; ids: number[]; role: TokenRoleName[]; loss_mask: (0 | 1)[]; rollout_logprob: (number | null)[] };
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
    describe(params: void): { entry: number; token: number; tokenText: string | null; entryKind: string | null; leaks: number; overlay: string; level: string; columns: number; drift: number | null; driftShown: boolean; clipped: number; dropped: number; excluded: number };
  };
  toView: { state: ReplayState };
  toHost: Record<string, never>;
}

// --- the GRPO group view (the models are built in src/core/audit/groups.ts) --------------------------------------

/** Why a group's rewards are all equal (GRPO's advantage is 0 for every sample: no signal). */
export type ZeroVarianceReason = 'all-truncated' | 'all-invalid-format' | 'all-correct' | 'all-wrong' | 'equal-rewards';

export interface GroupSample {
  id: string;
  file: string;
  line: number;
  sample?: number;
  reward?: number;
  /** The sample's advantage (GRPO broadcasts one per sequence: read from its first scored trained token). */
  advantage: number | null;
  answer: string | null;
  /** Exact match of the answer against the golden answers (recorded `reward_parts.em`, else computed); null without golden answers. */
  em: number | null;
  formatValid: boolean;
  searches: number;
  finish?: string;
  /** Where this sample's stream first differs from the group's first sample (tokens.ids, or characters of the response without tokens); null for the first sample or an identical one. */
  divergesAt: number | null;
  length: number;
}

export interface GroupView {
  key: string;
  group: string;
  step?: number;
  split?: string;
  question?: string;
  golden?: string[];
  samples: GroupSample[];
  rewardMean: number | null;
  rewardStd: number | null;
  /** Every reward recorded and equal. */
  zeroVariance: boolean;
  reason?: ZeroVarianceReason;
  /** Where the samples' streams first stop agreeing (the shared prompt's end, or later); null with one sample. */
  divergeAt: number | null;
  unit: 'tokens' | 'chars';
  /** The group diagnostics that fire on it (group-split, group-size, phantom-advantage, kl-only-gradient, stale-group; src/core/audit/groupChecks.ts). */
  alarms: string[];
}

export interface GroupsState {
  source: string;
  step?: number;
  groups: GroupView[];
  /** Lines that could not be read (file:line: message), shown above the groups. */
  errors: string[];
}

export interface GroupsContract extends Contract {
  host: {
    getState(params: void): GroupsState | null;
    /** Replays one sample (the replay panel). */
    openSample(params: { file: string; line: number }): void;
  };
  view: {
    describe(params: void): { groups: number; zeroVariance: number; shown: number; reasons: string[]; step: number | null };
  };
  toView: { state: GroupsState };
  toHost: Record<string, never>;
}
