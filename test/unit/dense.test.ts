/**
 * Dense retrieval with the tiny E5-style encoder the project generates (test/fixtures/tiny-e5*, made by
 * scripts/make-tiny-encoder.py): pooling and normalisation against an independent reference, token_type_ids
 * only when the graph has it, exact scans (JS and ONNX agree), resumable builds, float16 storage.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildDenseIndex, DenseIndex, fromHalf, scanJs, toHalf } from '../../src/core/retrieval/dense';
import { E5Encoder, ort } from '../../src/core/retrieval/encoder';
import { innerProductTopKModel } from '../../src/core/retrieval/onnxGraph';
import { DenseRetriever } from '../../src/core/retrieval/retriever';

const ROOT = join(__dirname, '..', '..');
const MODEL = join(ROOT, 'test', 'fixtures', 'tiny-e5');
const MODEL_NO_TT = join(ROOT, 'test', 'fixtures', 'tiny-e5-no-token-types');

function corpusSubset(dir: string, n: number): string {
  const lines = readFileSync(join(ROOT, 'examples', 'demo', 'corpus.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .slice(0, n);
  const file = join(dir, 'corpus.jsonl');
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

describe('dense retrieval (tiny E5 encoder, onnxruntime-node)', function () {
  this.timeout(120_000);
  let dir: string;
  let encoder: E5Encoder;
  const logs: string[] = [];
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-dense-'));
    encoder = await E5Encoder.load(MODEL, { log: (l) => logs.push(l) });
  });
  after(async () => {
    await encoder.release();
    rmSync(dir, { recursive: true, force: true });
  });

  it('logs the execution provider it chose (CPU here: no GPU)', () => {
    assert.equal(encoder.provider, 'cpu');
    assert.ok(
      logs.some((l) => /on CPU, dimension 32, max length 256, token_type_ids fed/.test(l)),
      logs.join('\n'),
    );
  });

  it('mean-pools over the attention mask and L2-normalises, as a reference computed independently', async () => {
    // 1. Against PyTorch (the fixture script's own pooling of the same random model).
    const ref = JSON.parse(readFileSync(join(MODEL, 'reference.json'), 'utf8')) as {
      texts: string[];
      lengths: number[];
      embeddings: number[][];
    };
    for (const [i, text] of ref.texts.entries())
      assert.equal(encoder.tokenIds(text).length, ref.lengths[i], `token count of ${text.slice(0, 30)}`);
    const kinds = ref.texts.map((t) => (t.startsWith('query: ') ? 'query' : 'passage') as 'query' | 'passage');
    for (const [i, text] of ref.texts.entries()) {
      const v = await encoder.encode([text.replace(/^(query|passage): /, '')], kinds[i]!);
      const want = ref.embeddings[i]!;
      for (let d = 0; d < want.length; d++)
        assert.ok(Math.abs(v[d]! - want[d]!) < 2e-5, `text ${i} dim ${d}: ${v[d]} vs PyTorch ${want[d]}`);
    }
    // 2. Against the raw last hidden state from onnxruntime, pooled here by a plain loop (a padded batch).
    const texts = ['a short one', 'a much longer passage about the Varnholt Observatory and its founder'];
    const ours = await encoder.encode(texts, 'passage');
    const { InferenceSession, Tensor } = ort();
    const session = await InferenceSession.create(join(MODEL, 'model.onnx'));
    for (const [b, text] of texts.entries()) {
      const ids = encoder.tokenIds(`passage: ${text}`);
      const t = (xs: number[]) => new Tensor('int64', BigInt64Array.from(xs.map(BigInt)), [1, xs.length]);
      const out = await session.run({
        input_ids: t(ids),
        attention_mask: t(ids.map(() => 1)),
        token_type_ids: t(ids.map(() => 0)),
      });
      const h = out.last_hidden_state!.data as Float32Array;
      const mean = Array.from(
        { length: 32 },
        (_, d) => ids.reduce((acc, _x, s) => acc + h[s * 32 + d]!, 0) / ids.length,
      );
      const norm = Math.hypot(...mean);
      for (let d = 0; d < 32; d++)
        assert.ok(Math.abs(ours[b * 32 + d]! - mean[d]! / norm) < 1e-5, `batch row ${b} dim ${d}`);
    }
    await session.release();
    for (let b = 0; b < 2; b++)
      assert.ok(Math.abs(Math.hypot(...ours.subarray(b * 32, b * 32 + 32)) - 1) < 1e-5, 'unit length');
  });

  it('truncates to 256 tokens and uses E5’s prefixes', async () => {
    const ids = encoder.tokenIds(`passage: ${'word '.repeat(1000)}`);
    assert.equal(ids.length, 256);
    const q = await encoder.encode(['same text'], 'query');
    const p = await encoder.encode(['same text'], 'passage');
    assert.notDeepEqual(Array.from(q), Array.from(p), 'query: and passage: differ');
  });

  it('feeds token_type_ids only when the graph has that input', async () => {
    const noTT = await E5Encoder.load(MODEL_NO_TT);
    try {
      assert.equal(encoder.hasTokenTypes, true);
      assert.equal(noTT.hasTokenTypes, false);
      const a = await encoder.encode(['the Ossel river'], 'query');
      const b = await noTT.encode(['the Ossel river'], 'query');
      for (let d = 0; d < 32; d++) assert.ok(Math.abs(a[d]! - b[d]!) < 1e-5, 'same weights, same embedding');
    } finally {
      await noTT.release();
    }
  });

  it('builds an index in which each passage is its own nearest neighbour; JS and ONNX scans agree', async () => {
    const corpus = corpusSubset(dir, 400);
    const out = join(dir, 'dense');
    const meta = await buildDenseIndex(corpus, out, encoder, { batchSize: 64 });
    assert.equal(meta.docs, 400);
    const index = await DenseIndex.load(out);
    try {
      const passages = readFileSync(corpus, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { id: string; contents: string });
      const sample = [0, 7, 123, 250, 399];
      const vecs = await encoder.encode(
        sample.map((i) => passages[i]!.contents),
        'passage',
      );
      const js = await index.scan(vecs, 5, 'js');
      const onnx = await index.scan(vecs, 5, 'onnx');
      sample.forEach((i, j) => {
        assert.equal(js[j]![0]!.id, passages[i]!.id, 'its own nearest neighbour');
        assert.ok(js[j]![0]!.score > 0.9999);
        assert.deepEqual(
          onnx[j]!.map((h) => h.id),
          js[j]!.map((h) => h.id),
        );
        onnx[j]!.forEach((h, r) => assert.ok(Math.abs(h.score - js[j]![r]!.score) < 1e-5));
      });
      assert.equal(index.contents(7), passages[7]!.contents);
    } finally {
      index.close();
    }
  });

  it('resumes an interrupted build and ends with the same vectors', async () => {
    const corpus = corpusSubset(dir, 300);
    const full = join(dir, 'full');
    await buildDenseIndex(corpus, full, encoder, { batchSize: 50 });
    const part = join(dir, 'part');
    const abort = new AbortController();
    let batches = 0;
    await assert.rejects(
      buildDenseIndex(corpus, part, encoder, {
        batchSize: 50,
        signal: abort.signal,
        onProgress: (p) => {
          if (p.phase === 'embed' && ++batches === 3) abort.abort(new Error('interrupted'));
        },
      }),
      /interrupted/,
    );
    await assert.rejects(DenseIndex.load(part), /building was interrupted: run the build again to resume/);
    const progress = JSON.parse(readFileSync(join(part, 'progress.json'), 'utf8'));
    assert.equal(progress.embedded, 150);
    const resumed: number[] = [];
    await buildDenseIndex(corpus, part, encoder, {
      batchSize: 50,
      onProgress: (p) => p.phase === 'embed' && resumed.push(p.docs),
    });
    assert.equal(resumed[0], 200, 'continued after the 150 already embedded');
    assert.deepEqual(readFileSync(join(part, 'vectors.f32')), readFileSync(join(full, 'vectors.f32')));
  });

  it('stores float16 when asked, within half precision of float32', async () => {
    const corpus = corpusSubset(dir, 100);
    await buildDenseIndex(corpus, join(dir, 'f16'), encoder, { dtype: 'float16' });
    await buildDenseIndex(corpus, join(dir, 'f32'), encoder);
    const [a, b] = await Promise.all([DenseIndex.load(join(dir, 'f16')), DenseIndex.load(join(dir, 'f32'))]);
    for (let i = 0; i < a.vectors.length; i++) assert.ok(Math.abs(a.vectors[i]! - b.vectors[i]!) < 1e-3);
    a.close();
    b.close();
    // biome-ignore lint/suspicious/noApproximativeNumericConstant: sample values for the half-float round trip
    for (const x of [0, 1, -1, 0.5, 3.14159, 65504, 1e-5, -2.5e-3])
      assert.ok(Math.abs(fromHalf(toHalf(x)) - x) <= Math.abs(x) * 1e-3 + 1e-7, String(x));
  });

  it('serves /retrieve through DenseRetriever with query: prefixes', async () => {
    const corpus = corpusSubset(dir, 200);
    await buildDenseIndex(corpus, join(dir, 'serve'), encoder);
    const r = await DenseRetriever.open(join(dir, 'serve'), MODEL);
    try {
      const hits = await r.retrieve(['who founded the observatory?', 'river'], 3);
      assert.equal(hits.length, 2);
      assert.equal(hits[0]!.length, 3);
      assert.ok(hits[0]![0]!.score >= hits[0]![1]!.score);
      assert.match(hits[0]![0]!.document.contents, /^"/);
      assert.equal(r.describe().provider, 'cpu');
    } finally {
      await r.close();
    }
  });

  it('the hand-written ONNX graph and the JS scan give the same top-k on random data', async () => {
    const n = 1000;
    const d = 16;
    let s = 1;
    const rnd = () => ((s = (s * 16807) % 2147483647) / 2147483647) * 2 - 1;
    const vectors = Float32Array.from({ length: n * d }, rnd);
    const queries = Float32Array.from({ length: 3 * d }, rnd);
    const { InferenceSession, Tensor } = ort();
    const session = await InferenceSession.create(innerProductTopKModel());
    const out = await session.run({
      queries: new Tensor('float32', queries, [3, d]),
      corpus: new Tensor('float32', vectors, [n, d]),
      k: new Tensor('int64', BigInt64Array.of(10n), [1]),
    });
    const idx = out.indices!.data as BigInt64Array;
    const js = scanJs(vectors, d, queries, 3, 10);
    for (let j = 0; j < 3; j++)
      assert.deepEqual(
        Array.from(idx.subarray(j * 10, j * 10 + 10), Number),
        js[j]!.map(([doc]) => doc),
      );
    await session.release();
  });
});
