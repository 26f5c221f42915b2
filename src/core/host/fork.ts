/**
 * Counterfactual replay, host side (DESIGN §7, docs/fork.md), shared by `search-agent-studio fork|whatif` and the
 * replay panel: the run's env server (its reward module is the run's; it serves later searches unless another
 * retriever is named) and one policy server per run and checkpoint (`python -m search_agent_trainer.fork`, the
 * trainer's own rollout function behind a JSON-lines protocol on stdio), started on first use, reused across forks,
 * and stopped by `ForkHost.stop()`. Every process is spawned with an argument array in its own process group and
 * told our pid, so none outlives us.
 */
import { existsSync, statSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { trainerDir } from '../paths';
import type { Continuation, ForkOptions, ForkResult } from '../protocol/replay';
import { formatIssue, type LocatedIssue, type Rollout } from '../run/format';
import { readPartRow, streamRollouts } from '../store/rollouts';
import {
  type Child,
  type EnvServerProcess,
  type LogSink,
  type ServerLauncher,
  spawnChild,
  startEnvServerProcess,
} from './processes';
import { envServerArgs, loadRunDirConfig } from './runConfig';

export class ForkError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ForkError';
  }
}

/**
 * A TRL run's step-0 weights: the random model it drew once (`model.random_init`) and trained from, a Hugging Face
 * model directory beside `checkpoints/` (TRL saves no step-000000). Listed as the step-0 checkpoint of such a run.
 */
export const INITIAL_MODEL = 'initial-model';

/**
 * The run's complete checkpoints (those with trainer_state.json, or Hugging Face model directories), by step; a run
 * without a step-000000 whose `initial-model/` holds a model (TRL) has that first, as its step 0.
 */
export async function listCheckpoints(runDir: string): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(join(runDir, 'checkpoints'));
  } catch {
    names = [];
  }
  const complete = (n: string) =>
    ['trainer_state.json', 'config.json', join('model', 'config.json')].some((f) =>
      existsSync(join(runDir, 'checkpoints', n, f)),
    );
  const steps = names.filter((n) => /^step-\d+$/.test(n) && complete(n)).sort((a, b) => stepOf(a) - stepOf(b));
  const initial = existsSync(join(runDir, INITIAL_MODEL, 'config.json')) && !steps.some((n) => stepOf(n) === 0);
  return initial ? [INITIAL_MODEL, ...steps] : steps;
}

/** The step of a checkpoint name of listCheckpoints (initial-model: 0). */
export const stepOf = (name: string) => (name === INITIAL_MODEL ? 0 : Number(name.slice('step-'.length)));

/** The directory of a checkpoint name of listCheckpoints. */
export const checkpointDir = (runDir: string, name: string) =>
  resolve(name === INITIAL_MODEL ? join(runDir, INITIAL_MODEL) : join(runDir, 'checkpoints', name));

/**
 * What `--checkpoint` names: one of the run's checkpoints by name (step-NNNNNN, initial-model), else a checkpoint
 * directory (a builtin one with trainable.pt, or a Hugging Face model directory), a relative path taken from the
 * user's working directory. Returns the name to show and the absolute directory the trainer loads; throws a
 * ForkError naming the checkpoints the run has when it is neither.
 */
export async function resolveCheckpoint(runDir: string, checkpoint: string): Promise<{ name: string; dir: string }> {
  const checkpoints = await listCheckpoints(runDir);
  if (checkpoints.includes(checkpoint)) return { name: checkpoint, dir: checkpointDir(runDir, checkpoint) };
  const dir = resolve(checkpoint);
  const isDir = (() => {
    try {
      return statSync(dir).isDirectory();
    } catch {
      return false;
    }
  })();
  if (isDir && ['trainable.pt', 'config.json', join('model', 'config.json')].some((f) => existsSync(join(dir, f))))
    return { name: checkpoint, dir };
  throw new ForkError(
    `--checkpoint ${checkpoint}: neither a complete checkpoint of ${runDir} (${checkpoints.join(', ') || 'none'}) nor a checkpoint directory (trainable.pt, or a Hugging Face model's config.json)`,
  );
}

/**
 * The step whose weights produced a rollout: a held-out rollout of step k was generated after update k (the
 * checkpoint of step k); a training rollout of step k before it (the checkpoint of step k − 1).
 */
export function producingStep(record: Pick<Rollout, 'step' | 'split'>): number {
  const step = record.step ?? 0;
  return record.split === 'train' ? Math.max(0, step - 1) : step;
}

/**
 * The checkpoint that produced the rollout, else the latest one before it; undefined when the run has none at or
 * before that step — never a later one (weights trained after the rollout would not be the policy that wrote it).
 */
export function defaultCheckpoint(checkpoints: string[], record: Pick<Rollout, 'step' | 'split'>): string | undefined {
  const want = producingStep(record);
  const before = checkpoints.filter((c) => stepOf(c) <= want);
  return before.length ? before[before.length - 1] : undefined;
}

/** "rollout R (train step N) was produced by the weights of step W": the start of both sentences below. */
function producedBy(record: Pick<Rollout, 'id' | 'step' | 'split'>): string {
  return `rollout ${record.id} (${record.split ?? 'train'} step ${record.step ?? 0}) was produced by the weights of step ${producingStep(record)}`;
}

/** Why a rollout has no default checkpoint to fork from (defaultCheckpoint undefined), suggesting --checkpoint. */
export function noCheckpointMessage(runDir: string, checkpoints: string[], record: Rollout): string {
  return checkpoints.length
    ? `${producedBy(record)}, and ${runDir} has no checkpoint at or before step ${producingStep(record)} (it has ${checkpoints.join(', ')}); name one with --checkpoint (a later one is not the policy that wrote it)`
    : `${runDir}: no checkpoint to fork from (checkpoints/step-NNNNNN)`;
}

/**
 * What the editor's fork panel offers for a rollout: the run's checkpoints, the default one, and when there is none
 * at or before the rollout's producing step, why (`noDefault`) — the panel then preselects nothing rather than the
 * first checkpoint, which would be a later policy than the one that wrote the rollout. `later`: the checkpoints
 * after that step (labelled so in the panel: a fork from one is allowed, knowingly).
 */
export function forkCheckpointChoices(
  checkpoints: string[],
  record: Pick<Rollout, 'id' | 'step' | 'split'>,
): { checkpoints: string[]; defaultCheckpoint?: string; noDefault?: string; later: string[] } {
  const want = producingStep(record);
  const chosen = defaultCheckpoint(checkpoints, record);
  const later = checkpoints.filter((c) => stepOf(c) > want);
  return {
    checkpoints,
    ...(chosen
      ? { defaultCheckpoint: chosen }
      : {
          noDefault: `${producedBy(record)}, and this run has no checkpoint at or before it: a later one is not the policy that wrote it — choose one knowingly`,
        }),
    later,
  };
}

/** Generation turns of a record with tokens (runs of `generated` tokens); 0 without tokens. */
export function generationTurns(record: Rollout): number {
  const roles = record.tokens?.role ?? [];
  let turns = 0;
  roles.forEach((r, i) => {
    if (r === 'generated' && roles[i - 1] !== 'generated') turns++;
  });
  return turns;
}

/** Why a retriever URL is not one (undefined: it is an http(s) URL). */
export function retrieverUrlProblem(url: string): string | undefined {
  let ok = false;
  try {
    ok = ['http:', 'https:'].includes(new URL(url).protocol);
  } catch {
    ok = false;
  }
  return ok
    ? undefined
    : `--retriever-url ${JSON.stringify(url)}: not an http(s) URL (a Search-R1-compatible retriever, e.g. http://127.0.0.1:8000)`;
}

/**
 * A fork's request that cannot be served, found from the record before any server starts (the policy server checks
 * the same): a turn past the rollout's generation turns, an edit at turn 1 or of a turn that made no search (the
 * observation before turn K holds no `retrieved` tokens), a retriever URL that is not an http(s) URL.
 */
export function forkRequestProblem(record: Rollout, o: ForkOptions): string | undefined {
  if (!record.tokens?.ids)
    return `rollout ${record.id}: no token ids recorded; only rollouts recorded with tokens can be forked`;
  const turns = generationTurns(record);
  if (o.turn > turns)
    return `--turn ${o.turn}: rollout ${record.id} has ${turns} generation turn${turns === 1 ? '' : 's'} (1..${turns})`;
  if (o.retrieverUrl !== undefined && retrieverUrlProblem(o.retrieverUrl)) return retrieverUrlProblem(o.retrieverUrl);
  if (o.query === undefined && o.documents === undefined) return undefined;
  if (o.turn < 2)
    return 'an edit (--query, --documents) replaces the observation before turn K: there is none before turn 1 (use --turn 2 or later)';
  const roles = record.tokens?.role ?? [];
  let turn = 0;
  let searched = false;
  for (let i = 0; i < roles.length; i++) {
    if (roles[i] === 'generated' && roles[i - 1] !== 'generated' && ++turn === o.turn) break;
    if (turn === o.turn - 1 && roles[i] === 'retrieved') searched = true;
  }
  return searched
    ? undefined
    : `turn ${o.turn - 1} of rollout ${record.id} made no search: there are no documents before turn ${o.turn} to edit`;
}

/**
 * A rollout of a run by id (the first with that id, in file order). Records that cannot be read are not passed over
 * in silence: when the id is not among the rows read, the error names them (file, line or step, and why) — the
 * rollout may be one of them; when the rollout's own row cannot be read whole (its tokens file cut short), it says so.
 */
export async function findRollout(runDir: string, id: string): Promise<Rollout> {
  const issues: LocatedIssue[] = [];
  // read without token arrays (a token store then reads only its rollouts.parquet), then the one found whole
  for await (const row of streamRollouts(runDir, undefined, {}, 'none')) {
    if (!row.record) {
      issues.push(...row.errors);
      continue;
    }
    if (row.record.id !== id) continue;
    const whole = await readPartRow(row.file, row.line);
    if (whole?.record) return whole.record;
    throw new ForkError(
      `rollout ${JSON.stringify(id)} cannot be read whole: ${whole?.errors.map(formatIssue).join('; ') ?? `${row.file}:${row.line}: gone`}`,
    );
  }
  const unread = issues.length
    ? `; ${issues.length} record${issues.length === 1 ? '' : 's'} could not be read, and it may be one of them: ${issues
        .slice(0, 5)
        .map(formatIssue)
        .join('; ')}${issues.length > 5 ? '; …' : ''}`
    : '';
  throw new ForkError(`${runDir}: no rollout with id ${JSON.stringify(id)}${unread}`);
}

/** One policy server (`python -m search_agent_trainer.fork`): requests go out on stdin, replies come back by id. */
export class PolicyProcess {
  private next = 1;
  private readonly pending = new Map<number, { resolve: (c: Continuation[]) => void; reject: (e: Error) => void }>();

  /** Set by stop(): the forks still pending are then told they were stopped, not that the server crashed. */
  private stopping = false;

  private constructor(
    readonly child: Child,
    readonly checkpoint: string,
  ) {
    void child.exited.then((exit) => {
      for (const p of this.pending.values())
        p.reject(
          new ForkError(
            this.stopping
              ? 'the policy server was stopped'
              : `the policy server exited (${exit.signal ?? `code ${exit.code}`}): ${child.stderr.text(6)}`,
          ),
        );
      this.pending.clear();
    });
  }

  get pid(): number {
    return this.child.pid;
  }

  /**
   * Starts it and waits for its `ready` line (it loads the model: minutes for a big one). `checkpoint`: the directory
   * the trainer loads; `name`: what it is called (default: the directory). `signal` aborts the wait: the child still
   * loading is stopped then, and start rejects.
   */
  static async start(o: {
    python: string;
    runDir: string;
    checkpoint: string;
    name?: string;
    envUrl: string;
    onLog?: LogSink;
    timeoutMs?: number;
    signal?: AbortSignal;
  }): Promise<PolicyProcess> {
    const dir = trainerDir();
    let ready!: (v: { error?: string }) => void;
    const started = new Promise<{ error?: string }>((r) => (ready = r));
    let proc: PolicyProcess | undefined;
    // the child runs in the trainer's directory: a Python named by a relative path is resolved here first
    const python = o.python.includes('/') ? resolve(o.python) : o.python;
    const child = spawnChild(
      'policy server',
      python,
      ['-m', 'search_agent_trainer.fork', '--run-dir', o.runDir, '--checkpoint', o.checkpoint, '--env-url', o.envUrl],
      {
        cwd: dir,
        env: { PYTHONPATH: [dir, process.env.PYTHONPATH].filter(Boolean).join(':'), PYTHONUNBUFFERED: '1' },
        stdin: 'pipe',
        onStdout: (line) => {
          let msg: { event?: string; message?: string; id?: number; continuations?: Continuation[]; error?: string };
          try {
            msg = JSON.parse(line);
          } catch {
            o.onLog?.(line);
            return;
          }
          if (msg.event === 'ready') ready({});
          else if (msg.event === 'error') ready({ error: msg.message });
          else proc?.settle(msg);
        },
        onStderr: o.onLog,
      },
    );
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const stopped = 'it was stopped while it loaded';
    const outcome = await Promise.race([
      started,
      child.exited.then((e) => ({
        error: o.signal?.aborted
          ? stopped
          : `it exited (${e.signal ?? `code ${e.code}`}) before it was ready:\n${child.stderr.text(8)}`,
      })),
      new Promise<{ error: string }>(
        (r) => (timer = setTimeout(() => r({ error: 'it was not ready in time' }), o.timeoutMs ?? 600_000)),
      ),
      // stopped (Ctrl-C, the panel closed) while the model loads: no waiting for the load to finish
      new Promise<{ error: string }>((r) => {
        onAbort = () => r({ error: stopped });
        if (o.signal?.aborted) onAbort();
        else o.signal?.addEventListener('abort', onAbort, { once: true });
      }),
    ]);
    clearTimeout(timer);
    if (onAbort) o.signal?.removeEventListener('abort', onAbort);
    const name = o.name ?? o.checkpoint;
    if (outcome.error) {
      await child.stop(2_000);
      throw new ForkError(`the policy server for ${name}: ${outcome.error}`);
    }
    proc = new PolicyProcess(child, name);
    return proc;
  }

  private settle(msg: { id?: number; continuations?: Continuation[]; error?: string }): void {
    const p = msg.id === undefined ? undefined : this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id!);
    if (msg.error !== undefined || !msg.continuations) p.reject(new ForkError(msg.error ?? 'no continuations'));
    else p.resolve(msg.continuations);
  }

  fork(record: Rollout, o: ForkOptions): Promise<Continuation[]> {
    if (!this.child.running) return Promise.reject(new ForkError('the policy server has exited'));
    const id = this.next++;
    const request = {
      id,
      record,
      turn: o.turn,
      query: o.query,
      documents: o.documents,
      samples: o.samples,
      greedy: o.greedy ?? !(o.samples && o.samples > 1),
      retriever_url: o.retrieverUrl,
    };
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.proc.stdin?.write(`${JSON.stringify(request)}\n`);
    });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.child.proc.stdin?.end();
    await this.child.stop(3_000);
  }
}

export interface ForkHostOptions {
  /** A Python with the trainer's requirements (findPython). */
  python: string;
  /** An env server already serving the run (its reward module); default: one started from the run's config. */
  envUrl?: string;
  serverLauncher?: ServerLauncher;
  onLog?: LogSink;
}

/** The processes behind forks: one env server per run, one policy server per run and checkpoint, reused. */
export class ForkHost {
  private readonly servers = new Map<string, Promise<EnvServerProcess>>();
  private readonly policies = new Map<string, Promise<PolicyProcess>>();
  private stopped = false;
  /** Aborted by stop(): policy servers still loading are stopped at once, not awaited. */
  private readonly aborter = new AbortController();

  constructor(private readonly options: ForkHostOptions) {}

  private async envUrl(runDir: string): Promise<string> {
    if (this.options.envUrl) return this.options.envUrl;
    let s = this.servers.get(runDir);
    if (!s) {
      s = loadRunDirConfig(runDir, 'to fork').then((loaded) =>
        startEnvServerProcess(envServerArgs(loaded, { port: 0 }), {
          onLog: this.options.onLog,
          launcher: this.options.serverLauncher,
        }),
      );
      this.servers.set(runDir, s);
      s.catch(() => this.servers.delete(runDir));
    }
    return (await s).url;
  }

  /** Whether stop() has been called (a fork that fails then failed because of it: no error of its own). */
  get stopping(): boolean {
    return this.stopped;
  }

  /**
   * The policy server of a run at a checkpoint (started once, restarted if it has exited): `checkpoint` a name of
   * listCheckpoints or a checkpoint directory (resolveCheckpoint).
   */
  async policy(runDir: string, checkpoint: string): Promise<PolicyProcess> {
    if (this.stopped) throw new ForkError('the fork host has been stopped');
    const key = `${resolve(runDir)}\n${checkpoint}`;
    const existing = this.policies.get(key);
    if (existing) {
      const p = await existing.catch(() => undefined);
      if (p?.child.running) return p;
      this.policies.delete(key);
    }
    const started = Promise.all([this.envUrl(runDir), resolveCheckpoint(runDir, checkpoint)]).then(([envUrl, ckpt]) =>
      PolicyProcess.start({
        python: this.options.python,
        runDir: resolve(runDir),
        checkpoint: ckpt.dir,
        name: ckpt.name,
        envUrl,
        onLog: this.options.onLog,
        signal: this.aborter.signal,
      }),
    );
    this.policies.set(key, started);
    started.catch(() => this.policies.delete(key));
    return started;
  }

  /** Forks `record` (a rollout of the run `runDir`) as `o` says; the checkpoint defaults to the one that produced it. */
  async fork(runDir: string, record: Rollout, o: ForkOptions): Promise<ForkResult> {
    if (!record.tokens?.ids)
      throw new ForkError(
        `rollout ${record.id}: no token ids recorded; only rollouts recorded with tokens can be forked`,
      );
    const checkpoints = await listCheckpoints(runDir);
    const checkpoint = o.checkpoint ?? defaultCheckpoint(checkpoints, record);
    if (!checkpoint) throw new ForkError(noCheckpointMessage(runDir, checkpoints, record));
    await resolveCheckpoint(runDir, checkpoint); // a checkpoint the run lacks: its error, before anything starts
    const policy = await this.policy(runDir, checkpoint);
    return { checkpoint, continuations: await policy.fork(record, o) };
  }

  /** The checkpoints of `runDir` whose policy server has been started (a fork from one of them starts nothing). */
  started(runDir: string): string[] {
    const prefix = `${resolve(runDir)}\n`;
    return [...this.policies.keys()].filter((k) => k.startsWith(prefix)).map((k) => k.slice(prefix.length));
  }

  /** Process ids of the policy servers running now (tests check that none is left). */
  async pids(): Promise<number[]> {
    const all = await Promise.all([...this.policies.values()].map((p) => p.catch(() => undefined)));
    return all.filter((p): p is PolicyProcess => !!p?.child.running).map((p) => p.pid);
  }

  /** Stops every policy server and env server it started. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.aborter.abort();
    const policies = [...this.policies.values()];
    const servers = [...this.servers.values()];
    this.policies.clear();
    this.servers.clear();
    await Promise.all(policies.map(async (p) => (await p.catch(() => undefined))?.stop()));
    await Promise.all(servers.map(async (s) => (await s.catch(() => undefined))?.child.stop(3_000)));
  }
}
