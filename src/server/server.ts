/**
 * The env server (DESIGN §2, §4.4): Search-R1's `/retrieve`, our `/reward`, and `/health`, over JSON on
 * 127.0.0.1 only. It never crashes on a request: every handler's error becomes a JSON answer.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { RemoteRetrieverError, type Retriever } from '../core/retrieval/retriever';
import { makeTrajectory } from '../core/rewards/api';
import { answerIn, em, f1 } from '../core/rewards/normalize';
import type { RewardItem, RewardSandbox } from '../core/rewards/sandbox';
import { depthMessage, describeValue, MAX_JSON_DEPTH, nestsDeeperThan } from '../core/schema/bounds';
import type { Dialect } from '../core/tags/parser';
import { type ResponseSpan, spansFromWire } from '../core/tags/spans';
import { parseDialectName } from '../core/tags/trajectory';
import { HttpError, readJson, sendJson, sendJsonList } from './http';

export interface EnvServerOptions {
  /** 0 picks a free port. */
  port?: number;
  /** Bytes; bodies over it get 413. */
  maxBodyBytes?: number;
  /** One line per request batch. */
  log?: (line: string) => void;
  version: string;
  /** Serves /retrieve; without one, /retrieve answers 503 saying so. */
  retriever?: Retriever;
  /** `topk` when a request has none (Search-R1's retrieval_topk; 3). */
  defaultTopk?: number;
  /**
   * Most queries in one request (default 16384: Search-R1's trainer sends all of a turn's searches at once, up to
   * train_batch_size × n_agent = 2,560 at its defaults; the body limit bounds the bytes) and largest topk (default 100).
   */
  maxQueries?: number;
  maxTopk?: number;
  /** Characters of a query the retriever sees (default 8192): a longer query is cut to it, not refused. */
  maxQueryChars?: number;
  /** Serves /reward: the configured reward module's sandbox, and its name for /health. */
  reward?: { name: string; file: string; sandbox: RewardSandbox };
  /** Most items in one /reward request (default 65536). */
  maxRewardItems?: number;
  /**
   * Time to receive a request's headers (default 10 s) and the whole request, body included (default 60 s): a client
   * that stalls is answered 408 and its connection closed, so a stalled body cannot hold a socket open.
   */
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
}

/** Validates a /reward body; errors name the field. */
export function parseRewardRequest(body: unknown, maxItems: number): RewardItem[] {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new HttpError(400, 'body: expected a JSON object {items: [...]}');
  const items = (body as { items?: unknown }).items;
  if (!Array.isArray(items))
    throw new HttpError(400, `items: expected an array, got ${items === undefined ? 'nothing' : typeof items}`);
  if (items.length > maxItems)
    throw new HttpError(400, `items: ${items.length} items; at most ${maxItems} per request`);
  return items.map((raw, i) => {
    const at = `items[${i}]`;
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
      throw new HttpError(
        400,
        `${at}: expected an object {response, prompt?, golden, data_source?, meta?, dialect?, search_tool?, strict_actions?, spans?}`,
      );
    const it = raw as Record<string, unknown>;
    if (typeof it.response !== 'string')
      throw new HttpError(
        400,
        `${at}.response: expected a string, got ${it.response === undefined ? 'nothing' : typeof it.response}`,
      );
    if (it.prompt !== undefined && typeof it.prompt !== 'string')
      throw new HttpError(400, `${at}.prompt: expected a string`);
    if (!Array.isArray(it.golden) || it.golden.some((g) => typeof g !== 'string'))
      throw new HttpError(400, `${at}.golden: expected an array of strings`);
    if (it.data_source !== undefined && typeof it.data_source !== 'string')
      throw new HttpError(400, `${at}.data_source: expected a string`);
    if (it.meta !== undefined && (typeof it.meta !== 'object' || it.meta === null || Array.isArray(it.meta)))
      throw new HttpError(400, `${at}.meta: expected an object, got ${describeValue(it.meta)}`);
    // meta goes to a worker by structured clone, which recurses: a deep one would kill the process.
    if (it.meta !== undefined && nestsDeeperThan(it.meta, MAX_JSON_DEPTH))
      throw new HttpError(400, depthMessage(`${at}.meta`));
    if (it.question !== undefined && typeof it.question !== 'string')
      throw new HttpError(400, `${at}.question: expected a string`);
    const dialect = parseDialectName(it.dialect);
    if (typeof dialect === 'object') throw new HttpError(400, `${at}.dialect: ${dialect.error}`);
    if (it.search_tool !== undefined && (typeof it.search_tool !== 'string' || !it.search_tool.trim()))
      throw new HttpError(400, `${at}.search_tool: expected a tool name`);
    let spans: ResponseSpan[] | undefined;
    if (it.spans !== undefined && it.spans !== null) {
      const read = spansFromWire(it.spans, it.response, `${at}.spans`);
      if ('error' in read) throw new HttpError(400, read.error);
      spans = read;
    }
    if (it.strict_actions !== undefined && typeof it.strict_actions !== 'boolean')
      throw new HttpError(400, `${at}.strict_actions: expected a boolean, got ${describeValue(it.strict_actions)}`);
    return {
      id: typeof it.id === 'string' || typeof it.id === 'number' ? String(it.id) : `items[${i}]`,
      prompt: (it.prompt as string | undefined) ?? '',
      response: it.response,
      golden: it.golden as string[],
      ...(it.question !== undefined ? { question: it.question as string } : {}),
      ...(it.data_source !== undefined ? { data_source: it.data_source as string } : {}),
      ...(it.meta !== undefined ? { meta: it.meta as Record<string, unknown> } : {}),
      ...(dialect !== 'auto' ? { dialect } : {}),
      ...(it.search_tool !== undefined ? { searchTool: it.search_tool as string } : {}),
      ...(it.strict_actions === true ? { strictActions: true } : {}),
      ...(spans ? { spans } : {}),
    };
  });
}

/**
 * The built-in measures a trainer logs beside the reward, whatever the reward module is (`/reward` with
 * `metrics: true`): `em` and `f1` of the response's final answer against the golden answers (Search-R1's
 * normalisation), `format` (1 when the response follows Search-R1's is_valid_sequence), `answered`, `searches`, and
 * `answer_retrieved`: 1 when a golden answer occurs, as whole normalised words, in what the searches returned (the
 * `<information>` blocks, or the tool responses in the tool-call dialects) — whether the policy had the answer in
 * front of it, so that a wrong answer reads as a reading failure and a missing one as a search failure.
 * They never feed the reward: the trainer trains on the module's reward only.
 */
export function builtinMetrics(item: RewardItem): Record<string, number> {
  const traj = makeTrajectory(item.prompt, item.response, {
    dialect: item.dialect as Dialect | undefined,
    searchTool: item.searchTool,
    strictActions: item.strictActions,
    ...(item.spans ? { spans: item.spans } : {}),
  });
  const answer = traj.answer;
  return {
    em: answer === null ? 0 : em(answer, item.golden),
    f1: answer === null ? 0 : f1(answer, item.golden),
    format: traj.valid ? 1 : 0,
    answered: answer === null ? 0 : 1,
    searches: traj.searches.length,
    answer_retrieved: traj.segments.some(
      (seg) =>
        seg.kind === 'information' &&
        answerIn(item.response.slice(seg.contentStart, seg.contentEnd), item.golden) === 1,
    )
      ? 1
      : 0,
  };
}

/** Validates a /retrieve body; errors name the field. */
export function parseRetrieveRequest(
  body: unknown,
  limits: { defaultTopk: number; maxQueries: number; maxTopk: number; maxQueryChars?: number },
): { queries: string[]; topk: number; returnScores: boolean; truncated: number } {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new HttpError(400, 'body: expected a JSON object {queries, topk?, return_scores?}');
  const b = body as Record<string, unknown>;
  if (!Array.isArray(b.queries))
    throw new HttpError(400, `queries: expected an array of strings, got ${describeValue(b.queries)}`);
  if (b.queries.length > limits.maxQueries)
    throw new HttpError(400, `queries: ${b.queries.length} queries; at most ${limits.maxQueries} per request`);
  // A query over the limit is cut to it for retrieval, not refused: one rambling search in a batch of thousands must
  // not fail the others (Search-R1's servers take any length), and BM25 or the encoder gains nothing from the tail.
  const maxChars = limits.maxQueryChars ?? DEFAULT_MAX_QUERY_CHARS;
  let truncated = 0;
  const queries = b.queries.map((q, i) => {
    if (typeof q !== 'string') throw new HttpError(400, `queries[${i}]: expected a string, got ${describeValue(q)}`);
    if (q.length <= maxChars) return q;
    truncated++;
    const cut = q.slice(0, maxChars);
    // never leave half of a surrogate pair at the end
    return /[\uD800-\uDBFF]$/.test(cut) ? cut.slice(0, -1) : cut;
  });
  let topk = limits.defaultTopk;
  if (b.topk !== undefined && b.topk !== null && b.topk !== 0) {
    if (typeof b.topk !== 'number' || !Number.isInteger(b.topk) || b.topk < 1)
      throw new HttpError(400, `topk: expected a positive integer, got ${describeValue(b.topk)}`);
    if (b.topk > limits.maxTopk) throw new HttpError(400, `topk: ${b.topk}; at most ${limits.maxTopk}`);
    topk = b.topk;
  }
  if (b.return_scores !== undefined && typeof b.return_scores !== 'boolean')
    throw new HttpError(400, `return_scores: expected a boolean, got ${describeValue(b.return_scores)}`);
  return { queries, topk, returnScores: b.return_scores === true, truncated };
}

/** Most queries in one /retrieve request, and items in one /reward request, unless the server is told otherwise. */
export const DEFAULT_MAX_QUERIES = 16384;
export const DEFAULT_MAX_REWARD_ITEMS = 65536;
/** Characters of a query the retriever sees: a longer one is cut to it (parseRetrieveRequest). */
export const DEFAULT_MAX_QUERY_CHARS = 8192;

type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

export interface EnvServer {
  readonly port: number;
  readonly server: Server;
  close(): Promise<void>;
}

/** The address the env server binds: loopback only, by design. */
export const ENV_SERVER_HOST = '127.0.0.1';

export async function startEnvServer(options: EnvServerOptions): Promise<EnvServer> {
  const started = Date.now();
  const maxBodyBytes = options.maxBodyBytes ?? 16 * 1024 * 1024;
  const log = options.log ?? (() => {});
  const limits = {
    defaultTopk: options.defaultTopk ?? 3,
    maxQueries: options.maxQueries ?? DEFAULT_MAX_QUERIES,
    maxTopk: options.maxTopk ?? 100,
    maxQueryChars: options.maxQueryChars ?? DEFAULT_MAX_QUERY_CHARS,
  };
  const maxRewardItems = options.maxRewardItems ?? DEFAULT_MAX_REWARD_ITEMS;
  const retriever = options.retriever;

  const routes: Record<string, Partial<Record<string, Handler>>> = {
    '/health': {
      GET: async (_req, res) =>
        sendJson(res, 200, {
          status: 'ok',
          version: options.version,
          uptime_s: (Date.now() - started) / 1000,
          retriever: retriever ? { ...retriever.describe(), default_topk: limits.defaultTopk } : null,
          reward: options.reward ? { name: options.reward.name, module: options.reward.file } : null,
          // What one request may hold: clients (the trainer's env_client) split their batches to fit.
          limits: {
            max_queries: limits.maxQueries,
            max_topk: limits.maxTopk,
            max_query_chars: limits.maxQueryChars,
            max_reward_items: maxRewardItems,
            max_body_bytes: maxBodyBytes,
          },
        }),
    },
    '/retrieve': {
      // Search-R1's API: {queries, topk?, return_scores?} → {result: [[{document, score}]]} or [[document]].
      POST: async (req, res) => {
        const { queries, topk, returnScores, truncated } = parseRetrieveRequest(
          await readJson(req, maxBodyBytes),
          limits,
        );
        if (!retriever)
          throw new HttpError(
            503,
            'this env server has no retriever configured (start it with --corpus, --index or --retriever remote)',
          );
        const t0 = performance.now();
        let results;
        try {
          results = await retriever.retrieve(queries, topk);
        } catch (e) {
          if (e instanceof RemoteRetrieverError) throw new HttpError(502, e.message);
          throw e;
        }
        // The retriever's own time, for the trainer's per-step latency metrics (W3C Server-Timing; docs/retrieval.md).
        const ms = performance.now() - t0;
        res.setHeader('server-timing', `retrieve;dur=${ms.toFixed(3)}`);
        // Written list by list (as /reward's answer): 200 queries × a few MB documents must not exceed V8's largest string.
        sendJsonList(res, 200, 'result', returnScores ? results : results.map((list) => list.map((h) => h.document)));
        const cut = truncated ? ` (${truncated} cut to ${limits.maxQueryChars} characters)` : '';
        log(`retrieve ${queries.length} queries${cut}, topk ${topk}: ${ms.toFixed(1)}ms`);
      },
    },
    '/reward': {
      // {items: [{response, prompt?, golden, data_source?, meta?}], metrics?} → {results: [{reward, parts, metrics?}]}
      // (a failed item: reward null and an error naming the module's file and line).
      POST: async (req, res) => {
        const body = await readJson(req, maxBodyBytes);
        const items = parseRewardRequest(body, maxRewardItems);
        const withMetrics = (body as { metrics?: unknown }).metrics;
        if (withMetrics !== undefined && typeof withMetrics !== 'boolean')
          throw new HttpError(400, `metrics: expected a boolean, got ${describeValue(withMetrics)}`);
        if (!options.reward)
          throw new HttpError(503, 'this env server has no reward module configured (start it with --reward)');
        const t0 = performance.now();
        const outcomes = await options.reward.sandbox.score(items);
        let failed = 0;
        const results = outcomes.map((o, i) => {
          const metrics = withMetrics ? { metrics: builtinMetrics(items[i]!) } : {};
          if ('reward' in o) return { reward: o.reward, parts: o.parts, ...metrics };
          failed++;
          const where = o.error.file ? `${o.error.file}:${o.error.line}: ` : '';
          return { reward: null, parts: {}, error: `${where}${o.error.message} (item ${o.id})`, ...metrics };
        });
        const ms = performance.now() - t0;
        res.setHeader('server-timing', `reward;dur=${ms.toFixed(3)}`);
        // Each result is bounded (the sandbox bounds every field it reads); the answer is written result by result.
        sendJsonList(res, 200, 'results', results);
        log(`reward ${items.length} items${failed ? ` (${failed} failed)` : ''}: ${ms.toFixed(1)}ms`);
      },
    },
  };

  const requestTimeout = options.requestTimeoutMs ?? 60_000;
  const headersTimeout = Math.min(options.headersTimeoutMs ?? 10_000, requestTimeout);
  const server = createServer(
    { requestTimeout, headersTimeout, connectionsCheckingInterval: Math.max(50, Math.min(1_000, headersTimeout / 4)) },
    (req, res) => {
      const t0 = performance.now();
      const path = (req.url ?? '/').split('?')[0] ?? '/';
      const route = routes[path];
      const handler = route?.[req.method ?? 'GET'];
      const done = (status: number) => log(`${req.method} ${path} ${status} ${(performance.now() - t0).toFixed(1)}ms`);
      if (!route) {
        sendJson(res, 404, { error: `no such endpoint: ${path}` });
        return done(404);
      }
      if (!handler) {
        res.setHeader('allow', Object.keys(route).join(', '));
        sendJson(res, 405, { error: `${req.method} is not allowed on ${path}` });
        return done(405);
      }
      handler(req, res).then(
        () => done(res.statusCode),
        (e: unknown) => {
          const status = e instanceof HttpError ? e.status : 500;
          const message = e instanceof Error ? e.message : String(e);
          if (!res.headersSent) sendJson(res, status, { error: message });
          else res.destroy();
          done(status);
        },
      );
    },
  );
  server.keepAliveTimeout = 5_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, ENV_SERVER_HOST, () => {
      server.off('error', reject);
      resolve();
    });
  });

  return {
    port: (server.address() as AddressInfo).port,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      }).then(() => Promise.all([retriever?.close(), options.reward?.sandbox.close()]).then(() => undefined)),
  };
}
