/**
 * `search-agent-studio index <corpus.jsonl> --out <dir> [--kind bm25|dense] [--model DIR] [--dtype float32|float16]
 * [--batch N] [--k1 0.9 --b 0.4]`: builds a retrieval index with progress on stderr. A dense build that is
 * interrupted resumes when run again with the same arguments.
 * `search-agent-studio index --migrate <dir>`: rewrites a BM25 index of an older format version in place.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { INDEX_VERSION, migrateBm25Index } from '../core/retrieval/bm25';
import { buildBm25Index, type CorpusIssue } from '../core/retrieval/corpus';
import { buildDenseIndex } from '../core/retrieval/dense';
import { E5Encoder } from '../core/retrieval/encoder';
import { UsageError } from '../server/run';
import { defineCommand } from './command';
import { requireRegularFile, withInputErrors } from './inputErrors';
import { checkOutputDir } from './output';

/** Whether a directory holds an index we built, or a dense build's partial state (its progress.json). */
async function isIndexDir(dir: string): Promise<boolean> {
  const meta = await readFile(join(dir, 'meta.json'), 'utf8').then(
    (t) => JSON.parse(t) as { format?: unknown },
    () => undefined,
  );
  if (meta && (meta.format === 'sas-bm25' || meta.format === 'sas-dense')) return true;
  return readFile(join(dir, 'progress.json'), 'utf8').then(
    () => true,
    () => false,
  );
}

export interface IndexArgs {
  corpus?: string;
  out?: string;
  migrate?: string;
  kind: string;
  model?: string;
  dtype: string;
  batch: number;
  k1: number;
  b: number;
}

export const indexCommandDef = defineCommand({
  command: 'index [corpus]',
  describe: 'build a retrieval index (BM25, or dense E5; a dense build resumes), or --migrate an older BM25 index',
  builder: (y) =>
    y
      .positional('corpus', { type: 'string', describe: 'a corpus: JSONL of {id, contents}' })
      .option('out', { type: 'string', describe: 'the index directory' })
      .option('migrate', {
        type: 'string',
        describe: 'rewrite the BM25 index in this directory, of an older format version, in place',
      })
      .option('kind', { type: 'string', choices: ['bm25', 'dense'], default: 'bm25', describe: 'the index kind' })
      .option('model', { type: 'string', describe: 'dense: the E5 encoder directory (model.onnx + tokenizer.json)' })
      .option('dtype', {
        type: 'string',
        choices: ['float32', 'float16'],
        default: 'float32',
        describe: "dense: the stored vectors' type",
      })
      .option('batch', { type: 'number', default: 256, describe: 'dense: documents per encoder batch' })
      .option('k1', { type: 'number', default: 0.9, describe: 'BM25 k1' })
      .option('b', { type: 'number', default: 0.4, describe: 'BM25 b' }),
  run: (a, io) => withInputErrors(io, () => indexCommand(a, io.err)),
});

export async function indexCommand(values: IndexArgs, err: (s: string) => void): Promise<number> {
  if (values.migrate !== undefined) {
    if (values.corpus !== undefined || values.out)
      throw new UsageError('index --migrate takes only the index directory');
    const t0 = Date.now();
    const before = JSON.parse(await readFile(join(values.migrate, 'meta.json'), 'utf8').catch(() => '{}')) as {
      version?: number;
    };
    const meta = await migrateBm25Index(values.migrate);
    err(
      before.version === INDEX_VERSION
        ? `${values.migrate} is already BM25 index format version ${INDEX_VERSION}\n`
        : `${values.migrate}: BM25 index migrated from format version ${before.version} to ${meta.version} (${meta.blocks.toLocaleString()} blocks with score bounds) in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`,
    );
    return 0;
  }
  if (values.corpus === undefined || !values.out)
    throw new UsageError('index takes a corpus (JSONL of {id, contents}) and --out <dir>');
  const corpus = values.corpus;
  const out = values.out;
  await requireRegularFile(corpus);
  // A BM25 build replaces the directory it names, a dense one writes into it: only a new or empty directory, or an
  // index (or a dense build's partial state), is written; never one that holds the corpus.
  await checkOutputDir(out, {
    inputs: [corpus, ...(values.model ? [values.model] : [])],
    ours: isIndexDir,
    what: 'an index this command built',
  });
  const issues: CorpusIssue[] = [];
  const t0 = Date.now();
  const isTty = Boolean(process.stderr.isTTY);
  const progress = (line: string) => err(isTty ? `\r${line}\u001b[K` : `${line}\n`);
  if (values.kind === 'bm25') {
    const k1 = Number(values.k1);
    const b = Number(values.b);
    if (!(k1 >= 0) || !(b >= 0 && b <= 1))
      throw new UsageError(`--k1 must be ≥ 0 and --b in [0, 1]; got ${values.k1}, ${values.b}`);
    let last = 0;
    const meta = await buildBm25Index(corpus, out, {
      issues,
      params: { k1, b },
      onProgress: (p) => {
        if (Date.now() - last < 1000) return;
        last = Date.now();
        progress(
          `${p.phase}: ${p.docs.toLocaleString()} documents, ${p.terms.toLocaleString()} terms, ${(process.memoryUsage().rss / 2 ** 30).toFixed(2)} GiB`,
        );
      },
    });
    if (isTty) err('\n');
    err(
      `BM25 index of ${meta.docs.toLocaleString()} documents (${meta.terms.toLocaleString()} terms, ${(meta.postingsBytes / 2 ** 20).toFixed(1)} MiB of postings) → ${out} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`,
    );
  } else if (values.kind === 'dense') {
    if (!values.model) throw new UsageError('--kind dense needs --model DIR (model.onnx + tokenizer.json)');
    if (values.dtype !== 'float32' && values.dtype !== 'float16')
      throw new UsageError(`--dtype must be float32 or float16, got ${values.dtype}`);
    const encoder = await E5Encoder.load(values.model, { log: (l) => err(`${l}\n`) });
    const meta = await buildDenseIndex(corpus, out, encoder, {
      issues,
      dtype: values.dtype,
      batchSize: Number(values.batch) || 256,
      onProgress: (p) =>
        progress(
          p.phase === 'store'
            ? `storing: ${p.docs.toLocaleString()} documents`
            : `embedding: ${p.docs.toLocaleString()} / ${p.total.toLocaleString()}`,
        ),
    });
    await encoder.release();
    if (isTty) err('\n');
    err(
      `dense index of ${meta.docs.toLocaleString()} documents (dim ${meta.dim}, ${meta.dtype}) → ${out} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`,
    );
  } else {
    throw new UsageError(`--kind must be bm25 or dense, got ${values.kind}`);
  }
  for (const i of issues.slice(0, 50)) err(`${i.message}\n`);
  if (issues.length) err(`${issues.length} corpus lines skipped\n`);
  return 0;
}
