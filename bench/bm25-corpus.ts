/**
 * The BM25 benchmarks' inputs, generated (seeded) and cached in .bench/:
 *   - a Wikipedia-like corpus: passages of 60–140 words drawn from a 60,000-word vocabulary with a Zipf
 *     distribution (s = 1.07), plus a two-word title, in Search-R1's `{id, contents}` form;
 *   - `zipf` queries: 3–8 words drawn from the same Zipf distribution (they hit long posting lists on purpose);
 *   - `nq` queries, shaped like Natural Questions / Search-R1 queries: a question word (a frequent word, as
 *     "who" or "when" are in Wikipedia), stop words, and 2–4 content words of one target passage — one or two
 *     of its rarest (the entity the question is about), one or two mid-frequency — and often a title word;
 *   - the corpus as `id TAB contents` (newlines escaped) for the Lucene program.
 */
import { createReadStream, createWriteStream, existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { BENCH_DIR } from './data';
import { rng } from './util';

const V = 60_000;

function vocabulary(): string[] {
  const letters = 'abcdefghijklmnoprstuvwy';
  return Array.from({ length: V }, (_, i) => {
    let w = '';
    let x = i + 7;
    do {
      w += letters[x % letters.length];
      x = Math.floor(x / letters.length);
    } while (x > 0);
    return w + 'aeiou'[i % 5];
  });
}

/** A Zipf(1.07) word sampler over the vocabulary, by inverse CDF. */
function zipfSampler(r: () => number, vocab: string[]): () => string {
  const cdf = new Float64Array(V);
  let acc = 0;
  for (let i = 0; i < V; i++) cdf[i] = acc += 1 / (i + 1) ** 1.07;
  return () => {
    const u = r() * acc;
    let lo = 0;
    let hi = V - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return vocab[lo]!;
  };
}

async function writeLines(path: string, lines: Iterable<string>): Promise<void> {
  const tmp = `${path}.tmp`;
  const out = createWriteStream(tmp);
  for (const line of lines) if (!out.write(line)) await new Promise<void>((res) => out.once('drain', () => res()));
  await new Promise<void>((res, rej) => out.end((e?: Error | null) => (e ? rej(e) : res())));
  renameSync(tmp, path);
}

export interface Bm25Inputs {
  corpus: string;
  /** Query files by set name. */
  queries: Record<'zipf' | 'nq', string>;
}

/** The corpus of `n` passages and its query sets (2,000 queries each). */
export async function bm25Inputs(n: number): Promise<Bm25Inputs> {
  mkdirSync(BENCH_DIR, { recursive: true });
  const corpus = join(BENCH_DIR, `zipf-corpus-${n}.jsonl`);
  const zipf = join(BENCH_DIR, `zipf-queries-${n}.txt`);
  const nq = join(BENCH_DIR, `nq-queries-${n}.txt`);
  const vocab = vocabulary();
  if (!existsSync(corpus) || !existsSync(zipf)) {
    console.log(`generating ${corpus}…`);
    const r = rng(42);
    const word = zipfSampler(r, vocab);
    function* passages() {
      for (let i = 0; i < n; i++) {
        const len = 60 + Math.floor(r() * 80);
        const text = Array.from({ length: len }, word).join(' ');
        yield `${JSON.stringify({ id: String(i), contents: `"${word()} ${word()}"\n${text}` })}\n`;
      }
    }
    await writeLines(corpus, passages());
    writeFileSync(
      zipf,
      `${Array.from({ length: 2000 }, () => Array.from({ length: 3 + Math.floor(r() * 6) }, word).join(' ')).join('\n')}\n`,
    );
  }
  if (!existsSync(nq)) {
    const rank = new Map(vocab.map((w, i) => [w, i]));
    const r = rng(7);
    const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
    const questionWords = vocab.slice(20, 26); // who, what, when, where, which, how: frequent, not the most frequent
    const stop = ['the', 'of', 'in', 'a', 'was', 'is', 'to'];
    const every = Math.max(1, Math.floor(n / 2000));
    const queries: string[] = [];
    let i = 0;
    for await (const line of createInterface({ input: createReadStream(corpus) })) {
      if (i++ % every !== 0 || queries.length === 2000) continue;
      const contents = (JSON.parse(line) as { contents: string }).contents;
      const [title, text] = contents.split('\n') as [string, string];
      const words = [...new Set(text.split(' '))].sort((a, b) => rank.get(b)! - rank.get(a)!); // rarest first
      const third = Math.max(1, Math.floor(words.length / 3));
      const rare = Array.from({ length: 1 + Math.floor(r() * 2) }, () => words[Math.floor(r() * Math.min(third, 8))]!);
      const mid = Array.from({ length: 1 + Math.floor(r() * 2) }, () => words[third + Math.floor(r() * third)]!);
      const content = [...new Set([...rare, ...mid, ...(r() < 0.5 ? [title.slice(1, -1).split(' ')[0]!] : [])])];
      const parts = [pick(questionWords)];
      for (const w of content) parts.push(...(r() < 0.6 ? [pick(stop)] : []), w);
      queries.push(parts.join(' '));
    }
    writeFileSync(nq, `${queries.join('\n')}\n`);
  }
  return { corpus, queries: { zipf, nq } };
}

/** The corpus as `id TAB contents` with `\n`, `\t` and `\\` escaped (the Lucene program's input), cached. */
export async function corpusTsv(corpus: string): Promise<string> {
  const tsv = corpus.replace(/\.jsonl$/, '.tsv');
  if (existsSync(tsv)) return tsv;
  const escapeField = (s: string) => s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/\t/g, '\\t');
  async function* rows() {
    for await (const line of createInterface({ input: createReadStream(corpus) })) {
      if (!line) continue;
      const d = JSON.parse(line) as { id: string; contents: string };
      yield `${d.id}\t${escapeField(d.contents)}\n`;
    }
  }
  const tmp = `${tsv}.tmp`;
  const out = createWriteStream(tmp);
  for await (const row of rows()) if (!out.write(row)) await new Promise<void>((res) => out.once('drain', () => res()));
  await new Promise<void>((res, rej) => out.end((e?: Error | null) => (e ? rej(e) : res())));
  renameSync(tmp, tsv);
  return tsv;
}
