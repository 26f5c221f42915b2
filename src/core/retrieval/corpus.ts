/**
 * Corpora: JSONL with `{id, contents}` where `contents` is `"Title"\ntext` (Search-R1's wiki-18 format);
 * `{id, title, text}` is accepted and turned into that form. Streamed; a malformed line is reported with its
 * line and field and skipped.
 */
import { stat } from 'node:fs/promises';
import { readLines, tooLongMessage } from '../store/jsonl';
import { Bm25Builder, type BuildOptions, type IndexMeta } from './bm25';

export interface CorpusDoc {
  id: string;
  contents: string;
}

export interface CorpusIssue {
  line: number;
  message: string;
}

export async function* readCorpus(
  path: string,
  issues: CorpusIssue[] = [],
  signal?: AbortSignal,
): AsyncGenerator<CorpusDoc> {
  for await (const { line, text, tooLong } of readLines(path, signal)) {
    if (tooLong !== undefined) {
      issues.push({ line, message: `${path}:${line}: ${tooLongMessage(tooLong)}` });
      continue;
    }
    let o: Record<string, unknown>;
    try {
      o = JSON.parse(text);
    } catch (e) {
      issues.push({ line, message: `${path}:${line}: invalid JSON: ${(e as Error).message}` });
      continue;
    }
    const id = typeof o.id === 'string' || typeof o.id === 'number' ? String(o.id) : undefined;
    if (id === undefined) {
      issues.push({ line, message: `${path}:${line}: id: required (a string or number)` });
      continue;
    }
    let contents: string | undefined;
    if (typeof o.contents === 'string') contents = o.contents;
    else if (typeof o.text === 'string') contents = typeof o.title === 'string' ? `"${o.title}"\n${o.text}` : o.text;
    if (contents === undefined) {
      issues.push({ line, message: `${path}:${line}: contents: required (a string; or title and text)` });
      continue;
    }
    yield { id, contents };
  }
}

/** The report of the corpus lines an index's build skipped, in the index: `{count, first}` (the first 50). */
export const CORPUS_ISSUES_FILE = 'corpus-issues.json';

/**
 * Builds a BM25 index directory from a corpus file. With `issues`, the lines skipped are pushed there and their
 * report is written into the index (CORPUS_ISSUES_FILE, a count of 0 when none were), in the same step as the rest.
 */
export async function buildBm25Index(
  corpus: string,
  dir: string,
  options: BuildOptions & { issues?: CorpusIssue[] } = {},
): Promise<IndexMeta> {
  await stat(corpus);
  const builder = new Bm25Builder(dir, { ...options, source: options.source ?? corpus });
  try {
    for await (const d of readCorpus(corpus, options.issues, options.signal)) builder.add(d.id, d.contents);
    if (builder.docCount === 0) throw new Error(`${corpus}: no documents (expected JSONL lines with id and contents)`);
    const issues = options.issues;
    return await builder.write(
      issues ? { [CORPUS_ISSUES_FILE]: JSON.stringify({ count: issues.length, first: issues.slice(0, 50) }) } : {},
    );
  } catch (e) {
    builder.abandon();
    throw e;
  }
}
