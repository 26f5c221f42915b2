/**
 * The env server survives any request (issue 40, item 4): hostile bodies over real HTTP on loopback — JSON nested
 * 10^4–10^5 deep in every field that is checked or passed on to the reward workers, a 1.5 M-element field, and
 * clients that send headers and then stall — answer 400/408 naming the field, and the server goes on serving.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { join } from 'node:path';
import { type EnvServerProcess, startEnvServerProcess } from '../../src/core/host/processes';
import { NullRetriever } from '../../src/core/retrieval/retriever';
import { openReward } from '../../src/core/rewards/scoring';
import { describeValue, MAX_JSON_DEPTH, nestsDeeperThan } from '../../src/core/schema/bounds';
import { type EnvServer, startEnvServer } from '../../src/server/server';

const ROOT = join(__dirname, '..', '..');
const launcher = {
  node: process.execPath,
  args: ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/server/main.ts')],
};

/** JSON text of `leaf` wrapped `depth` times (built as text: the value itself could not be stringified). */
function nested(depth: number, open = '[', close = ']', leaf = '1'): string {
  return open.repeat(depth) + leaf + close.repeat(depth);
}
const deepObject = (depth: number) => nested(depth, '{"a":', '}', 'null');

async function post(port: number, path: string, body: string): Promise<{ status: number; text: string; body: any }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', body });
  const text = await res.text();
  return { status: res.status, text, body: JSON.parse(text) };
}

describe('bounds on untrusted JSON', () => {
  it('measures depth without recursion, at any depth', () => {
    assert.equal(nestsDeeperThan(JSON.parse(nested(1_000_000)), 64), true);
    assert.equal(nestsDeeperThan(JSON.parse(nested(64)), 64), false);
    assert.equal(nestsDeeperThan(JSON.parse(nested(65)), 64), true);
    assert.equal(nestsDeeperThan({ a: [1, { b: 2 }], c: 'x' }, 3), false);
    assert.equal(nestsDeeperThan({ a: [1, { b: [] }] }, 3), true);
    assert.equal(nestsDeeperThan('scalar', 0), false);
  });

  it('describes a value without printing a container', () => {
    assert.equal(describeValue(new Array(1_500_000).fill(1)), 'an array of 1500000 elements');
    assert.equal(describeValue(JSON.parse(deepObject(100_000))), 'an object');
    assert.equal(describeValue('x'.repeat(10_000)).length < 100, true);
    assert.equal(describeValue(3), '3');
    assert.equal(describeValue(undefined), 'nothing');
  });
});

describe('env server limits (real server on loopback)', function () {
  this.timeout(60_000);
  let server: EnvServer;
  before(async () => {
    const r = await openReward('builtin:em', { workers: 1 });
    server = await startEnvServer({
      version: 'test',
      retriever: new NullRetriever(),
      reward: { name: 'builtin:em', file: r.compiled.file, sandbox: r.sandbox },
      requestTimeoutMs: 600,
      headersTimeoutMs: 400,
    });
  });
  after(() => server.close());

  const item = (extra: string) => `{"items":[{"response":"<answer>a</answer>","golden":["a"]${extra}}]}`;

  it('refuses meta nested 10,000 deep with 400 naming the field and the limit, and scores the next request', async () => {
    const r = await post(server.port, '/reward', item(`,"meta":${deepObject(10_000)}`));
    assert.equal(r.status, 400);
    assert.match(r.body.error, /^items\[0\]\.meta: nested deeper than 64 levels/);
    // The limit is exact: 64 levels pass (the meta object is the first).
    const ok = await post(server.port, '/reward', item(`,"meta":${deepObject(MAX_JSON_DEPTH - 1)}`));
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.body.results[0].reward, 1);
  });

  for (const [field, path, body] of [
    ['topk', '/retrieve', (v: string) => `{"queries":["x"],"topk":${v}}`],
    ['return_scores', '/retrieve', (v: string) => `{"queries":["x"],"return_scores":${v}}`],
    ['queries', '/retrieve', (v: string) => `{"queries":${v}}`],
    ['items[0].strict_actions', '/reward', (v: string) => item(`,"strict_actions":${v}`)],
    ['items[0].dialect', '/reward', (v: string) => item(`,"dialect":${v}`)],
    ['metrics', '/reward', (v: string) => `{"items":[],"metrics":${v}}`],
  ] as const) {
    it(`answers 400 naming ${field} when it is nested 100,000 deep`, async () => {
      const r = await post(server.port, path, body(nested(100_000)));
      assert.equal(r.status, 400, r.text.slice(0, 200));
      assert.ok(r.body.error.startsWith(field), r.body.error);
      assert.ok(r.text.length < 300, 'a short message');
    });
  }

  it('does not echo a 1.5 M-element field back', async () => {
    const big = `[${'1,'.repeat(1_500_000)}1]`;
    for (const [path, body] of [
      ['/retrieve', `{"queries":["x"],"topk":${big}}`],
      ['/reward', item(`,"strict_actions":${big}`)],
    ] as const) {
      const r = await fetch(`http://127.0.0.1:${server.port}${path}`, { method: 'POST', body });
      const text = await r.text();
      assert.equal(r.status, 400);
      assert.ok(text.length < 300, `${path}: ${text.length} bytes`);
      assert.match(text, /an array of 1500001 elements/);
    }
  });

  /** A raw socket that sends `head` and then nothing: resolves with what the server wrote once it closes. */
  function stall(head: string): Promise<{ data: string; ms: number }> {
    return new Promise((resolve, reject) => {
      const t0 = Date.now();
      let data = '';
      const socket = connect(server.port, '127.0.0.1', () => socket.write(head));
      socket.on('data', (d) => (data += d.toString()));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve({ data, ms: Date.now() - t0 }));
      setTimeout(() => {
        socket.destroy();
        reject(new Error('the server kept a stalled connection open for 20 s'));
      }, 20_000).unref();
    });
  }

  it('closes a connection whose body stalls after the headers (408)', async () => {
    const r = await stall(
      'POST /reward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"items": [',
    );
    assert.match(r.data, /^HTTP\/1\.1 408/);
    const health = await fetch(`http://127.0.0.1:${server.port}/health`);
    assert.equal(health.status, 200, 'still serving');
  });

  it('closes a connection whose headers stall', async () => {
    const r = await stall('POST /reward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le');
    assert.match(r.data, /^HTTP\/1\.1 408/);
  });
});

describe('env server process under hostile requests', function () {
  this.timeout(120_000);
  let env: EnvServerProcess;
  before(async () => {
    env = await startEnvServerProcess(['--port', '0', '--retriever', 'none', '--reward', 'builtin:em'], { launcher });
  });
  after(() => env?.child.stop(2_000));

  it('survives meta nested 10,000 deep (it used to die ~7 s later in Worker.postMessage)', async () => {
    const r = await post(
      env.port,
      '/reward',
      `{"items":[{"response":"<answer>a</answer>","golden":["a"],"meta":${deepObject(10_000)}}]}`,
    );
    assert.equal(r.status, 400);
    // Past the batch deadline that used to rethrow the clone error, the process still serves.
    await new Promise((res) => setTimeout(res, 9_000));
    const ok = await post(env.port, '/reward', '{"items":[{"response":"<answer>a</answer>","golden":["a"]}]}');
    assert.equal(ok.status, 200);
    assert.equal(ok.body.results[0].reward, 1);
  });
});
