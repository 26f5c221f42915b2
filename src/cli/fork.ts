/**
 * Counterfactual replay on the command line (docs/fork.md), on the same host as the replay panel's "Fork here"
 * (src/core/host/fork.ts):
 *
 *   search-agent-studio fork <run-dir> <rollout-id> --turn K [--checkpoint C] [--query TEXT | --documents FILE]
 *                            [--samples N | --greedy] [--retriever-url URL] [--env-url URL] [--python PATH] [--json]
 *   search-agent-studio whatif <run-dir> --retriever-url URL [--step N] [--filter EXPR] [--limit N] [--checkpoint C]
 *                              [--env-url URL] [--python PATH] [--json]
 *   search-agent-studio whatif <run-dir> --ablate [--checkpoint C] [--step N] [--filter EXPR] [--limit N] [--json] …
 *
 * `fork` continues one rollout from generation turn K (from 1) with the run's policy; `--json` prints
 * `{"continuations": [{"response", "answer", "reward", "diverges_at", "tokens"}]}`. `whatif` forks every rollout
 * the inspector's filter selects at turn 1 twice, greedy, from the same checkpoint — with the run's own retriever and
 * with another — and prints the reward before and after: the two differ only in the retriever (the recorded rollout,
 * sampled, would also differ in the decoding). With `--ablate`, three ways — the run's own retriever, an empty one
 * and a random one — and what the policy's reward owes to what it retrieves (issue 46). A checkpoint C is
 * step-NNNNNN, initial-model (a TRL run's step 0) or a checkpoint directory.
 * Exit 0, 1 when a fork failed (the policy server's message), 2 on bad usage or input (checked before any server
 * starts: the turn, the checkpoint, the retriever URL, an edit of a turn that made no search). Ctrl-C: 130.
 */
import { readFile } from 'node:fs/promises';
import { trajectoryFacts } from '../core/audit/summary';
import {
  defaultCheckpoint,
  ForkError,
  ForkHost,
  findRollout,
  forkRequestProblem,
  listCheckpoints,
  noCheckpointMessage,
  resolveCheckpoint,
  retrieverUrlProblem,
} from '../core/host/fork';
import { EnvServerError } from '../core/host/processes';
import { loadRunDirConfig, RunConfigError, runNeeds } from '../core/host/runConfig';
import { readRun } from '../core/host/runs';
import { FilterError } from '../core/inspect/filter';
import { RolloutTable } from '../core/inspect/table';
import { demoCorpusPath, resolveConfigPath } from '../core/paths';
import type { Continuation, ForkDocument, ForkOptions } from '../core/protocol/replay';
import { findPython, noPythonMessage, runPythonNote } from '../core/python';
import { readCorpus } from '../core/retrieval/corpus';
import { RandomRetriever } from '../core/retrieval/random';
import { NullRetriever, type RetrievedDocument } from '../core/retrieval/retriever';
import type { Rollout } from '../core/run/format';
import { rolloutContext } from '../core/run/format';
import { RolloutStore } from '../core/store/rollouts';
import { documentsOf, parseResponse } from '../core/tags/trajectory';
import { VERSION } from '../core/version';
import { UsageError } from '../server/run';
import { ENV_SERVER_HOST, type EnvServer, startEnvServer } from '../server/server';
import { type CliIo, defineCommand } from './command';
import { withInputErrors } from './inputErrors';
import { cliPythonCandidates } from './train';

/**
 * The documents of `--documents FILE`: a JSON array, JSON lines (one document per line), or a text file that is one
 * document (its first line the title). A document is a string (`Title\ntext`), `{contents}` or `{title, text}`.
 */
export async function readDocuments(file: string): Promise<ForkDocument[]> {
  const text = await readFile(file, 'utf8');
  const check = (d: unknown, where: string): ForkDocument => {
    if (
      typeof d === 'string' ||
      (d &&
        typeof d === 'object' &&
        (typeof (d as { contents?: unknown }).contents === 'string' ||
          typeof (d as { text?: unknown }).text === 'string'))
    )
      return d as ForkDocument;
    throw new UsageError(`${where}: expected a document: a string, {"contents": …} or {"title": …, "text": …}`);
  };
  const parse = (s: string, where: string): unknown => {
    try {
      return JSON.parse(s);
    } catch (e) {
      throw new UsageError(`${where}: not valid JSON (${(e as Error).message})`);
    }
  };
  if (file.endsWith('.json')) {
    const v = parse(text, file);
    if (!Array.isArray(v)) throw new UsageError(`${file}: expected a JSON array of documents`);
    return v.map((d, i) => check(d, `${file}: [${i}]`));
  }
  if (file.endsWith('.jsonl')) {
    return text
      .split('\n')
      .map((l, i) => [l, i + 1] as const)
      .filter(([l]) => l.trim())
      .map(([l, n]) => check(parse(l, `${file}:${n}`), `${file}:${n}`));
  }
  if (!text.trim()) throw new UsageError(`${file}: empty (a document's first line is its title, the rest its text)`);
  return [text.replace(/\n+$/, '')];
}

/** The fork's Python: `--python` alone when given; else the run's own (run.json `python`) first, as `train --resume`
 * tries it, then the usual candidates. */
async function forkHost(runDir: string, python?: string, io?: CliIo, envUrl?: string): Promise<ForkHost | undefined> {
  const needs = await runNeeds({ runDir, resume: true });
  const runPython = python ? undefined : (await readRun(runDir))?.python;
  const search = await findPython(cliPythonCandidates(python, runPython), needs);
  if (!search.found) {
    io?.err(`${noPythonMessage(search, needs)}\n`);
    return undefined;
  }
  const note = runPythonNote(search, runPython);
  if (note && !note.startsWith('resuming in the Python'))
    io?.err(`note: ${note.replace(/resuming in/, 'forking in')}\n`);
  return new ForkHost({ python: search.found.executable, envUrl });
}

/** Runs `fn` with a fork host, stopping every process it started however `fn` ends (Ctrl-C included). */
async function withForkHost(
  a: { 'run-dir': string; python?: string; 'env-url'?: string },
  io: CliIo,
  fn: (host: ForkHost) => Promise<number>,
): Promise<number> {
  const host = await forkHost(a['run-dir'], a.python, io, a['env-url']);
  if (!host) return 1;
  // Ctrl-C: every process stopped (a policy server still loading its model too), then exit 130; the forks it cut
  // short fail with it, and their errors are not reported as the server's (it did not crash: we stopped it)
  const onSignal = () => void host.stop().then(() => process.exit(130));
  process.once('SIGINT', onSignal);
  try {
    return await fn(host);
  } catch (e) {
    if (host.stopping) return 130;
    if (e instanceof ForkError || e instanceof EnvServerError || e instanceof RunConfigError) {
      io.err(`search-agent-studio: ${e.message}\n`);
      return e instanceof RunConfigError ? 2 : 1;
    }
    throw e;
  } finally {
    process.off('SIGINT', onSignal);
    await host.stop();
  }
}

const num = (x: number | null | undefined) => (typeof x === 'number' ? x.toFixed(3) : '–');

function samplingOf(a: { samples?: number; greedy?: boolean }): Pick<ForkOptions, 'samples' | 'greedy'> {
  if (a.samples !== undefined && (!Number.isInteger(a.samples) || a.samples < 1))
    throw new UsageError(`--samples must be a positive integer, got ${a.samples}`);
  if (a.samples !== undefined && a.greedy) throw new UsageError('--samples and --greedy exclude each other');
  return a.samples !== undefined ? { samples: a.samples, greedy: false } : { greedy: true };
}

/** What `fork --json` prints of a continuation: exactly the issue's shape. */
const jsonOf = (c: Continuation) => ({
  response: c.response,
  answer: c.answer,
  reward: c.reward,
  diverges_at: c.diverges_at,
  tokens: c.tokens,
});

export const forkCommand = defineCommand({
  command: 'fork <run-dir> <rollout-id>',
  describe:
    "continue a recorded rollout from generation turn K with the run's policy, the observation before it as it was or edited (docs/fork.md)",
  builder: (y) =>
    y
      .positional('run-dir', { type: 'string', demandOption: true, describe: 'the run directory' })
      .positional('rollout-id', {
        type: 'string',
        demandOption: true,
        describe: "the rollout's id (the inspector's id column)",
      })
      .option('turn', {
        type: 'number',
        demandOption: true,
        describe: 'the generation turn to fork at (from 1); an edit replaces the observation before it',
      })
      .option('checkpoint', {
        type: 'string',
        describe:
          "step-NNNNNN, initial-model (a TRL run's step 0) or a checkpoint directory (default: the checkpoint that produced the rollout, else the latest before it)",
      })
      .option('query', { type: 'string', describe: 're-run the search before turn K with this query' })
      .option('documents', {
        type: 'string',
        describe:
          "replace that search's documents: a .json array, .jsonl lines, or a text file (one document, first line its title)",
      })
      .option('samples', { type: 'number', describe: "N sampled continuations at the run's temperature" })
      .option('greedy', { type: 'boolean', describe: 'one greedy continuation (the default)' })
      .option('retriever-url', {
        type: 'string',
        describe: "another Search-R1-compatible retriever for the fork's searches (the reward stays the run's)",
      })
      .option('env-url', {
        type: 'string',
        describe: "an env server already serving the run's reward module (default: one started from the run's config)",
      })
      .option('python', { type: 'string', describe: "the trainer's Python (the only one tried)" })
      .option('json', {
        type: 'boolean',
        default: false,
        describe: 'print {"continuations": [{response, answer, reward, diverges_at, tokens}]}',
      })
      .conflicts('query', 'documents')
      .example(
        '$0 fork runs/demo-1 run:val:2:0:0 --turn 2 --documents better.txt',
        'what if the first search had returned better.txt?',
      ),
  run: async (a, io) =>
    withInputErrors(io, async () => {
      if (!Number.isInteger(a.turn) || a.turn < 1)
        throw new UsageError(`--turn must be an integer ≥ 1 (generation turns count from 1), got ${a.turn}`);
      const sampling = samplingOf(a);
      const documents = a.documents !== undefined ? await readDocuments(a.documents) : undefined;
      const runDir = a['run-dir'];
      const record = await findRollout(runDir, a['rollout-id']).catch((e) => {
        throw e instanceof ForkError ? new UsageError(e.message) : e;
      });
      const options: ForkOptions = {
        turn: a.turn,
        checkpoint: a.checkpoint,
        query: a.query,
        documents,
        retrieverUrl: a['retriever-url'],
        ...sampling,
      };
      // what would fail only once the servers are up (seconds to minutes): a usage error now
      const problem = forkRequestProblem(record, options);
      if (problem) throw new UsageError(problem);
      await checkpointOrUsage(runDir, a.checkpoint, record);
      return withForkHost({ 'run-dir': runDir, python: a.python, 'env-url': a['env-url'] }, io, async (host) => {
        const r = await host.fork(runDir, record, options);
        if (a.json) {
          io.out(`${JSON.stringify({ continuations: r.continuations.map(jsonOf) })}\n`);
          return 0;
        }
        io.out(
          `${record.id} forked at turn ${a.turn} from ${r.checkpoint}${a.query !== undefined ? ' (query edited)' : documents ? ' (documents edited)' : ''}\n`,
        );
        io.out(
          `  recorded        reward ${num(record.reward)}  answer ${JSON.stringify(trajectoryFacts(record).answer)}\n`,
        );
        r.continuations.forEach((c, k) => {
          const where =
            c.diverges_at === null ? 'identical to the recorded rollout' : `diverges at token ${c.diverges_at}`;
          io.out(
            `  continuation ${k + 1}  reward ${num(c.reward)}  answer ${JSON.stringify(c.answer)}  finish ${c.finish}  ${where}\n`,
          );
          if (c.diverges_at !== null)
            io.out(`    … ${c.tokens.text.slice(c.diverges_at).join('').slice(0, 400).replace(/\n/g, '⏎')}\n`);
        });
        return 0;
      });
    }),
});

/**
 * `--checkpoint` checked before any server starts (a usage error: the checkpoints the run has); without one, the
 * rollout's own (`record`; none at or before its step: a usage error suggesting --checkpoint).
 */
async function checkpointOrUsage(runDir: string, checkpoint: string | undefined, record?: Rollout): Promise<void> {
  try {
    if (checkpoint !== undefined) await resolveCheckpoint(runDir, checkpoint);
    else if (record) {
      const checkpoints = await listCheckpoints(runDir);
      if (!defaultCheckpoint(checkpoints, record))
        throw new UsageError(noCheckpointMessage(runDir, checkpoints, record));
    }
  } catch (e) {
    throw e instanceof ForkError ? new UsageError(e.message) : e;
  }
}

/**
 * A row of `whatif`: the rollout forked at turn 1, greedy, from one checkpoint, with the run's own retriever
 * (`before`) and with the other one (`after`) — the same decoding, so the two differ only in the retriever; the
 * recorded (sampled) rollout's reward beside them.
 */
export interface WhatIfRow {
  id: string;
  step: number | null;
  reward_recorded: number | null;
  reward_before: number | null;
  reward_after: number | null;
  answer_before: string | null;
  answer_after: string | null;
  searches_before: number | null;
  searches_after: number | null;
  /** Where the fork with the other retriever first differs from the one with the run's (null: identical). */
  diverges_at: number | null;
  error?: string;
}

/** The arms of `whatif --ablate`: the run's own retriever, none (every search returns nothing), a random one. */
export const ABLATION_ARMS = ['run', 'empty', 'random'] as const;
export type AblationArm = (typeof ABLATION_ARMS)[number];

export interface AblationRow {
  id: string;
  step: number | null;
  reward_before: number | null;
  /** Per arm: the continuation's reward, answer and searches (or the fork's error). */
  arms: Record<AblationArm, { reward: number | null; answer: string | null; searches: number | null; error?: string }>;
}

/** Most documents the random retriever draws from (a reservoir sample of a bigger corpus). */
const RANDOM_POOL = 10_000;

/**
 * The random retriever's documents: a reservoir sample of the run's corpus when its config names one (the demo's,
 * or a BM25 corpus), else the documents the run's recorded searches returned (an index, dense or remote retriever).
 */
async function randomPool(
  runDir: string,
  records: readonly Rollout[],
): Promise<{ pool: RetrievedDocument[]; from: string }> {
  const loaded = await loadRunDirConfig(runDir).catch(() => undefined);
  const r = (loaded?.config.retriever ?? { kind: 'demo' }) as { kind?: string; corpus?: string };
  const corpus =
    r.kind === 'demo'
      ? r.corpus
        ? resolveConfigPath(r.corpus, loaded!.base)
        : demoCorpusPath()
      : r.kind === 'bm25' && r.corpus
        ? resolveConfigPath(r.corpus, loaded!.base)
        : undefined;
  const pool: RetrievedDocument[] = [];
  if (corpus) {
    let seen = 0;
    let x = 1;
    for await (const d of readCorpus(corpus)) {
      seen++;
      if (pool.length < RANDOM_POOL) pool.push(d);
      else {
        x = (Math.imul(x, 48271) >>> 0) % 2147483647; // a seeded reservoir: the same pool every time
        const j = x % seen;
        if (j < RANDOM_POOL) pool[j] = d;
      }
    }
    if (pool.length) return { pool, from: corpus };
  }
  const seenIds = new Set<string>();
  for (const rec of records) {
    const parsed = parseResponse(rec.response, rolloutContext(rec));
    for (const seg of parsed.segments) {
      if (seg.kind !== 'information') continue;
      for (const d of documentsOf(parsed, seg)) {
        const contents = `${d.title}\n${d.text}`;
        if (seenIds.has(contents)) continue;
        seenIds.add(contents);
        pool.push({ id: `recorded-${pool.length + 1}`, contents });
      }
    }
  }
  return { pool, from: "the documents the run's recorded searches returned" };
}

/** The empty and the random retriever, each behind an env server of its own on loopback (its /retrieve only). */
async function ablationRetrievers(
  runDir: string,
  records: readonly Rollout[],
): Promise<{ urls: Record<'empty' | 'random', string>; from: string; size: number; close(): Promise<void> }> {
  const { pool, from } = await randomPool(runDir, records);
  if (!pool.length)
    throw new UsageError(
      `${runDir}: no documents for the random retriever (no corpus in the run's config, and no recorded search returned any)`,
    );
  const servers: EnvServer[] = [
    await startEnvServer({ version: VERSION, retriever: new NullRetriever() }),
    await startEnvServer({ version: VERSION, retriever: new RandomRetriever(pool) }),
  ];
  const url = (s: EnvServer) => `http://${ENV_SERVER_HOST}:${s.port}`;
  return {
    urls: { empty: url(servers[0]!), random: url(servers[1]!) },
    from,
    size: pool.length,
    close: async () => void (await Promise.all(servers.map((x) => x.close()))),
  };
}

export const whatifCommand = defineCommand({
  command: 'whatif <run-dir>',
  describe:
    "fork every rollout an inspector filter selects at turn 1 with another retriever: reward before and after (how many failures would a better retriever fix?); --ablate: with the run's retriever, none and a random one (what did the policy learn to use?)",
  builder: (y) =>
    y
      .positional('run-dir', { type: 'string', demandOption: true, describe: 'the run directory' })
      .option('retriever-url', {
        type: 'string',
        describe: 'the other Search-R1-compatible retriever (POST /retrieve)',
      })
      .option('ablate', {
        type: 'boolean',
        default: false,
        describe:
          "fork each rollout three ways: the run's own retriever, an empty one (no documents) and a random one (documents of the run's corpus whatever the query)",
      })
      .option('step', { type: 'number', describe: 'only rollouts of this step' })
      .option('filter', {
        type: 'string',
        describe:
          "the inspector's filter language (docs/inspector.md); default reward == 0 && searches >= 1 (with --ablate: searches >= 1)",
      })
      .option('limit', { type: 'number', default: 50, describe: 'fork at most this many rollouts (an integer ≥ 1)' })
      .option('checkpoint', {
        type: 'string',
        describe: "step-NNNNNN, initial-model or a checkpoint directory (default: each rollout's own)",
      })
      .option('env-url', {
        type: 'string',
        describe: "an env server already serving the run's reward module (default: one started from the run's config)",
      })
      .option('python', { type: 'string', describe: "the trainer's Python (the only one tried)" })
      .option('json', {
        type: 'boolean',
        default: false,
        describe:
          'print {"rows": [{id, step, reward_recorded, reward_before, reward_after, answer_before, answer_after, searches_before, searches_after, diverges_at, error?}], "summary": {…}} (with --ablate: rows with arms {run, empty, random})',
      })
      .example(
        '$0 whatif runs/demo-1 --ablate --checkpoint step-000300 --filter \'split == "val"\'',
        "held-out reward with the run's retriever, with none, and with random documents",
      ),
  run: async (a, io) =>
    withInputErrors(io, async () => {
      if (!a.ablate === !a['retriever-url'])
        throw new UsageError(
          'name the other retriever (--retriever-url URL) or ask for the ablation (--ablate), one of the two',
        );
      const given = (x: number) => (Number.isNaN(x) ? 'something that is not a number' : String(x));
      if (!Number.isInteger(a.limit) || a.limit < 1)
        throw new UsageError(`--limit must be an integer ≥ 1, got ${given(a.limit)}`);
      if (a.step !== undefined && (!Number.isInteger(a.step) || a.step < 0))
        throw new UsageError(`--step must be a step number (an integer ≥ 0), got ${given(a.step)}`);
      const badUrl = a['retriever-url'] !== undefined ? retrieverUrlProblem(a['retriever-url']) : undefined;
      if (badUrl) throw new UsageError(badUrl);
      // a checkpoint the run lacks fails every fork: said once, before anything starts
      await checkpointOrUsage(a['run-dir'], a.checkpoint);
      const userFilter = a.filter ?? (a.ablate ? 'searches >= 1' : 'reward == 0 && searches >= 1');
      const filter = [a.step !== undefined ? `step == ${Number(a.step)}` : '', userFilter ? `(${userFilter})` : '']
        .filter(Boolean)
        .join(' && ');
      const store = await RolloutStore.open(a['run-dir']);
      let records: Rollout[] = [];
      try {
        const table = new RolloutTable();
        await table.extend(store);
        let view: Int32Array | undefined;
        try {
          view = table.query({ filter });
        } catch (e) {
          if (e instanceof FilterError)
            throw new UsageError(`--filter: ${e.message} (at ${e.start}..${e.end} of ${JSON.stringify(filter)})`);
          throw e;
        }
        const picked = Array.from(view ?? []).slice(0, a.limit);
        records = (await Promise.all(picked.map((i) => store.row(i))))
          .map((r) => r?.record)
          .filter((r): r is Rollout => r !== undefined);
      } finally {
        await store.close();
      }
      if (a.ablate) return ablate(a, records, filter, io);
      const rows: WhatIfRow[] = [];
      const code = await withForkHost(
        { 'run-dir': a['run-dir'], python: a.python, 'env-url': a['env-url'] },
        io,
        async (host) => {
          for (const record of records) {
            const row: WhatIfRow = {
              id: record.id,
              step: record.step ?? null,
              reward_recorded: record.reward ?? null,
              reward_before: null,
              reward_after: null,
              answer_before: null,
              answer_after: null,
              searches_before: null,
              searches_after: null,
              diverges_at: null,
            };
            try {
              // before and after: greedy forks from the same checkpoint, so they differ in the retriever alone (the
              // recorded rollout was sampled: against it, a change would be the decoding's as much as the retriever's)
              const fork = (retrieverUrl?: string) =>
                host
                  .fork(a['run-dir'], record, { turn: 1, checkpoint: a.checkpoint, retrieverUrl, greedy: true })
                  .then((r) => r.continuations[0]!);
              const before = await fork();
              const after = await fork(a['retriever-url']);
              Object.assign(row, {
                reward_before: before.reward,
                reward_after: after.reward,
                answer_before: before.answer,
                answer_after: after.answer,
                searches_before: before.searches,
                searches_after: after.searches,
                diverges_at: divergence(before.tokens.ids, after.tokens.ids),
              });
            } catch (e) {
              if (!(e instanceof ForkError) || host.stopping) throw e;
              row.error = e.message;
            }
            rows.push(row);
            if (!a.json) io.err(`forked ${rows.length}/${records.length}\r`);
          }
          return 0;
        },
      );
      if (code) return code;
      const done = rows.filter((r) => r.error === undefined);
      const delta = (r: WhatIfRow) => (r.reward_after ?? 0) - (r.reward_before ?? 0);
      const summary = {
        filter,
        rollouts: rows.length,
        failed: rows.length - done.length,
        improved: done.filter((r) => delta(r) > 1e-9).length,
        worsened: done.filter((r) => delta(r) < -1e-9).length,
        unchanged: done.filter((r) => Math.abs(delta(r)) <= 1e-9).length,
        mean_recorded: mean(done.map((r) => r.reward_recorded ?? 0)),
        mean_before: mean(done.map((r) => r.reward_before ?? 0)),
        mean_after: mean(done.map((r) => r.reward_after ?? 0)),
      };
      // a fork that failed is a failed command (exit 1), its rows printed all the same
      const exit = summary.failed ? 1 : 0;
      if (a.json) {
        io.out(`${JSON.stringify({ rows, summary })}\n`);
        return exit;
      }
      io.out(
        `${rows.length} rollouts of ${a['run-dir']} where ${filter}, forked at turn 1 (greedy, checkpoint: ${a.checkpoint ?? "each rollout's own"}) with the run's retriever (before) and with ${a['retriever-url']} (after)\n`,
      );
      io.out(
        `  ${'id'.padEnd(28)} ${'recorded'.padStart(8)} ${'before'.padStart(7)} ${'after'.padStart(7)} ${'searches'.padStart(8)}  answer before → after\n`,
      );
      for (const r of rows)
        io.out(
          r.error
            ? `  ${r.id.padEnd(28)} ${num(r.reward_recorded).padStart(8)} ${'error'.padStart(7)} ${'error'.padStart(7)} ${''.padStart(8)}  ${r.error}\n`
            : `  ${r.id.padEnd(28)} ${num(r.reward_recorded).padStart(8)} ${num(r.reward_before).padStart(7)} ${num(r.reward_after).padStart(7)} ${`${r.searches_before} → ${r.searches_after}`.padStart(8)}  ${JSON.stringify(r.answer_before)} → ${JSON.stringify(r.answer_after)}\n`,
        );
      io.out(
        `improved ${summary.improved}, worsened ${summary.worsened}, unchanged ${summary.unchanged}${summary.failed ? `, failed ${summary.failed}` : ''}; mean reward ${num(summary.mean_before)} → ${num(summary.mean_after)} (mean recorded ${num(summary.mean_recorded)})\n`,
      );
      return exit;
    }),
});

/** The first index where two token sequences differ (the shorter one's length when one extends the other); null: equal. */
function divergence(a: readonly number[], b: readonly number[]): number | null {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? null : n;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((s, x) => s + x, 0) / xs.length : null);

/**
 * `whatif --ablate`: each rollout forked at turn 1, greedy, from the same checkpoint, with the run's retriever, an
 * empty one and a random one; the mean reward of each arm, and how much of the reward the retrieval carries
 * (`reliance`: run − empty; `relevance`: run − random — what the documents' content, not their presence, is worth).
 */
async function ablate(
  a: { 'run-dir': string; python?: string; 'env-url'?: string; checkpoint?: string; json: boolean },
  records: Rollout[],
  filter: string,
  io: CliIo,
): Promise<number> {
  const retrievers = await ablationRetrievers(a['run-dir'], records);
  const rows: AblationRow[] = [];
  try {
    const code = await withForkHost(
      { 'run-dir': a['run-dir'], python: a.python, 'env-url': a['env-url'] },
      io,
      async (host) => {
        for (const record of records) {
          const row: AblationRow = {
            id: record.id,
            step: record.step ?? null,
            reward_before: record.reward ?? null,
            arms: {} as AblationRow['arms'],
          };
          for (const arm of ABLATION_ARMS) {
            try {
              const { continuations } = await host.fork(a['run-dir'], record, {
                turn: 1,
                checkpoint: a.checkpoint,
                greedy: true,
                ...(arm === 'run' ? {} : { retrieverUrl: retrievers.urls[arm] }),
              });
              const c = continuations[0]!;
              row.arms[arm] = { reward: c.reward, answer: c.answer, searches: c.searches };
            } catch (e) {
              if (!(e instanceof ForkError) || host.stopping) throw e;
              row.arms[arm] = { reward: null, answer: null, searches: null, error: e.message };
            }
          }
          rows.push(row);
          if (!a.json) io.err(`forked ${rows.length}/${records.length} three ways\r`);
        }
        return 0;
      },
    );
    if (code) return code;
  } finally {
    await retrievers.close();
  }
  const done = rows.filter((r) => ABLATION_ARMS.every((k) => r.arms[k].error === undefined));
  const armMean = (k: AblationArm) => mean(done.map((r) => r.arms[k].reward ?? 0));
  const m = { run: armMean('run'), empty: armMean('empty'), random: armMean('random') };
  const summary = {
    filter,
    checkpoint: a.checkpoint ?? "each rollout's own",
    rollouts: rows.length,
    failed: rows.length - done.length,
    random_pool: { documents: retrievers.size, from: retrievers.from },
    mean_recorded: mean(done.map((r) => r.reward_before ?? 0)),
    mean: m,
    searches: {
      run: mean(done.map((r) => r.arms.run.searches ?? 0)),
      empty: mean(done.map((r) => r.arms.empty.searches ?? 0)),
      random: mean(done.map((r) => r.arms.random.searches ?? 0)),
    },
    reliance: m.run === null || m.empty === null ? null : m.run - m.empty,
    relevance: m.run === null || m.random === null ? null : m.run - m.random,
  };
  const exit = summary.failed ? 1 : 0;
  if (a.json) {
    io.out(`${JSON.stringify({ rows, summary })}\n`);
    return exit;
  }
  io.out(
    `${rows.length} rollouts of ${a['run-dir']} where ${filter}, forked at turn 1 (greedy, checkpoint: ${summary.checkpoint}) three ways\n`,
  );
  io.out(
    `  ${'id'.padEnd(28)} ${'recorded'.padStart(8)} ${'run'.padStart(7)} ${'empty'.padStart(7)} ${'random'.padStart(7)}\n`,
  );
  for (const r of rows) {
    io.out(
      `  ${r.id.padEnd(28)} ${num(r.reward_before).padStart(8)} ${ABLATION_ARMS.map((k) => (r.arms[k].error ? 'error' : num(r.arms[k].reward)).padStart(7)).join(' ')}\n`,
    );
    for (const k of ABLATION_ARMS) if (r.arms[k].error) io.out(`    ${k}: ${r.arms[k].error}\n`);
  }
  io.out(
    `mean reward: run's retriever ${num(m.run)}, empty ${num(m.empty)}, random ${num(m.random)} (random documents: ${retrievers.size} from ${retrievers.from})\n`,
  );
  io.out(
    `reliance on retrieval (run − empty) ${num(summary.reliance)}; on relevant documents (run − random) ${num(summary.relevance)}; searches per rollout ${num(summary.searches.run)} / ${num(summary.searches.empty)} / ${num(summary.searches.random)}${summary.failed ? `; ${summary.failed} failed` : ''}\n`,
  );
  return exit;
}
