/** The env server's /retrieve over real HTTP on loopback: Search-R1's API, validation, remote retrievers, load. */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { Bm25Index, IndexTooLargeError } from '../../src/core/retrieval/bm25';
import { buildBm25Index } from '../../src/core/retrieval/corpus';
import { Bm25Retriever, RemoteRetriever, RemoteRetrieverError } from '../../src/core/retrieval/retriever';
import { type EnvServer, startEnvServer } from '../../src/server/server';

const ROOT = join(__dirname, '..', '..');
const CORPUS = join(ROOT, 'examples', 'demo', 'corpus.jsonl');

async function post(port: number, body: unknown, path = '/retrieve'): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST',
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

describe('env server /retrieve (BM25 over the demo corpus, 3 search threads)', function () {
  this.timeout(60_000);
  let dir: string;
  let server: EnvServer;
  let index: Bm25Index;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-retrieve-'));
    await buildBm25Index(CORPUS, join(dir, 'index'));
    index = await Bm25Index.load(join(dir, 'index'));
    server = await startEnvServer({
      version: 'test',
      retriever: await Bm25Retriever.open(join(dir, 'index'), { workers: 3 }),
    });
  });
  after(async () => {
    await server.close();
    index.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers Search-R1’s request with {result: [[{document: {id, contents}, score}]]}, topk 3 by default', async () => {
    const queries = ['who founded the observatory?', 'river', 'zzzz nothing matches'];
    const r = await post(server.port, { queries, return_scores: true });
    assert.equal(r.status, 200);
    assert.equal(r.body.result.length, 3);
    assert.equal(r.body.result[0].length, 3);
    assert.deepEqual(r.body.result[2], []);
    const hit = r.body.result[0][0];
    assert.deepEqual(Object.keys(hit).sort(), ['document', 'score']);
    assert.deepEqual(Object.keys(hit.document).sort(), ['contents', 'id']);
    assert.match(hit.document.contents, /^"[^"\n]+"\n/, 'contents is "Title"\\ntext');
    // Identical to the index searched directly.
    const direct = index.search(queries[0]!, { k: 3 });
    assert.deepEqual(
      r.body.result[0].map((h: { document: { id: string } }) => h.document.id),
      direct.map((h) => h.id),
    );
    assert.deepEqual(
      r.body.result[0].map((h: { score: number }) => h.score),
      direct.map((h) => h.score),
    );
  });

  it('returns plain document lists when return_scores is false or absent, and honours topk', async () => {
    const r = await post(server.port, { queries: ['who founded the observatory?'], topk: 5 });
    assert.equal(r.body.result[0].length, 5);
    assert.deepEqual(Object.keys(r.body.result[0][0]).sort(), ['contents', 'id']);
    const s = await post(server.port, { queries: ['river'], topk: null, return_scores: false });
    assert.equal(s.body.result[0].length, 3, 'topk null → the default');
  });

  it('rejects malformed requests with 400 naming the field', async () => {
    const cases: [unknown, RegExp][] = [
      ['[1, 2]', /body: expected a JSON object/],
      [{ topk: 3 }, /queries: expected an array of strings, got nothing/],
      [{ queries: 'one' }, /queries: expected an array/],
      [{ queries: ['a', 7] }, /queries\[1\]: expected a string, got 7\b/],
      [{ queries: ['a'], topk: -1 }, /topk: expected a positive integer/],
      [{ queries: ['a'], topk: 2.5 }, /topk: expected a positive integer/],
      [{ queries: ['a'], topk: 1000 }, /topk: 1000; at most 100/],
      [{ queries: ['a'], return_scores: 'yes' }, /return_scores: expected a boolean/],
      [{ queries: Array(16385).fill('x') }, /queries: 16385 queries; at most 16384/],
    ];
    for (const [body, message] of cases) {
      const r = await post(server.port, body);
      assert.equal(r.status, 400, JSON.stringify(body).slice(0, 80));
      assert.match(r.body.error, message);
    }
    assert.equal(
      (await post(server.port, { queries: ['still fine'] })).status,
      200,
      'the server survives bad requests',
    );
  });

  it('health names the retriever and its size', async () => {
    const h = (await (await fetch(`http://127.0.0.1:${server.port}/health`)).json()) as {
      retriever: { kind: string; documents: number; default_topk: number; workers: number };
    };
    assert.equal(h.retriever.kind, 'bm25');
    assert.equal(h.retriever.documents, 2912);
    assert.equal(h.retriever.default_topk, 3);
    assert.equal(h.retriever.workers, 3);
  });

  it('under load: concurrent clients get no errors and, from 3 workers, the results of one thread called serially', async () => {
    const questions = Array.from({ length: 40 }, (_, i) => [
      `who founded museum ${i}`,
      `river town ${i % 7}`,
      `born in the year ${1700 + i}`,
    ]);
    const serial = [];
    const one = await startEnvServer({ version: 'test', retriever: await Bm25Retriever.open(join(dir, 'index')) });
    try {
      for (const qs of questions)
        serial.push((await post(one.port, { queries: qs, topk: 3, return_scores: true })).body);
    } finally {
      await one.close();
    }
    // Whole batches too: one request of 120 queries is cut into chunks across the workers and put back in order.
    const batch = (await post(server.port, { queries: questions.flat(), topk: 3, return_scores: true })).body;
    assert.deepEqual(
      batch.result,
      serial.flatMap((b) => b.result),
    );
    const clients = 16;
    const rounds = 5;
    const t0 = performance.now();
    const results = await Promise.all(
      Array.from({ length: clients }, (_, c) =>
        (async () => {
          const out = [];
          for (let r = 0; r < rounds; r++) {
            const k = (c * rounds + r) % questions.length;
            const res = await post(server.port, { queries: questions[k], topk: 3, return_scores: true });
            out.push({ k, status: res.status, body: res.body });
          }
          return out;
        })(),
      ),
    );
    const seconds = (performance.now() - t0) / 1000;
    for (const list of results) {
      for (const { k, status, body } of list) {
        assert.equal(status, 200);
        assert.deepEqual(body, serial[k]);
      }
    }
    const queries = clients * rounds * 3;
    console.log(
      `      load: ${clients} clients × ${rounds} requests × 3 queries in ${seconds.toFixed(2)} s (${(queries / seconds).toFixed(0)} queries/s)`,
    );
  });
});

describe('remote retriever', function () {
  this.timeout(30_000);
  let dir: string;
  let backend: EnvServer;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-remote-'));
    await buildBm25Index(CORPUS, join(dir, 'index'));
    backend = await startEnvServer({ version: 'backend', retriever: await Bm25Retriever.open(join(dir, 'index')) });
  });
  after(async () => {
    await backend.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('proxies a Search-R1-compatible server with the same results', async () => {
    const remote = new RemoteRetriever(`http://127.0.0.1:${backend.port}/retrieve`);
    const front = await startEnvServer({ version: 'front', retriever: remote });
    try {
      const q = { queries: ['who founded the observatory?', 'river'], topk: 4, return_scores: true };
      assert.deepEqual((await post(front.port, q)).body, (await post(backend.port, q)).body);
    } finally {
      await front.close();
    }
  });

  it('retries 5xx and connection errors with backoff, then succeeds', async () => {
    let calls = 0;
    const flaky: Server = createServer((req, res) => {
      calls++;
      if (calls <= 2) {
        res.writeHead(503).end('busy');
        return;
      }
      req.resume();
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ result: [[{ document: { id: '7', contents: '"T"\nx' }, score: 1.5 }]] }));
    });
    await new Promise<void>((r) => flaky.listen(0, '127.0.0.1', () => r()));
    const port = (flaky.address() as { port: number }).port;
    const log: string[] = [];
    try {
      const remote = new RemoteRetriever(`http://127.0.0.1:${port}/retrieve`, {
        backoffMs: 10,
        log: (l) => log.push(l),
      });
      const r = await remote.retrieve(['q'], 3);
      assert.deepEqual(r, [[{ document: { id: '7', contents: '"T"\nx' }, score: 1.5 }]]);
      assert.equal(calls, 3);
      assert.equal(log.length, 2);
      assert.match(log[0]!, /HTTP 503/);
    } finally {
      flaky.close();
    }
  });

  it('says clearly, naming the URL, when the retriever stays down', async () => {
    const dead = createServer();
    await new Promise<void>((r) => dead.listen(0, '127.0.0.1', () => r()));
    const port = (dead.address() as { port: number }).port;
    dead.close();
    const url = `http://127.0.0.1:${port}/retrieve`;
    const remote = new RemoteRetriever(url, { retries: 2, backoffMs: 5 });
    await assert.rejects(
      remote.retrieve(['q'], 3),
      (e: unknown) =>
        e instanceof RemoteRetrieverError &&
        e.message.includes(url) &&
        /after 3 attempts/.test(e.message) &&
        /ECONNREFUSED/.test(e.message),
    );
    // Through the env server: 502 with the same message.
    const front = await startEnvServer({ version: 'front', retriever: remote });
    try {
      const r = await post(front.port, { queries: ['q'] });
      assert.equal(r.status, 502);
      assert.ok(r.body.error.includes(url));
    } finally {
      await front.close();
    }
    assert.throws(() => new RemoteRetriever('ftp://x/retrieve'), /not a usable retriever URL/);
  });

  it('times out a server that does not answer', async () => {
    const silent = createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const port = (silent.address() as { port: number }).port;
    try {
      const remote = new RemoteRetriever(`http://127.0.0.1:${port}/retrieve`, {
        timeoutMs: 100,
        retries: 1,
        backoffMs: 5,
      });
      await assert.rejects(remote.retrieve(['q'], 3), /no answer within 100 ms/);
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  });
});

describe('retrieval CLI and limits', function () {
  this.timeout(60_000);
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-cli-retrieval-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  const cli = (...args: string[]) =>
    execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
      reject: false,
    });

  it('says clearly when a corpus does not fit in memory for indexing', async () => {
    await assert.rejects(
      buildBm25Index(CORPUS, join(dir, 'too-big'), { memoryLimitBytes: 1024 }),
      (e: unknown) =>
        e instanceof IndexTooLargeError &&
        /does not fit for in-memory indexing here/.test(e.message) &&
        /GiB/.test(e.message),
    );
  });

  it('rebuilds a cached corpus index it cannot read (a file missing), saying so, with the same results', async () => {
    const cacheDir = join(dir, 'cache');
    const log: string[] = [];
    const first = await Bm25Retriever.forCorpus(CORPUS, { cacheDir, workers: 0, log: (l) => log.push(l) });
    const want = await first.retrieve(['who wrote the odyssey'], 5);
    await first.close();
    const [key] = readdirSync(cacheDir);
    rmSync(join(cacheDir, key!, 'block-skip.bin'));
    const second = await Bm25Retriever.forCorpus(CORPUS, { cacheDir, workers: 0, log: (l) => log.push(l) });
    assert.deepEqual(await second.retrieve(['who wrote the odyssey'], 5), want);
    await second.close();
    assert.match(log.join('\n'), /cannot be read \(.*block-skip\.bin.*\); rebuilding it/);
  });
  it('index builds a BM25 index that serve --index serves', async () => {
    const out = join(dir, 'idx');
    const r = await cli('index', CORPUS, '--out', out, '--k1', '1.2', '--b', '0.75');
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stderr, /BM25 index of 2,912 documents/);
    const meta = JSON.parse(readFileSync(join(out, 'meta.json'), 'utf8'));
    assert.deepEqual([meta.k1, meta.b], [1.2, 0.75]);
    const child = execa(
      process.execPath,
      [
        '-r',
        join(ROOT, 'test/register.cjs'),
        join(ROOT, 'src/cli/main.ts'),
        'serve',
        '--index',
        out,
        '--port',
        '0',
        '--topk',
        '2',
      ],
      { reject: false },
    );
    try {
      const port = await new Promise<number>((resolve, reject) => {
        let buf = '';
        child.stdout!.on('data', (d: Buffer) => {
          buf += d.toString();
          if (buf.includes('\n')) resolve(JSON.parse(buf.split('\n')[0]!).port);
        });
        child.once('exit', () => reject(new Error(`serve exited: ${child.stderr}`)));
      });
      const res = await post(port, { queries: ['who founded the observatory?'] });
      assert.equal(res.body.result[0].length, 2, '--topk 2 is the default');
    } finally {
      child.kill('SIGTERM');
      await child;
    }
  });

  it('reports bad usage with exit 2', async () => {
    const r = await cli('index', CORPUS, '--out', join(dir, 'x'), '--b', '7');
    assert.equal(r.exitCode, 2);
    assert.match(r.stderr, /--b in \[0, 1\]/);
    const s = await cli('serve', '--retriever', 'dense', '--port', '0');
    assert.equal(s.exitCode, 2);
    assert.match(s.stderr, /--retriever dense needs --index DIR/);
    const w = await cli('serve', '--workers', '0', '--port', '0');
    assert.equal(w.exitCode, 2);
    assert.match(w.stderr, /--workers must be an integer in 1\.\.1024, got 0/);
    const m = await cli('index', join(dir, 'missing.jsonl'), '--out', join(dir, 'y'));
    assert.equal(m.exitCode, 2);
    assert.match(m.stderr, /missing\.jsonl/);
  });
});
