/**
 * The env server as a process (`node dist/server.js`, `search-agent-studio serve`): stdout carries one JSON
 * line `{"event":"listening","port":N}`; logs go to stderr; SIGTERM/SIGINT close it.
 *
 *   [--port N] [--topk 3]
 *   [--retriever bm25|dense|remote|none] default: bm25; none returns no documents (the ablation)
 *   [--index DIR]                       a built index (bm25 or dense, from its meta.json)
 *   [--corpus FILE.jsonl]               a corpus; BM25 indexes it once into a cache directory
 *   [--model DIR]                       the E5 encoder (dense)
 *   [--url URL]                         a Search-R1-compatible /retrieve (remote)
 *   [--scan onnx|js]                    dense scan implementation
 *   [--workers N]                       BM25 search threads sharing the index (default: the cores)
 *   [--reward MODULE|builtin:NAME]      the reward module /reward scores with (default builtin:em)
 *   [--reward-timeout MS] [--reward-batch-timeout MS]   its limits per item (2 s) and per request (2 min)
 *   [--max-queries N] [--max-reward-items N]            most queries per /retrieve (16384), items per /reward (65536)
 * With no --index, --corpus or --url: BM25 over the demo corpus that ships with the project.
 */
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { isAlive } from '../core/host/processes';
import { demoCorpusPath } from '../core/paths';
import {
  Bm25Retriever,
  DenseRetriever,
  NullRetriever,
  RemoteRetriever,
  type Retriever,
} from '../core/retrieval/retriever';
import { openReward } from '../core/rewards/scoring';
import { VERSION } from '../core/version';
import { DEFAULT_MAX_QUERIES, DEFAULT_MAX_REWARD_ITEMS, type EnvServer, startEnvServer } from './server';

/** The server's options, with their help text (the CLI's `serve` shows it; `dist/server.js` parses with it). */
export const SERVE_OPTIONS = {
  port: { type: 'string', default: '0', describe: 'port on 127.0.0.1 (0: any free port)' },
  topk: { type: 'string', default: '3', describe: 'documents per query when a request names none' },
  retriever: {
    type: 'string',
    describe: 'bm25 | dense | remote | none (none: no documents, the ablation); default from the other options',
  },
  index: { type: 'string', describe: 'a built index directory (bm25 or dense)' },
  corpus: { type: 'string', describe: 'a JSONL corpus ({id, contents}); BM25 indexes it once into a cache' },
  model: { type: 'string', describe: 'dense: the E5 encoder directory (model.onnx + tokenizer.json)' },
  url: { type: 'string', describe: 'remote: a Search-R1-compatible /retrieve URL' },
  scan: { type: 'string', default: 'onnx', describe: 'dense scan implementation: onnx | js' },
  workers: { type: 'string', describe: 'BM25 search threads sharing one index (default: the cores)' },
  reward: {
    type: 'string',
    default: 'builtin:em',
    describe: 'the reward module /reward scores with (a *.reward.ts or builtin:NAME)',
  },
  'reward-timeout': { type: 'string', default: '2000', describe: 'time limit per reward item (ms)' },
  'reward-batch-timeout': {
    type: 'string',
    default: '120000',
    describe: "time limit per /reward request (ms; keep it under the trainer's 300 s)",
  },
  'max-queries': {
    type: 'string',
    default: String(DEFAULT_MAX_QUERIES),
    describe: 'most queries in one /retrieve request (a request body is at most 16 MB either way)',
  },
  'max-reward-items': {
    type: 'string',
    default: String(DEFAULT_MAX_REWARD_ITEMS),
    describe: 'most items in one /reward request',
  },
} as const;

export type ServeValues = {
  [K in keyof typeof SERVE_OPTIONS]: (typeof SERVE_OPTIONS)[K] extends { default: string }
    ? string
    : string | undefined;
};

const OPTIONS = Object.fromEntries(
  Object.entries(SERVE_OPTIONS).map(([k, o]) => [
    k,
    { type: o.type, ...('default' in o ? { default: o.default } : {}) },
  ]),
) as { [K in keyof typeof SERVE_OPTIONS]: Omit<(typeof SERVE_OPTIONS)[K], 'describe'> };

export class UsageError extends Error {}

function int(name: string, value: string, min: number, max: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new UsageError(`--${name} must be an integer in ${min}..${max}, got ${value}`);
  return n;
}

/** The retriever a command line asks for. */
export async function retrieverFromArgs(
  values: {
    retriever?: string;
    index?: string;
    corpus?: string;
    model?: string;
    url?: string;
    scan?: string;
    workers?: string;
  },
  log: (l: string) => void,
): Promise<Retriever> {
  let kind = values.retriever;
  if (kind === undefined) {
    if (values.url) kind = 'remote';
    else if (values.index) {
      const meta = await readFile(join(values.index, 'meta.json'), 'utf8').then(JSON.parse, (e: Error) => {
        throw new UsageError(`--index ${values.index}: not an index (${e.message})`);
      });
      kind = meta.format === 'sas-dense' ? 'dense' : 'bm25';
    } else kind = 'bm25';
  }
  switch (kind) {
    case 'bm25': {
      const workers = values.workers === undefined ? availableParallelism() : int('workers', values.workers, 1, 1024);
      if (values.index) return Bm25Retriever.open(values.index, { workers });
      return Bm25Retriever.forCorpus(values.corpus ?? demoCorpusPath(), { log, workers });
    }
    case 'dense':
      if (!values.index || !values.model)
        throw new UsageError(
          '--retriever dense needs --index DIR (built with `search-agent-studio index --kind dense`) and --model DIR (model.onnx + tokenizer.json)',
        );
      if (values.scan !== 'onnx' && values.scan !== 'js')
        throw new UsageError(`--scan must be onnx or js, got ${values.scan}`);
      return DenseRetriever.open(values.index, values.model, { log, scan: values.scan });
    case 'remote':
      if (!values.url) throw new UsageError('--retriever remote needs --url http://host:port/retrieve');
      return new RemoteRetriever(values.url, { log });
    case 'none':
      return new NullRetriever();
    default:
      throw new UsageError(`--retriever must be bm25, dense, remote or none, got ${kind}`);
  }
}

export async function runServer(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, options: OPTIONS, strict: true });
  await serve(values as ServeValues);
}

/** Starts the env server with parsed options; runs until a signal (or its host goes away). */
export async function serve(values: ServeValues): Promise<void> {
  const port = int('port', values.port, 0, 65535);
  const defaultTopk = int('topk', values.topk, 1, 100);
  const log = (line: string) => process.stderr.write(`[env-server] ${line}\n`);
  // A host that died took the read ends of our pipes with it: EPIPE must not kill a server still serving a trainer.
  for (const stream of [process.stdout, process.stderr]) stream.on('error', () => undefined);
  // The reward module first: one that does not compile is refused before the retriever's threads start (which would
  // keep the process alive after the error).
  const limits = {
    itemTimeoutMs: int('reward-timeout', values['reward-timeout'], 1, 600_000),
    batchTimeoutMs: int('reward-batch-timeout', values['reward-batch-timeout'], 1, 3_600_000),
  };
  const maxQueries = int('max-queries', values['max-queries'], 1, 1_000_000);
  const maxRewardItems = int('max-reward-items', values['max-reward-items'], 1, 1_000_000);
  const opened = await openReward(values.reward, { ...limits, onLog: (l) => log(`[reward] ${l}`) }).catch(
    (e: Error) => {
      throw new UsageError(`--reward ${values.reward}: ${e.message}`);
    },
  );
  let retriever: Retriever;
  try {
    retriever = await retrieverFromArgs(values, log);
  } catch (e) {
    await opened.sandbox.close();
    throw e;
  }
  log(`retriever: ${JSON.stringify(retriever.describe())}`);
  log(`reward: ${values.reward} (${opened.compiled.file})`);
  let server: EnvServer;
  try {
    server = await startEnvServer({
      port,
      version: VERSION,
      log,
      retriever,
      defaultTopk,
      maxQueries,
      maxRewardItems,
      reward: { name: values.reward, file: opened.compiled.file, sandbox: opened.sandbox },
    });
  } catch (e) {
    // Not listening (the port is taken): the retriever's threads and the reward workers must not keep the process
    // alive after the error is reported.
    await Promise.all([retriever.close(), opened.sandbox.close()]).catch(() => undefined);
    throw e;
  }
  process.stdout.write(`${JSON.stringify({ event: 'listening', port: server.port })}\n`);
  const stop = (signal: string) => {
    log(`${signal}: closing`);
    void server.close().then(() => process.exit(0));
    setTimeout(() => process.exit(0), 3_000).unref();
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  // Orphaned (the host died): the trainer it served is finishing its step and checkpointing, so close once the
  // clients that named their pid (the trainer sends x-client-pid) have exited, or, with none named, once idle.
  let inFlight = 0;
  let lastRequest = Date.now();
  const clients = new Set<number>();
  server.server.on('request', (req, res) => {
    inFlight++;
    lastRequest = Date.now();
    const pid = Number(req.headers['x-client-pid']);
    if (Number.isInteger(pid) && pid > 0) clients.add(pid);
    res.once('close', () => {
      inFlight--;
      lastRequest = Date.now();
    });
  });
  const idleMs = Number(process.env.SAS_ORPHAN_IDLE_MS ?? 15_000);
  watchParent(() => {
    log(
      clients.size
        ? `the host process has gone: closing once its clients (${[...clients].join(', ')}) have exited`
        : `the host process has gone: closing once idle for ${idleMs / 1000} s`,
    );
    const timer = setInterval(() => {
      if (inFlight > 0) return;
      const done = clients.size ? [...clients].every((pid) => !isAlive(pid)) : Date.now() - lastRequest >= idleMs;
      if (done) {
        clearInterval(timer);
        stop('orphaned, and nobody left to serve');
      }
    }, 250);
  });
}

/**
 * A server started by a host (the extension, the CLI) must not outlive it: the host passes its pid in
 * SAS_PARENT_PID, and when our parent is no longer that process (we were re-parented: it died) `onGone` runs.
 */
export function watchParent(onGone: () => void, intervalMs = 1_000): void {
  const expected = Number(process.env.SAS_PARENT_PID);
  if (!Number.isInteger(expected) || expected <= 0 || process.ppid !== expected) return;
  const timer = setInterval(() => {
    if (process.ppid !== expected) {
      clearInterval(timer);
      onGone();
    }
  }, intervalMs);
  timer.unref();
}
