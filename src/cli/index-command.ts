/**
 * `search-agent-studio index <corpus.jsonl> --out <dir> [--kind bm25|dense] [--model DIR] [--dtype float32|float16]
 * [--batch N] [--k1 0.9 --b 0.4]`: builds a retrieval index with progress on stderr. A dense build that is
 * interrupted resumes when run again with the same arguments.
 * `search-agent-studio index --migrate <dir>`: rewrites a BM25 index of an older format version in place.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { INDEX_VERSION, migrateBm25Index } from '../core/retrieval/bm25';
import { buildBm25Index, type CorpusIssue } from '../core/retrieval/corpus';
import { buildDenseIndex } from '../core/retrieval/dense';
import { E5Encoder } from '../core/retrieval/encoder';
import { UsageError } from '../server/run';

export async function indexCommand(argv: string[], err: (s: string) => void): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      out: { type: 'string' },
      kind: { type: 'string', default: 'bm25' },
      model: { type: 'string' },
      dtype: { type: 'string', default: 'float32' },
      batch: { type: 'string', default: '256' },
      k1: { type: 'string', default: '0.9' },
      b: { type: 'string', default: '0.4' },
      migrate: { type: 'string' },
    },
  });
  if (values.migrate !== undefined) {
    if (positionals.length || values.out) throw new UsageError('index --migrate takes only the index directory');
    const t0 = Date.now();
    const before = JSON.parse(await readFile(join(values.migrate, 'meta.json'), 'utf8').catch(() => '{}')) as { version?: number };
    const meta = await migrateBm25Index(values.migrate);
    err(
      before.version === INDEX_VERSION
        ? `${values.migrate} is already BM25 index format version ${INDEX_VERSION}\n`
        : `${values.migrate}: BM25 index migrated from format version ${before.version} to ${meta.version} (${meta.blocks.toLocaleString()} blocks with score bounds) in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`,
    );
    return 0;
  }
  if (positionals.length !== 1 || !values.out) throw new UsageError('index takes a corpus (JSONL of {id, contents}) and --out <dir>');
  const corpus = positionals[0]!;
  const issues: CorpusIssue[] = [];
  const t0 = Date.now();
  const isTty = Boolean(process.stderr.isTTY);
  const progress = (line: string) => err(isTty ? `\r${line}\u001b[K` : `${line}\n`);
  if (values.kind === 'bm25') {
    const k1 = Number(values.k1);
    const b = Number(values.b);
    if (!(k1 >= 0) || !(b >= 0 && b <= 1)) throw new UsageError(`--k1 must be ≥ 0 and --b in [0, 1]; got ${values.k1}, ${values.b}`);
    let last = 0;
    const meta = await buildBm25Index(corpus, values.out, {
      issues,
      params: { k1, b },
      onProgress: (p) => {
        if (Date.now() - last < 1000) return;
        last = Date.now();
        progress(`${p.phase}: ${p.docs.toLocaleString()} documents, ${p.terms.toLocaleString()} terms, ${(process.memoryUsage().rss / 2 ** 30).toFixed(2)} GiB`);
      },
    });
    if (isTty) err('\n');
    err(`BM25 index of ${meta.docs.toLocaleString()} documents (${meta.terms.toLocaleString()} terms, ${(meta.postingsBytes / 2 ** 20).toFixed(1)} MiB of postings) → ${values.out} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  } else if (values.kind === 'dense') {
    if (!values.model) throw new UsageError('--kind dense needs --model DIR (model.onnx + tokenizer.json)');
    if (values.dtype !== 'float32' && values.dtype !== 'float16') throw new UsageError(`--dtype must be float32 or float16, got ${values.dtype}`);
    const encoder = await E5Encoder.load(values.model, { log: (l) => err(`${l}\n`) });
    const meta = await buildDenseIndex(corpus, values.out, encoder, {
      issues,
      dtype: values.dtype,
      batchSize: Number(values.batch) || 256,
      onProgress: (p) => progress(p.phase === 'store' ? `storing: ${p.docs.toLocaleString()} documents` : `embedding: ${p.docs.toLocaleString()} / ${p.total.toLocaleString()}`),
    });
    await encoder.release();
    if (isTty) err('\n');
    err(`dense index of ${meta.docs.toLocaleString()} documents (dim ${meta.dim}, ${meta.dtype}) → ${values.out} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  } else {
    throw new UsageError(`--kind must be bm25 or dense, got ${values.kind}`);
  }
  for (const i of issues.slice(0, 50)) err(`${i.message}\n`);
  if (issues.length) err(`${issues.length} corpus lines skipped\n`);
  return 0;
}
