/** The env server skeleton over real HTTP on loopback, in-process and as its own process. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { execa } from 'execa';
import { type EnvServer, startEnvServer } from '../../src/server/server';

const ROOT = join(__dirname, '..', '..');

async function call(port: number, path: string, init?: RequestInit): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, init);
  return { status: res.status, body: await res.json() };
}

describe('env server', () => {
  let server: EnvServer;
  const lines: string[] = [];
  before(async () => {
    server = await startEnvServer({ version: 'test', maxBodyBytes: 1024, log: (l) => lines.push(l) });
  });
  after(() => server.close());

  it('binds 127.0.0.1 on an ephemeral port', () => {
    const address = server.server.address();
    assert.ok(address && typeof address === 'object');
    assert.equal(address.address, '127.0.0.1');
    assert.ok(server.port > 0);
  });

  it('answers /health', async () => {
    const { status, body } = await call(server.port, '/health');
    assert.equal(status, 200);
    assert.equal(body.status, 'ok');
    assert.equal(body.version, 'test');
    assert.equal(typeof body.uptime_s, 'number');
  });

  it('gives clear errors for bad requests and never crashes', async () => {
    assert.equal((await call(server.port, '/nope')).status, 404);
    const wrongMethod = await call(server.port, '/health', { method: 'POST', body: '{}' });
    assert.equal(wrongMethod.status, 405);
    const badJson = await call(server.port, '/retrieve', { method: 'POST', body: '{"queries": [' });
    assert.equal(badJson.status, 400);
    assert.match(badJson.body.error, /not valid JSON/);
    const empty = await call(server.port, '/retrieve', { method: 'POST', body: '' });
    assert.equal(empty.status, 400);
    const big = await call(server.port, '/retrieve', {
      method: 'POST',
      body: JSON.stringify({ queries: ['x'.repeat(2000)] }),
    });
    assert.equal(big.status, 413);
    assert.equal((await call(server.port, '/health')).status, 200, 'still serving');
    assert.ok(
      lines.some((l) => /^POST \/retrieve 400 /.test(l)),
      'logs one line per request',
    );
  });

  it('without a retriever or a reward module, /retrieve and /reward say so (503)', async () => {
    const r = await call(server.port, '/retrieve', { method: 'POST', body: JSON.stringify({ queries: ['who'] }) });
    assert.equal(r.status, 503);
    assert.match(r.body.error, /no retriever/);
    const w = await call(server.port, '/reward', { method: 'POST', body: JSON.stringify({ items: [] }) });
    assert.equal(w.status, 503);
    assert.match(w.body.error, /no reward module/);
  });

  it('runs as a process: prints its listening line first and exits 0 on SIGTERM', async () => {
    const child = execa(
      process.execPath,
      [
        '-r',
        join(ROOT, 'test/register.cjs'),
        join(ROOT, 'src/server/main.ts'),
        '--port',
        '0',
        '--corpus',
        join(ROOT, 'test/fixtures/bm25/corpus.jsonl'),
      ],
      {
        reject: false,
      },
    );
    const first = await new Promise<string>((resolve, reject) => {
      let buf = '';
      child.stdout!.on('data', (d: Buffer) => {
        buf += d.toString();
        const nl = buf.indexOf('\n');
        if (nl >= 0) resolve(buf.slice(0, nl));
      });
      child.once('exit', () => reject(new Error('server exited before listening')));
    });
    const msg = JSON.parse(first);
    assert.equal(msg.event, 'listening');
    const health = await call(msg.port, '/health');
    assert.equal(health.status, 200);
    assert.equal(health.body.retriever.kind, 'bm25');
    assert.equal(health.body.retriever.documents, 322);
    child.kill('SIGTERM');
    const result = await child;
    assert.equal(result.exitCode, 0);
  });

  it('as a process, reports a port in use and exits 2', async () => {
    const r = await execa(
      process.execPath,
      ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/server/main.ts'), '--port', String(server.port)],
      {
        reject: false,
      },
    );
    assert.equal(r.exitCode, 2);
    assert.match(r.stderr, /port already in use/);
  });
});
