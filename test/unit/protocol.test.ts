import assert from 'node:assert/strict';
import {
  type Contract,
  EndpointClosedError,
  type Envelope,
  hostEndpoint,
  isEnvelope,
  PROTOCOL_VERSION,
  RemoteError,
  RequestTimeoutError,
  type Transport,
  viewEndpoint,
} from '../../src/core/protocol/messaging';

interface TestContract extends Contract {
  host: {
    add(params: { a: number; b: number }): number;
    fail(params: void): void;
    slow(params: void): string;
  };
  view: { ping(params: void): string };
  toView: { tick: { n: number } };
  toHost: { clicked: { id: string } };
}

/** Two transports joined back to back, delivering asynchronously like postMessage. Records what crosses. */
function pipe() {
  const log: { from: 'host' | 'view'; message: Envelope }[] = [];
  const listeners = { host: new Set<(m: unknown) => void>(), view: new Set<(m: unknown) => void>() };
  const side = (me: 'host' | 'view', other: 'host' | 'view'): Transport => ({
    post(message) {
      log.push({ from: me, message });
      const copy = structuredClone(message);
      queueMicrotask(() => listeners[other].forEach((l) => l(copy)));
    },
    listen(handler) {
      listeners[me].add(handler);
      return () => listeners[me].delete(handler);
    },
  });
  const inject = (to: 'host' | 'view', message: unknown) => listeners[to].forEach((l) => l(message));
  return { host: side('host', 'view'), view: side('view', 'host'), log, inject };
}

const tick = () => new Promise((r) => setTimeout(r, 0));

describe('protocol', () => {
  it('queues host messages until the webview says ready, then delivers them in order', async () => {
    const p = pipe();
    const host = hostEndpoint<TestContract>('dashboard', p.host);
    host.emit('tick', { n: 1 });
    host.emit('tick', { n: 2 });
    await tick();
    assert.equal(p.log.length, 0, 'nothing may be posted before ready');
    assert.equal(host.ready, false);

    const seen: number[] = [];
    const view = viewEndpoint<TestContract>('dashboard', p.view);
    view.on('tick', ({ n }) => seen.push(n));
    await tick();
    await tick();
    assert.equal(host.ready, true);
    assert.deepEqual(seen, [1, 2]);
    assert.deepEqual(p.log[0], { from: 'view', message: { t: 'ready', v: PROTOCOL_VERSION, webview: 'dashboard' } });
  });

  it('resolves requests with the other side’s result, in both directions', async () => {
    const p = pipe();
    const host = hostEndpoint<TestContract>('dashboard', p.host);
    host.handle('add', ({ a, b }) => a + b);
    const view = viewEndpoint<TestContract>('dashboard', p.view);
    view.handle('ping', () => 'pong');
    assert.equal(await view.request('add', { a: 2, b: 3 }), 5);
    assert.equal(await host.request('ping'), 'pong');
    // Concurrent requests are matched by id, not by order.
    host.handle('slow', () => new Promise((r) => setTimeout(() => r('late'), 20)));
    const [slow, sum] = await Promise.all([view.request('slow'), view.request('add', { a: 1, b: 1 })]);
    assert.equal(slow, 'late');
    assert.equal(sum, 2);
  });

  it('rejects with the handler’s error, and with no-handler for unknown methods', async () => {
    const p = pipe();
    const host = hostEndpoint<TestContract>('dashboard', p.host);
    host.handle('fail', () => {
      throw Object.assign(new Error('dataset missing: data/train.jsonl'), { code: 'ENOENT' });
    });
    const view = viewEndpoint<TestContract>('dashboard', p.view);
    await assert.rejects(view.request('fail'), (e: unknown) => {
      assert.ok(e instanceof RemoteError);
      assert.equal(e.message, 'dataset missing: data/train.jsonl');
      assert.equal(e.code, 'ENOENT');
      return true;
    });
    await assert.rejects(
      view.request('add', { a: 1, b: 2 }),
      (e: unknown) => e instanceof RemoteError && e.code === 'no-handler',
    );
    // Prototype names are not handlers.
    await assert.rejects(
      (view as any).request('toString'),
      (e: unknown) => e instanceof RemoteError && e.code === 'no-handler',
    );
  });

  it('times out a request that gets no answer, and drops the late answer', async () => {
    const p = pipe();
    const timers: { fn: () => void; ms: number; cleared: boolean }[] = [];
    const clock = {
      setTimeout: (fn: () => void, ms: number) => {
        const t = { fn, ms, cleared: false };
        timers.push(t);
        return t;
      },
      clearTimeout: (h: unknown) => {
        (h as { cleared: boolean }).cleared = true;
      },
    };
    const host = hostEndpoint<TestContract>('dashboard', p.host);
    let answer: (s: string) => void = () => {};
    host.handle('slow', () => new Promise<string>((r) => (answer = r)));
    const view = viewEndpoint<TestContract>('dashboard', p.view, { timeoutMs: 250, ...clock });
    const pending = view.request('slow');
    await tick();
    assert.equal(timers.length, 1);
    assert.equal(timers[0]!.ms, 250);
    timers[0]!.fn();
    await assert.rejects(
      pending,
      (e: unknown) => e instanceof RequestTimeoutError && e.method === 'slow' && e.timeoutMs === 250,
    );
    answer('too late');
    await tick();
    await tick(); // no unhandled rejection, no throw

    // A per-request timeout overrides the default, and an answered request clears its timer.
    host.handle('add', ({ a, b }) => a + b);
    const ok = view.request('add', { a: 1, b: 1 }, { timeoutMs: 5 });
    assert.equal(await ok, 2);
    assert.equal(timers[1]!.ms, 5);
    assert.equal(timers[1]!.cleared, true);
  });

  it('rejects pending requests when disposed, and refuses new ones', async () => {
    const p = pipe();
    const host = hostEndpoint<TestContract>('dashboard', p.host);
    host.handle('slow', () => new Promise<string>(() => {}));
    const view = viewEndpoint<TestContract>('dashboard', p.view);
    const pending = view.request('slow');
    await tick();
    view.dispose();
    await assert.rejects(pending, EndpointClosedError);
    await assert.rejects(view.request('slow'), EndpointClosedError);
  });

  it('hears ready again when the webview is re-created, so the host can restore state', async () => {
    const p = pipe();
    const host = hostEndpoint<TestContract>('dashboard', p.host);
    let readies = 0;
    host.onReady(() => {
      readies++;
      host.emit('tick', { n: readies });
    });
    const first: number[] = [];
    const v1 = viewEndpoint<TestContract>('dashboard', p.view);
    v1.on('tick', ({ n }) => first.push(n));
    await tick();
    await tick();
    v1.dispose();
    const second: number[] = [];
    const v2 = viewEndpoint<TestContract>('dashboard', p.view);
    v2.on('tick', ({ n }) => second.push(n));
    await tick();
    await tick();
    assert.equal(readies, 2);
    assert.deepEqual(first, [1]);
    assert.deepEqual(second, [2]);
    // onReady registered after the fact runs at once.
    let late = 0;
    host.onReady(() => late++);
    assert.equal(late, 1);
  });

  it('reports and ignores what is not an envelope, and a ready from another webview or version', async () => {
    const p = pipe();
    const errors: string[] = [];
    const host = hostEndpoint<TestContract>('dashboard', p.host, { onProtocolError: (e) => errors.push(e) });
    p.inject('host', 'hello');
    p.inject('host', { t: 'req', id: 'x', method: 'add' });
    p.inject('host', { t: 'ready', v: PROTOCOL_VERSION + 1, webview: 'dashboard' });
    p.inject('host', { t: 'ready', v: PROTOCOL_VERSION, webview: 'replay' });
    assert.equal(host.ready, false);
    assert.equal(errors.length, 4);
    assert.match(errors[2]!, /protocol v2/);
  });

  it('isolates a throwing event listener', async () => {
    const p = pipe();
    const errors: string[] = [];
    const host = hostEndpoint<TestContract>('dashboard', p.host, { onProtocolError: (e) => errors.push(e) });
    const got: string[] = [];
    host.on('clicked', () => {
      throw new Error('boom');
    });
    host.on('clicked', ({ id }) => got.push(id));
    const view = viewEndpoint<TestContract>('dashboard', p.view);
    view.emit('clicked', { id: 'a' });
    await tick();
    assert.deepEqual(got, ['a']);
    assert.deepEqual(errors, ['listener threw: boom']);
  });

  it('forwards the webview’s diagnostics to the host log', async () => {
    const p = pipe();
    const logged: string[] = [];
    hostEndpoint<TestContract>('dashboard', p.host, { onLog: (level, message) => logged.push(`${level}: ${message}`) });
    const view = viewEndpoint<TestContract>('dashboard', p.view);
    view.log('error', 'CSP blocked script-src-elem');
    await tick();
    assert.deepEqual(logged, ['error: CSP blocked script-src-elem']);
  });

  it('validates envelope shapes', () => {
    const good: unknown[] = [
      { t: 'ready', v: 1, webview: 'dashboard' },
      { t: 'req', id: 1, method: 'm' },
      { t: 'res', id: 1, ok: true },
      { t: 'res', id: 1, ok: false, error: { message: 'x' } },
      { t: 'evt', name: 'e' },
      { t: 'log', level: 'warn', message: 'm' },
    ];
    const bad: unknown[] = [
      null,
      1,
      [],
      { t: 'req', id: 1.5, method: 'm' },
      { t: 'res', id: 1, ok: false },
      { t: 'res', id: 1, ok: false, error: {} },
      { t: 'evt' },
      { t: 'x' },
      { t: 'log', level: 'debug', message: 'm' },
    ];
    for (const g of good) assert.equal(isEnvelope(g), true, JSON.stringify(g));
    for (const b of bad) assert.equal(isEnvelope(b), false, JSON.stringify(b));
  });
});
