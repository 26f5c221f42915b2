/**
 * Our BM25 against the real thing: Apache Lucene 9 (test/oracle/lucene, built with Maven by the test setup)
 * with Anserini's DefaultEnglishAnalyzer chain and BM25Similarity(0.9, 0.4). Scores must equal Lucene's float
 * for float (a repeated query term included: Lucene merges the clauses into one with a boost) and rankings must
 * be identical (ties by id); tokens and Porter stems must be Lucene's.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { DefaultEnglishAnalyzer, tokenize } from '../../src/core/retrieval/analyzer';
import { Bm25Index } from '../../src/core/retrieval/bm25';
import { buildBm25Index } from '../../src/core/retrieval/corpus';
import { porterStem } from '../../src/core/retrieval/porter';
import { byte4ToInt, intToByte4 } from '../../src/core/retrieval/smallfloat';

const ROOT = join(__dirname, '..', '..');
const ORACLE = join(ROOT, 'test', 'oracle', 'lucene');
const FIX = join(ROOT, 'test', 'fixtures', 'bm25');
const CLASSPATH = `${join(ORACLE, 'target', 'classes')}:${join(ORACLE, 'target', 'lib', '*')}`;

async function lucene(...args: string[]): Promise<string[]> {
  const r = await execa('java', ['-cp', CLASSPATH, 'oracle.Oracle', ...args], { reject: false, maxBuffer: 256 << 20 });
  if (r.exitCode !== 0) throw new Error(`the Lucene oracle failed (${r.exitCode}): ${r.stderr}`);
  return r.stdout.split('\n');
}

const escapeField = (s: string) => s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/\t/g, '\\t');

describe('BM25 vs Apache Lucene (oracle)', function () {
  this.timeout(120_000);
  let dir: string;
  before(() => {
    assert.ok(
      existsSync(join(ORACLE, 'target', 'classes', 'oracle', 'Oracle.class')),
      `the Lucene oracle is not built: run \`bash scripts/setup.sh --test\` (mvn -f ${ORACLE}/pom.xml package)`,
    );
    dir = mkdtempSync(join(tmpdir(), 'sas-bm25-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const corpus = () =>
    readFileSync(join(FIX, 'corpus.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string; contents: string });

  it('encodes document lengths as Lucene’s SmallFloat norms (0…100,000)', async () => {
    const lines = (await lucene('norms', '100000')).filter(Boolean);
    for (const line of lines) {
      const [len, byte, decoded] = line.split('\t').map(Number);
      if (intToByte4(len!) !== byte || byte4ToInt(byte!) !== decoded)
        assert.fail(
          `length ${len}: ours ${intToByte4(len!)}/${byte4ToInt(intToByte4(len!))}, Lucene ${byte}/${decoded}`,
        );
    }
    assert.equal(lines.length, 100_001);
    assert.deepEqual(
      [40, 41, 100, 300].map((n) => byte4ToInt(intToByte4(n))),
      [40, 40, 96, 280],
    );
  });

  it('tokenizes as StandardTokenizer', async () => {
    const texts = [
      ...readFileSync(join(FIX, 'tokenizer.txt'), 'utf8').trimEnd().split('\n'),
      ...corpus().map((d) => escapeField(d.contents)),
    ];
    const file = join(dir, 'texts.txt');
    writeFileSync(file, `${texts.join('\n')}\n`);
    const expected = await lucene('tokenize', file);
    const unescapeField = (s: string) => s.replace(/\\n/g, '\n').replace(/\\t/g, '\t').replace(/\\\\/g, '\\');
    const diffs: string[] = [];
    texts.forEach((t, i) => {
      const ours: string[] = [];
      tokenize(unescapeField(t), (x) => ours.push(x));
      const theirs = expected[i] === '' ? [] : expected[i]!.split('\u0001');
      if (ours.join('\u0001') !== theirs.join('\u0001'))
        diffs.push(`line ${i + 1}: ours ${JSON.stringify(ours)}\n        lucene ${JSON.stringify(theirs)}`);
    });
    assert.deepEqual(diffs, []);
  });

  it('stems as Lucene’s Porter stemmer, on words known to differ between implementations and 25k suffix forms', async () => {
    const tricky = readFileSync(join(FIX, 'porter-tricky.txt'), 'utf8').trim().split('\n');
    const suffixes =
      'sses ies ss s eed ed ing at bl iz y ational tional enci anci izer bli alli entli eli ousli ization ation ator alism iveness fulness ousness aliti iviti biliti logi icate ative alize iciti ical ful ness al ance ence er ic able ible ant ement ment ent ion ou ism ate iti ous ive ize e ll'.split(
        ' ',
      );
    const prefixes = [
      '',
      'a',
      'b',
      'e',
      'y',
      'by',
      'ab',
      'yy',
      'ey',
      'sy',
      'tr',
      'cat',
      'ply',
      'hop',
      'see',
      'fil',
      'ay',
      'oy',
      'ly',
      'ry',
      'w',
      'x',
      'ss',
      'zz',
      'bb',
    ];
    const synthetic = new Set<string>();
    for (const p of prefixes)
      for (const s of suffixes) for (const t of ['', 's', 'ed', 'ing', 'ly', 'e', 'y']) synthetic.add(p + s + t);
    const words = [...tricky, ...synthetic];
    const file = join(dir, 'words.txt');
    writeFileSync(file, `${words.join('\n')}\n`);
    const expected = await lucene('stem', file);
    const diffs = words.map((w, i) => [w, porterStem(w), expected[i]]).filter(([, a, b]) => a !== b);
    assert.deepEqual(diffs, []);
    assert.ok(tricky.length >= 300, 'a few hundred tricky words');
  });

  it('analyses documents and queries as Anserini’s DefaultEnglishAnalyzer', async () => {
    const texts = [
      ...corpus().map((d) => d.contents),
      ...readFileSync(join(FIX, 'queries.txt'), 'utf8').trim().split('\n'),
    ];
    const file = join(dir, 'analyze.txt');
    writeFileSync(file, `${texts.map(escapeField).join('\n')}\n`);
    const expected = await lucene('analyze', file);
    const a = new DefaultEnglishAnalyzer();
    const diffs = texts.map((t, i) => [i, a.terms(t).join(' '), expected[i]]).filter(([, x, y]) => x !== y);
    assert.deepEqual(diffs, []);
  });

  it('scores and ranks every query as Lucene does (the same floats, ties by id)', async () => {
    const docs = corpus();
    const tsv = join(dir, 'corpus.tsv');
    writeFileSync(tsv, `${docs.map((d) => `${d.id}\t${escapeField(d.contents)}`).join('\n')}\n`);
    const queries = readFileSync(join(FIX, 'queries.txt'), 'utf8').trim().split('\n');
    const expectedLines = (await lucene('search', tsv, join(FIX, 'queries.txt'), '20')).filter(Boolean);
    const expected = new Map<number, { id: string; score: number }[]>();
    for (const line of expectedLines) {
      const [q, , id, score] = line.split('\t');
      const list = expected.get(Number(q)) ?? [];
      list.push({ id: id!, score: Number(score) });
      expected.set(Number(q), list);
    }
    const indexDir = join(dir, 'index');
    const meta = await buildBm25Index(join(FIX, 'corpus.jsonl'), indexDir);
    assert.equal(meta.docs, docs.length);
    const index = await Bm25Index.load(indexDir);
    let compared = 0;
    let ties = 0;
    try {
      queries.forEach((q, i) => {
        const ours = index.search(q, { k: 20 });
        const theirs = expected.get(i) ?? [];
        assert.deepEqual(
          ours.map((h) => h.id),
          theirs.map((h) => h.id),
          `ranking of query ${i}: ${JSON.stringify(q)}`,
        );
        ours.forEach((h, r) => {
          const want = theirs[r]!.score;
          assert.equal(h.score, Math.fround(want), `query ${i} rank ${r + 1} ${h.id}: ${h.score} vs Lucene ${want}`);
          if (r > 0 && ours[r - 1]!.score === h.score) ties++;
          compared++;
        });
      });
    } finally {
      index.close();
    }
    assert.ok(compared > 1000, `compared ${compared} hits`);
    assert.ok(ties > 0, 'the fixture has tied scores, broken by id');
    // Identical documents score identically and come in id order.
    const again = await Bm25Index.load(indexDir);
    const dup = again.search(docs[40]!.contents, { k: 50 });
    again.close();
    const at = (id: string) => dup.findIndex((h) => h.id === id);
    assert.ok(
      at('doc0040') >= 0 && at('doc0040') < at('dup-a') && at('dup-a') < at('dup-b'),
      JSON.stringify(dup.slice(0, 5)),
    );
    assert.equal(dup[at('dup-a')]!.score, dup[at('doc0040')]!.score);
  });
});
