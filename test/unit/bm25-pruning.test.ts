/**
 * Pruned BM25 (block-max MaxScore) against exhaustive scoring of every posting, on a generated corpus large
 * enough for long block lists; the block postings and their bounds; index format versions and migration; the
 * worker pool sharing one index. (The scores themselves are Lucene's: bm25-oracle.test.ts.)
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { rng } from '../../bench/util'; // mulberry32: the same inputs in every run
import { DefaultEnglishAnalyzer } from '../../src/core/retrieval/analyzer';
import { Bm25Index, IndexVersionError, migrateBm25Index, normInverseTable } from '../../src/core/retrieval/bm25';
import { Bm25Pool } from '../../src/core/retrieval/bm25Pool';
import { buildBm25Index } from '../../src/core/retrieval/corpus';
import { BLOCK, bm25Idf, bm25Score, RUN, SKIPS } from '../../src/core/retrieval/postings';

const ROOT = join(__dirname, '..', '..');
const FIX = join(ROOT, 'test', 'fixtures', 'bm25');

const DOCS = 20_000;
const VOCAB = Array.from({ length: 3000 }, (_, i) => `w${i.toString(36)}x`);

/**
 * 20,000 passages of Zipfian words over a 3,000-word vocabulary (frequent terms span up to ~150 blocks),
 * lengths from 1 to 600 words (every norm class), plus: a word only in the first and the last document (a gap
 * of 19,998: wide bit fields), documents repeating one word up to 900 times (wide tf fields), and 40 pairs of
 * identical passages whose ids sort against corpus order (ties broken by id, across blocks and windows).
 */
function corpus(): { id: string; contents: string }[] {
  const r = rng(11);
  const cdf: number[] = [];
  let acc = 0;
  for (let i = 0; i < VOCAB.length; i++) cdf.push((acc += 1 / (i + 1)));
  const word = () => {
    const u = r() * acc;
    let lo = 0;
    let hi = VOCAB.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return VOCAB[lo]!;
  };
  const docs: { id: string; contents: string }[] = [];
  for (let i = 0; i < DOCS; i++) {
    const len =
      r() < 0.05 ? 1 + Math.floor(r() * 5) : r() < 0.1 ? 200 + Math.floor(r() * 400) : 20 + Math.floor(r() * 80);
    const words = Array.from({ length: len }, word);
    if (i === 0 || i === DOCS - 1) words.push('bookendz');
    if (i % 997 === 0) words.push(...Array.from({ length: 1 + (i % 900) }, () => 'repeatz'));
    docs.push({ id: `d${String(i).padStart(5, '0')}`, contents: `"${word()}"\n${words.join(' ')}` });
  }
  for (let j = 0; j < 40; j++) {
    const a = Math.floor(r() * DOCS);
    const b = Math.floor(r() * DOCS);
    docs[b] = { id: `c${String(j).padStart(2, '0')}-second`, contents: docs[a]!.contents };
    docs[a] = { id: `c${String(j).padStart(2, '0')}-first`, contents: docs[a]!.contents };
  }
  return docs;
}

describe('BM25 pruning is exact (block-max MaxScore vs exhaustive scoring)', function () {
  this.timeout(180_000);
  let dir: string;
  let index: Bm25Index;
  let docs: { id: string; contents: string }[];
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-bm25-prune-'));
    docs = corpus();
    writeFileSync(join(dir, 'corpus.jsonl'), `${docs.map((d) => JSON.stringify(d)).join('\n')}\n`);
    await buildBm25Index(join(dir, 'corpus.jsonl'), join(dir, 'index'));
    index = await Bm25Index.load(join(dir, 'index'));
  });
  after(() => {
    index?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('decodes every term’s postings as the corpus has them, at every bit width the blocks use', () => {
    const analyzer = new DefaultEnglishAnalyzer();
    const truth = new Map<string, Map<number, number>>();
    docs.forEach((d, doc) =>
      analyzer.analyze(d.contents, (t) => {
        const m = truth.get(t) ?? truth.set(t, new Map()).get(t)!;
        m.set(doc, (m.get(doc) ?? 0) + 1);
      }),
    );
    assert.equal(index.meta.terms, truth.size);
    const widths = new Set<number>();
    const { postings, blockOffset } = index.arrays;
    for (let b = 0; b < index.meta.blocks; b++)
      widths.add(postings[blockOffset[b]!]! & 0xff).add(((postings[blockOffset[b]!]! >>> 8) & 0xff) + 100);
    for (const [term, want] of truth) {
      const got = index.postings(term);
      assert.deepEqual([...got.docs], [...want.keys()], term);
      assert.deepEqual([...got.tfs], [...want.values()], term);
    }
    assert.deepEqual([...index.postings('bookendz').docs], [0, DOCS - 1]);
    assert.ok(
      widths.has(15) && widths.has(0),
      `doc-gap widths include 0 (dense runs) and 15 (the bookends): ${[...widths].filter((w) => w < 100).sort((a, b) => a - b)}`,
    );
    assert.ok(widths.has(100 + 10) && widths.has(100), 'tf widths include 0 and 10 (a word 900 times)');
  });

  it('stores bounds that hold (each block’s max is the largest score of its postings, each term’s the largest of its blocks) and skips that point right', () => {
    const { blocksIdx, blockMax, blockLast, blockSkip, termMax, dfs, termsBin, termsIdx } = index.arrays;
    const normInverse = normInverseTable(index.meta);
    const norms = index.arrays.norms;
    for (let t = 0; t < index.meta.terms; t++) {
      const term = Buffer.from(termsBin.subarray(termsIdx[t]!, termsIdx[t + 1]!)).toString('utf8');
      const { docs: ds, tfs } = index.postings(term);
      const weight = bm25Idf(DOCS, dfs[t]!);
      let best = 0;
      for (let b = blocksIdx[t]!; b < blocksIdx[t + 1]!; b++) {
        const from = (b - blocksIdx[t]!) * BLOCK;
        let max = 0;
        for (let p = from; p < Math.min(ds.length, from + BLOCK); p++)
          max = Math.max(max, bm25Score(weight, tfs[p]!, normInverse[norms[ds[p]!]!]!));
        assert.equal(blockMax[b], max, `${term} block ${b - blocksIdx[t]!}`);
        assert.equal(blockLast[b], ds[Math.min(ds.length, from + BLOCK) - 1]);
        for (let r = 0; r < SKIPS; r++)
          assert.equal(
            blockSkip[b * SKIPS + r],
            ds[Math.min(ds.length, from + (r + 1) * RUN) - 1],
            `${term} block ${b - blocksIdx[t]!} skip ${r}`,
          );
        best = Math.max(best, max);
      }
      assert.equal(termMax[t], best, term);
    }
  });

  it('returns the exhaustive top k for 1,500 random queries: same documents, same order (ties by id), same scores', () => {
    const r = rng(5);
    const zipfWord = () => VOCAB[Math.floor(VOCAB.length ** r() - 1)]!; // log-uniform rank: frequent and rare alike
    const queries: string[] = [];
    for (let i = 0; i < 1400; i++) {
      const n = 1 + Math.floor(r() * 10);
      const words = Array.from({ length: n }, () => (r() < 0.1 ? 'unknownword' : r() < 0.05 ? 'repeatz' : zipfWord()));
      if (r() < 0.15) words.push(words[0]!, words[0]!); // a repeated term weighs its count
      queries.push(words.join(' '));
    }
    for (const d of docs.filter((x) => x.id.startsWith('c')).slice(0, 100)) queries.push(d.contents); // tied duplicates
    let compared = 0;
    let exactScores = 0;
    let ties = 0;
    let candidates = 0;
    let postings = 0;
    let skipped = 0;
    queries.forEach((q, i) => {
      const k = [1, 3, 10, 10, 100][i % 5]!;
      const want = index.searchExhaustive(q, { k });
      const got = index.search(q, { k });
      const st = index.lastSearchStats;
      candidates += st.candidates;
      skipped += st.skippedWindows;
      for (const t of index.queryTerms(q)) postings += index.arrays.dfs[t.ordinal]!;
      assert.deepEqual(
        got.map((h) => h.id),
        want.map((h) => h.id),
        `query ${i} (k ${k}): ${JSON.stringify(q.slice(0, 80))}`,
      );
      got.forEach((h, j) => {
        assert.ok(
          Math.abs(h.score - want[j]!.score) <= 1e-6,
          `query ${i} rank ${j + 1}: ${h.score} vs ${want[j]!.score}`,
        );
        if (h.score === want[j]!.score) exactScores++;
        if (j > 0 && got[j - 1]!.score === h.score) ties++;
        compared++;
      });
    });
    assert.ok(compared > 20_000, `${compared} hits compared`);
    assert.equal(exactScores, compared, 'the same float scores, not only within 1e-6');
    assert.ok(ties > 50, `${ties} tied neighbours, ordered by id`);
    // It did prune: far fewer documents were looked at than the query terms have postings, and windows were skipped.
    assert.ok(candidates < postings / 4, `${candidates} candidates for ${postings} postings`);
    assert.ok(skipped > 1000, `${skipped} windows skipped without decoding`);
  });
});

describe('BM25 index format versions', function () {
  this.timeout(60_000);
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-bm25-v1-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  const cli = (...args: string[]) =>
    execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
      reject: false,
    });

  it('refuses a version-1 index with a message naming the migration, and migrates it in place to a fresh build’s results', async () => {
    const v1 = join(dir, 'v1');
    cpSync(join(FIX, 'index-v1'), v1, { recursive: true });
    await assert.rejects(
      Bm25Index.load(v1),
      (e: unknown) =>
        e instanceof IndexVersionError &&
        e.message.includes(`search-agent-studio index --migrate ${v1}`) &&
        /version 1/.test(e.message),
    );
    const meta = await migrateBm25Index(v1);
    assert.equal(meta.version, 2);
    assert.ok(meta.migrated);
    assert.equal((await migrateBm25Index(v1)).migrated, meta.migrated, 'migrating again changes nothing');
    // The fixture was built by version 1 from the first 80 documents of the oracle corpus.
    const corpus80 = join(dir, 'corpus80.jsonl');
    writeFileSync(corpus80, `${readFileSync(join(FIX, 'corpus.jsonl'), 'utf8').split('\n').slice(0, 80).join('\n')}\n`);
    await buildBm25Index(corpus80, join(dir, 'fresh'));
    const [migrated, fresh] = await Promise.all([Bm25Index.load(v1), Bm25Index.load(join(dir, 'fresh'))]);
    try {
      const queries = readFileSync(join(FIX, 'queries.txt'), 'utf8').trim().split('\n');
      let hits = 0;
      for (const q of queries) {
        const a = migrated.search(q, { k: 20 });
        assert.deepEqual(a, fresh.search(q, { k: 20 }), q);
        hits += a.length;
        for (const h of a.slice(0, 2)) assert.equal(migrated.contents(h.doc), fresh.contents(h.doc));
      }
      assert.ok(hits > 500, `${hits} hits compared`);
    } finally {
      migrated.close();
      fresh.close();
    }
  });

  it('CLI: serve --index on a version-1 index exits 2 with the message; index --migrate migrates it', async () => {
    const v1 = join(dir, 'cli-v1');
    cpSync(join(FIX, 'index-v1'), v1, { recursive: true });
    const serve = await cli('serve', '--index', v1, '--port', '0');
    assert.equal(serve.exitCode, 2, serve.stderr);
    assert.match(serve.stderr, /format version 1, from before block-max pruning/);
    assert.match(serve.stderr, /search-agent-studio index --migrate/);
    const m = await cli('index', '--migrate', v1);
    assert.equal(m.exitCode, 0, m.stderr);
    assert.match(m.stderr, /migrated from format version 1 to 2/);
    assert.equal(JSON.parse(readFileSync(join(v1, 'meta.json'), 'utf8')).version, 2);
    const again = await cli('index', '--migrate', v1);
    assert.match(again.stderr, /already BM25 index format version 2/);
  });
});

describe('BM25 worker pool', function () {
  this.timeout(60_000);
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-bm25-pool-'));
    await buildBm25Index(join(ROOT, 'examples', 'demo', 'corpus.jsonl'), join(dir, 'index'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('workers read one copy of the index (SharedArrayBuffers) and answer batches exactly as one thread does', async () => {
    const single = await Bm25Index.load(join(dir, 'index'));
    const pool = await Bm25Pool.open(join(dir, 'index'), { workers: 3 });
    try {
      assert.ok(pool.sharesIndex, 'every worker reports its index arrays in SharedArrayBuffers');
      assert.ok(pool.index.arrays.postings.buffer instanceof SharedArrayBuffer);
      const words =
        'who founded the observatory museum river town born province author wrote library academy guild year north'.split(
          ' ',
        );
      const r = rng(3);
      const queries = Array.from({ length: 300 }, () =>
        Array.from({ length: 1 + Math.floor(r() * 6) }, () => words[Math.floor(r() * words.length)]!).join(' '),
      );
      const want = queries.map((q) =>
        single.search(q, { k: 5 }).map((h) => ({ id: h.id, contents: single.contents(h.doc), score: h.score })),
      );
      // Several batches at once share the workers' queue; each comes back whole and in order.
      const got = await Promise.all([
        pool.search(queries, 5),
        pool.search(queries.slice(0, 7), 5),
        pool.search(queries.slice(100), 5),
      ]);
      assert.deepEqual(got[0], want);
      assert.deepEqual(got[1], want.slice(0, 7));
      assert.deepEqual(got[2], want.slice(100));
      assert.deepEqual(await pool.search([], 5), []);
      // Each thread's CPU time (Linux), as the benchmark reads it: the workers did the searching.
      const cpu = await pool.cpuSeconds();
      assert.equal(cpu.workers.length, 3);
      if (process.platform === 'linux')
        assert.ok(
          cpu.workers.every((x) => typeof x === 'number' && x >= 0) && typeof cpu.main === 'number',
          JSON.stringify(cpu),
        );
    } finally {
      single.close();
      await pool.close();
    }
    await assert.rejects(pool.search(['river'], 3), /closed/);
  });

  it('a worker that dies fails only its own chunk and is replaced', async () => {
    const pool = await Bm25Pool.open(join(dir, 'index'), { workers: 2 });
    try {
      const before = await pool.search(['river town'], 3);
      const victim = (pool as unknown as { slots: { worker: { terminate(): Promise<number> } }[] }).slots[0]!.worker;
      await victim.terminate();
      await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(await pool.search(['river town'], 3), before);
      assert.equal(
        (
          await pool.search(
            Array.from({ length: 40 }, () => 'river town'),
            3,
          )
        ).length,
        40,
      );
    } finally {
      await pool.close();
    }
  });
});
