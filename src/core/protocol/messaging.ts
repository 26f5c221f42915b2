/**
 * The webview ↔ extension-host messaging: the generic machinery every panel shares, imported by both sides.
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
 * against the same declaration: one module per panel beside this one, named as the panel's folder under `webview/`
 * (rewardLab.ts, dashboard.ts, rollouts.ts, replay.ts, groups.ts), with that panel's view models. This file is pure
 * TypeScript and imports nothing: no `vscode`, no DOM, no Node APIs (it is bundled into every webview).
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
      return (
        typeof m.error === 'object' &&
        m.error !== null &&
        typeof (m.error as { message?: unknown }).message === 'string'
      );
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
    const handler = Object.hasOwn(this.handlers, method)
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
      const error =
        e instanceof Error ? { message: e.message, code: (e as { code?: string }).code } : { message: String(e) };
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
export function hostEndpoint<C extends Contract>(
  name: WebviewName,
  transport: Transport,
  options?: EndpointOptions,
): HostEndpoint<C> {
  return new Endpoint(transport, 'host', name, options);
}

/** The webview side: announces `ready` at once, serves `C.view`, calls `C.host`. */
export function viewEndpoint<C extends Contract>(
  name: WebviewName,
  transport: Transport,
  options?: EndpointOptions,
): ViewEndpoint<C> {
  return new Endpoint(transport, 'view', name, options);
}
