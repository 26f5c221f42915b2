/**
 * The env server at Search-R1's batch sizes (its trainer sends every search of a turn in one request: 2,560 queries
 * at its defaults), over-long queries, a port already taken, corpus lines skipped, and the BM25 pool's fairness
 * between a big request and a small one. Real servers on loopback.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { Bm25Pool } from '../../src/core/retrieval/bm25Pool';
import { buildBm25Index } from '../../src/core/retrieval/corpus';
import { Bm25Retriever } from '../../src/core/retrieval/retriever';
import { type EnvServer, startEnvServer } from '../../src/server/server';

const ROOT = join(__dirname, '..', '..');
const CORPUS = join(ROOT, 'examples', 'demo', 'corpus.jsonl');

async function post(port: number, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${port}/retrieve`, { method: 'POST', body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

describe('env server batches, limits and fairness', function () {
  this.timeout(120_000);
  let dir: string;
  let server: EnvServer;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-batches-'));
    await buildBm25Index(CORPUS, join(dir, 'index'));
    server = await startEnvServer({
      version: 'test',
      retriever: await Bm25Retriever.open(join(dir, 'index'), { workers: 2 }),
    });
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers a Search-R1-sized batch (2,560 queries) in order, as the same queries asked one by one', async () => {
    const words = ['river', 'founded', 'museum', 'born', 'town', 'observatory', 'poet', 'province'];
    const queries = Array.from({ length: 2560 }, (_, i) => `${words[i % 8]} ${words[(i * 5 + 3) % 8]} ${i}`);
    const r = await post(server.port, { queries, topk: 3, return_scores: true });
    assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 200));
    assert.equal(r.body.result.length, 2560);
    for (const i of [0, 1, 1023, 1024, 2047, 2559]) {
      const one = await post(server.port, { queries: [queries[i]], topk: 3, return_scores: true });
      assert.deepEqual(r.body.result[i], one.body.result[0], `query ${i}`);
    }
    const h = (await (await fetch(`http://127.0.0.1:${server.port}/health`)).json()) as { limits: any };
    assert.equal(h.limits.max_queries, 16384);
    assert.equal(h.limits.max_body_bytes, 16 * 1024 * 1024);
  });

  it('cuts an over-long query to 8,192 characters for retrieval instead of failing the whole batch', async () => {
    const head = `who founded the observatory ${'x'.repeat(8192 - 28)}`;
    const long = `${head}${' river'.repeat(2000)}`;
    const r = await post(server.port, { queries: ['river', long], topk: 3, return_scores: true });
    assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 200));
    const cut = await post(server.port, { queries: [head], topk: 3, return_scores: true });
    assert.deepEqual(r.body.result[1], cut.body.result[0]);
  });

  it('refuses a batch over its limit with 400 naming it (maxQueries)', async () => {
    const small = await startEnvServer({ version: 'test', maxQueries: 4 });
    try {
      const r = await post(small.port, { queries: ['a', 'b', 'c', 'd', 'e'] });
      assert.equal(r.status, 400);
      assert.match(r.body.error, /queries: 5 queries; at most 4 per request/);
    } finally {
      await small.close();
    }
  });

  it('the pool takes requests in turns: a small request behind a big one finishes before the big one', async () => {
    const pool = await Bm25Pool.open(join(dir, 'index'), { workers: 1 });
    try {
      const order: string[] = [];
      const big = pool.search(
        Array.from({ length: 400 }, (_, i) => `river town founded ${i}`),
        100,
      );
      const small = pool.search(['who founded the observatory?'], 3);
      await Promise.all([big.then(() => order.push('big')), small.then(() => order.push('small'))]);
      // Strict FIFO would run all of the big request's chunks first; in turns, the small one's only chunk runs second.
      assert.deepEqual(order, ['small', 'big']);
      assert.equal((await big).length, 400);
    } finally {
      await pool.close();
    }
  });

  it('serve reports the corpus lines it skips (file:line), as index does, also when started from its cache', async () => {
    const corpus = join(dir, 'bad.jsonl');
    writeFileSync(
      corpus,
      [
        '{"id": "1", "contents": "\\"A\\"\\nriver"}',
        '{"id": "2", "contents": ',
        '{"contents": "no id"}',
        '{"id": "4", "contents": null}',
        '{"id": "5", "contents": "\\"B\\"\\ntown"}',
      ].join('\n'),
    );
    for (const start of ['built', 'cached']) {
      const log: string[] = [];
      const r = await Bm25Retriever.forCorpus(corpus, {
        cacheDir: join(dir, 'cache'),
        workers: 0,
        log: (l) => log.push(l),
      });
      await r.close();
      const text = log.join('\n');
      assert.match(text, /bad\.jsonl:2: invalid JSON/, start);
      assert.match(text, /bad\.jsonl:3: id: required/, start);
      assert.match(text, /bad\.jsonl:4: contents: required/, start);
      assert.match(text, /3 corpus lines skipped/, start);
    }
    // a clean corpus: built, then started from its cache, which says nothing of skipped lines. A cache an older
    // version built (no corpus-issues.json): a small corpus is indexed again to report them; a large one's cache is
    // kept and says that it cannot tell (the size limit set to 0 here)
    const clean = join(dir, 'clean.jsonl');
    writeFileSync(clean, '{"id": "1", "contents": "\\"A\\"\\nriver"}\n');
    const start = async (rebuildForReportBytes?: number) => {
      const log: string[] = [];
      const r = await Bm25Retriever.forCorpus(clean, {
        cacheDir: join(dir, 'cache'),
        workers: 0,
        log: (l) => log.push(l),
        ...(rebuildForReportBytes === undefined ? {} : { rebuildForReportBytes }),
      });
      await r.close();
      return log.join('\n');
    };
    assert.match(await start(), /indexed .*clean\.jsonl: 1 documents/);
    assert.doesNotMatch(await start(), /skipped|predates|indexed/);
    const issuesOf = () =>
      readdirSync(join(dir, 'cache'))
        .map((k) => join(dir, 'cache', k, 'corpus-issues.json'))
        .filter((f) => existsSync(f) && JSON.parse(readFileSync(f, 'utf8')).count === 0);
    assert.equal(issuesOf().length, 1, 'a build that skipped nothing says so beside its cache');
    rmSync(issuesOf()[0]!);
    const again = await start();
    assert.match(again, /predates the report of skipped corpus lines: indexing the corpus again/);
    assert.match(again, /indexed .*clean\.jsonl: 1 documents/);
    assert.equal(issuesOf().length, 1);
    rmSync(issuesOf()[0]!);
    const kept = await start(0);
    assert.match(kept, /predates the report of skipped corpus lines: it cannot say whether it skipped any/);
    assert.doesNotMatch(kept, /indexed/);
  });

  it('serve exits 2 saying so when its port is taken, BM25 threads and all (in seconds, not never)', async () => {
    const holder: Server = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = (holder.address() as { port: number }).port;
    try {
      const t0 = Date.now();
      const r = await execa(
        process.execPath,
        [
          '-r',
          join(ROOT, 'test/register.cjs'),
          join(ROOT, 'src/cli/main.ts'),
          'serve',
          '--port',
          String(port),
          '--index',
          join(dir, 'index'),
          '--workers',
          '2',
        ],
        { reject: false, timeout: 30_000 },
      );
      assert.equal(r.timedOut, false, 'serve hung after failing to listen');
      assert.equal(r.exitCode, 2, r.stderr);
      assert.match(r.stderr, /port already in use/);
      assert.ok(Date.now() - t0 < 30_000);
    } finally {
      holder.close();
    }
  });
});
