/**
 * Retrievers behind the env server's `/retrieve` (DESIGN §4.4): BM25 (Lucene-exact), dense (E5 through
 * onnxruntime-node) and remote (any Search-R1-compatible URL). All return, per query, documents as
 * `{id, contents}` with a score, best first.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Bm25Index, INDEX_VERSION, IndexVersionError, migrateBm25Index } from './bm25';
import { Bm25Pool } from './bm25Pool';
import { buildBm25Index, CORPUS_ISSUES_FILE, type CorpusIssue } from './corpus';
import { DenseIndex, type ScanMethod } from './dense';
import { E5Encoder } from './encoder';

export interface RetrievedDocument {
  id: string;
  contents: string;
}

export interface RetrievedHit {
  document: RetrievedDocument;
  score: number;
}

export interface Retriever {
  readonly kind: 'bm25' | 'dense' | 'remote' | 'none' | 'random';
  /** Documents in the index (null when unknown, e.g. remote). */
  readonly size: number | null;
  describe(): Record<string, unknown>;
  retrieve(queries: string[], topk: number): Promise<RetrievedHit[][]>;
  close(): Promise<void>;
}

export interface Bm25RetrieverOptions {
  /**
   * Worker threads sharing the index in memory (bm25Pool.ts); 0 (the default here) searches in the calling
   * thread. The env server defaults to the machine's cores.
   */
  workers?: number;
}

/** A corpus up to this size whose cached index predates the skipped-lines report is indexed again to report them. */
export const REBUILD_FOR_REPORT_BYTES = 64 * 2 ** 20;

export class Bm25Retriever implements Retriever {
  readonly kind = 'bm25';
  private constructor(
    readonly index: Bm25Index,
    private readonly pool: Bm25Pool | undefined,
  ) {}

  static async open(dir: string, options: Bm25RetrieverOptions = {}): Promise<Bm25Retriever> {
    const workers = options.workers ?? 0;
    if (workers === 0) return new Bm25Retriever(await Bm25Index.load(dir), undefined);
    const pool = await Bm25Pool.open(dir, { workers });
    return new Bm25Retriever(pool.index, pool);
  }

  /**
   * A BM25 retriever over a corpus file, building its index once into a cache directory keyed by the
   * corpus's path, size and modification time (a cached index of an older format version is migrated).
   */
  static async forCorpus(
    corpus: string,
    options: Bm25RetrieverOptions & {
      cacheDir?: string;
      log?: (l: string) => void;
      /** REBUILD_FOR_REPORT_BYTES unless set (tests) */
      rebuildForReportBytes?: number;
    } = {},
  ): Promise<Bm25Retriever> {
    const st = await stat(corpus);
    const key = createHash('sha256')
      .update(`${resolve(corpus)}\0${st.size}\0${st.mtimeMs}`)
      .digest('hex')
      .slice(0, 16);
    const dir = join(options.cacheDir ?? join(tmpdir(), 'search-agent-studio', 'bm25'), key);
    // The lines skipped (file:line and why), as `index` reports them; their report is kept in the index (none
    // skipped: a count of 0) so that a later start from the cache says so too.
    const issuesFile = join(dir, CORPUS_ISSUES_FILE);
    const report = (first: CorpusIssue[], count: number) => {
      for (const i of first.slice(0, 50)) options.log?.(i.message);
      if (count > 50) options.log?.(`… and ${count - 50} more`);
      if (count) options.log?.(`${count} corpus lines skipped`);
    };
    const build = async () => {
      await mkdir(join(dir, '..'), { recursive: true });
      const t0 = Date.now();
      const issues: CorpusIssue[] = [];
      const meta = await buildBm25Index(corpus, dir, { issues });
      options.log?.(`indexed ${corpus}: ${meta.docs} documents, ${meta.terms} terms in ${Date.now() - t0} ms → ${dir}`);
      report(issues, issues.length); // their report is in the index, written with it (buildBm25Index)
    };
    // A cache an older version built has no report of skipped lines: a corpus small enough to index in seconds is
    // indexed again for it (the demo's in milliseconds); a larger one's cache is kept, and says it cannot tell.
    // (a build replaces the folder in one rename, its report inside: a concurrent start never sees one without it)
    const predates = existsSync(join(dir, 'meta.json')) && !existsSync(issuesFile);
    const again = predates && st.size <= (options.rebuildForReportBytes ?? REBUILD_FOR_REPORT_BYTES);
    if (again)
      options.log?.(`the cached index ${dir} predates the report of skipped corpus lines: indexing the corpus again`);
    if (again || !existsSync(join(dir, 'meta.json'))) await build();
    else {
      // A start from the cache says what the build skipped, too.
      const saved = (await readFile(issuesFile, 'utf8').then(JSON.parse, () => null)) as {
        count: number;
        first: CorpusIssue[];
      } | null;
      if (saved) report(saved.first, saved.count);
      // built by a version before the report, over a large corpus: whether it skipped lines is not known (its index
      // is still good)
      else
        options.log?.(
          `the cached index ${dir} predates the report of skipped corpus lines: it cannot say whether it skipped any (delete the folder to rebuild it, or run \`search-agent-studio index\` on the corpus to see them)`,
        );
      const version = (JSON.parse(await readFile(join(dir, 'meta.json'), 'utf8')) as { version?: number }).version;
      if (version !== INDEX_VERSION) {
        const t0 = Date.now();
        await migrateBm25Index(dir);
        options.log?.(
          `migrated the cached index ${dir} from format version ${version} to ${INDEX_VERSION} in ${Date.now() - t0} ms`,
        );
      }
    }
    try {
      return await Bm25Retriever.open(dir, options);
    } catch (e) {
      // A cache, so an unreadable one (a file missing or cut short) is rebuilt from its corpus; a newer format is not ours to overwrite.
      if (e instanceof IndexVersionError) throw e;
      options.log?.(`the cached index ${dir} cannot be read (${(e as Error).message}); rebuilding it`);
      await rm(dir, { recursive: true, force: true });
      await build();
      return Bm25Retriever.open(dir, options);
    }
  }

  get size(): number {
    return this.index.meta.docs;
  }

  /** Worker threads searching (0: the calling thread). */
  get workers(): number {
    return this.pool?.workers ?? 0;
  }

  describe(): Record<string, unknown> {
    const m = this.index.meta;
    return {
      kind: this.kind,
      documents: m.docs,
      terms: m.terms,
      k1: m.k1,
      b: m.b,
      analyzer: m.analyzer,
      index: this.index.dir,
      workers: this.workers,
    };
  }

  async retrieve(queries: string[], topk: number): Promise<RetrievedHit[][]> {
    if (this.pool)
      return (await this.pool.search(queries, topk)).map((list) =>
        list.map((h) => ({ document: { id: h.id, contents: h.contents }, score: h.score })),
      );
    return queries.map((q) =>
      this.index
        .search(q, { k: topk })
        .map((h) => ({ document: { id: h.id, contents: this.index.contents(h.doc) }, score: h.score })),
    );
  }

  async close(): Promise<void> {
    if (this.pool) await this.pool.close();
    else this.index.close();
  }
}

export class DenseRetriever implements Retriever {
  readonly kind = 'dense';
  constructor(
    readonly index: DenseIndex,
    readonly encoder: E5Encoder,
    readonly scan: ScanMethod = 'onnx',
  ) {}

  static async open(
    dir: string,
    modelDir: string,
    options: { log?: (l: string) => void; scan?: ScanMethod } = {},
  ): Promise<DenseRetriever> {
    const index = await DenseIndex.load(dir);
    const encoder = await E5Encoder.load(modelDir, { log: options.log });
    if (encoder.dim !== index.meta.dim)
      throw new Error(`${modelDir}: the encoder's dimension is ${encoder.dim}, the index ${dir} has ${index.meta.dim}`);
    return new DenseRetriever(index, encoder, options.scan);
  }

  get size(): number {
    return this.index.size;
  }

  describe(): Record<string, unknown> {
    return {
      kind: this.kind,
      documents: this.index.size,
      dim: this.index.meta.dim,
      dtype: this.index.meta.dtype,
      model: this.encoder.dir,
      provider: this.encoder.provider,
      scan: this.scan,
    };
  }

  async retrieve(queries: string[], topk: number): Promise<RetrievedHit[][]> {
    const vecs = await this.encoder.encode(queries, 'query');
    const hits = await this.index.scan(vecs, topk, this.scan);
    return hits.map((list) =>
      list.map((h) => ({ document: { id: h.id, contents: this.index.contents(h.doc) }, score: h.score })),
    );
  }

  async close(): Promise<void> {
    this.index.close();
    await this.encoder.release();
  }
}

export interface RemoteOptions {
  /** Per attempt, ms (default 30 s). */
  timeoutMs?: number;
  /** Retries after the first attempt, on 5xx and connection errors (default 3). */
  retries?: number;
  /** First backoff, ms; doubles each retry (default 250). */
  backoffMs?: number;
  log?: (line: string) => void;
}

/** Thrown when a remote retriever stays down; names the URL and the last failure. */
/**
 * Retrieval disabled (the ablation): every query gets no documents, so the agent sees
 * `<information></information>`. The API stays the same, so a run's code path does not change.
 */
export class NullRetriever implements Retriever {
  readonly kind = 'none';
  readonly size = 0;
  describe(): Record<string, unknown> {
    return { kind: this.kind, documents: 0 };
  }
  async retrieve(queries: string[]): Promise<RetrievedHit[][]> {
    return queries.map(() => []);
  }
  async close(): Promise<void> {}
}

export class RemoteRetrieverError extends Error {
  constructor(
    readonly url: string,
    message: string,
  ) {
    super(message);
    this.name = 'RemoteRetrieverError';
  }
}

/** Any Search-R1-compatible `/retrieve` endpoint (their FAISS server, a web-search proxy, another of ours). */
export class RemoteRetriever implements Retriever {
  readonly kind = 'remote';
  readonly size = null;
  private readonly timeoutMs: number;
  private readonly retries: number;
  private readonly backoffMs: number;

  constructor(
    readonly url: string,
    private readonly options: RemoteOptions = {},
  ) {
    try {
      const u = new URL(url);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`protocol ${u.protocol}`);
    } catch (e) {
      throw new RemoteRetrieverError(url, `not a usable retriever URL: ${url} (${(e as Error).message})`);
    }
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retries = options.retries ?? 3;
    this.backoffMs = options.backoffMs ?? 250;
  }

  describe(): Record<string, unknown> {
    return { kind: this.kind, url: this.url };
  }

  async retrieve(queries: string[], topk: number): Promise<RetrievedHit[][]> {
    let last = '';
    for (let attempt = 0; attempt <= this.retries; attempt++) {
      if (attempt > 0) await new Promise((r) => setTimeout(r, this.backoffMs * 2 ** (attempt - 1)));
      let res: Response;
      try {
        res = await fetch(this.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ queries, topk, return_scores: true }),
          signal: AbortSignal.timeout(this.timeoutMs),
        });
      } catch (e) {
        const err = e as Error & { cause?: { code?: string } };
        last =
          err.name === 'TimeoutError'
            ? `no answer within ${this.timeoutMs} ms`
            : `${err.cause?.code ?? err.name}: ${err.message}`;
        this.options.log?.(`remote retriever ${this.url}: attempt ${attempt + 1} failed: ${last}`);
        continue;
      }
      if (res.status >= 500) {
        last = `HTTP ${res.status}: ${(await res.text().catch(() => '')).slice(0, 200)}`;
        this.options.log?.(`remote retriever ${this.url}: attempt ${attempt + 1} failed: ${last}`);
        continue;
      }
      const text = await res.text();
      if (!res.ok)
        throw new RemoteRetrieverError(this.url, `${this.url} answered HTTP ${res.status}: ${text.slice(0, 300)}`);
      return parseRemote(this.url, text, queries.length);
    }
    throw new RemoteRetrieverError(
      this.url,
      `the retriever at ${this.url} is not answering after ${this.retries + 1} attempts (last: ${last})`,
    );
  }

  async close(): Promise<void> {}
}

function parseRemote(url: string, text: string, n: number): RetrievedHit[][] {
  let body: { result?: unknown };
  try {
    body = JSON.parse(text);
  } catch {
    throw new RemoteRetrieverError(url, `${url} answered with something that is not JSON: ${text.slice(0, 200)}`);
  }
  if (!Array.isArray(body.result) || body.result.length !== n) {
    throw new RemoteRetrieverError(
      url,
      `${url}: expected {"result": [...]} with ${n} lists, got ${text.slice(0, 200)}`,
    );
  }
  return body.result.map((list: unknown) =>
    (Array.isArray(list) ? list : []).map((item: any) => {
      // With return_scores: {document, score}; without: the document itself.
      const doc = item && typeof item === 'object' && 'document' in item ? item.document : item;
      const contents =
        typeof doc?.contents === 'string'
          ? doc.contents
          : typeof doc?.text === 'string'
            ? `"${doc.title ?? ''}"\n${doc.text}`
            : String(doc ?? '');
      return {
        document: { id: String(doc?.id ?? ''), contents },
        score: typeof item?.score === 'number' ? item.score : 0,
      };
    }),
  );
}
