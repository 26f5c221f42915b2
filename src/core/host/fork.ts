/**
 * Counterfactual replay, host side (DESIGN §7, docs/fork.md), shared by `search-agent-studio fork|whatif` and the
 * replay panel: the run's env server (its reward module is the run's; it serves later searches unless another
 * retriever is named) and one policy server per run and checkpoint (`python -m search_agent_trainer.fork`, the
 * trainer's own rollout function behind a JSON-lines protocol on stdio), started on first use, reused across forks,
 * and stopped by `ForkHost.stop()`. Every process is spawned with an argument array in its own process group and
 * told our pid, so none outlives us.
 */
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { trainerDir } from '../paths';
import type { Continuation, ForkOptions, ForkResult } from '../protocol/replay';
import type { Rollout } from '../run/format';
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

/** The run's complete checkpoints (those with trainer_state.json, or Hugging Face model directories), by step. */
export async function listCheckpoints(runDir: string): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(join(runDir, 'checkpoints'));
  } catch {
    return [];
  }
  const complete = (n: string) =>
    ['trainer_state.json', 'config.json', join('model', 'config.json')].some((f) =>
      existsSync(join(runDir, 'checkpoints', n, f)),
    );
  return names.filter((n) => /^step-\d+$/.test(n) && complete(n)).sort((a, b) => stepOf(a) - stepOf(b));
}

const stepOf = (name: string) => Number(name.slice('step-'.length));

/**
 * The step whose weights produced a rollout: a held-out rollout of step k was generated after update k (the
 * checkpoint of step k); a training rollout of step k before it (the checkpoint of step k − 1).
 */
export function producingStep(record: Pick<Rollout, 'step' | 'split'>): number {
  const step = record.step ?? 0;
  return record.split === 'train' ? Math.max(0, step - 1) : step;
}

/** The checkpoint that produced the rollout, else the latest one before it, else the first one (undefined: none). */
export function defaultCheckpoint(checkpoints: string[], record: Pick<Rollout, 'step' | 'split'>): string | undefined {
  const want = producingStep(record);
  const before = checkpoints.filter((c) => stepOf(c) <= want);
  return before.length ? before[before.length - 1] : checkpoints[0];
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

/** A rollout of a run by id (the first with that id, in file order). */
export async function findRollout(runDir: string, id: string): Promise<Rollout> {
  // read without token arrays (a token store then reads only its rollouts.parquet), then the one found whole
  for await (const row of streamRollouts(runDir, undefined, {}, 'none')) {
    if (row.record?.id !== id) continue;
    const whole = await readPartRow(row.file, row.line);
    if (whole?.record) return whole.record;
  }
  throw new ForkError(`${runDir}: no rollout with id ${JSON.stringify(id)}`);
}

/** One policy server (`python -m search_agent_trainer.fork`): requests go out on stdin, replies come back by id. */
export class PolicyProcess {
  private next = 1;
  private readonly pending = new Map<number, { resolve: (c: Continuation[]) => void; reject: (e: Error) => void }>();

  private constructor(
    readonly child: Child,
    readonly checkpoint: string,
  ) {
    void child.exited.then((exit) => {
      for (const p of this.pending.values())
        p.reject(
          new ForkError(`the policy server exited (${exit.signal ?? `code ${exit.code}`}): ${child.stderr.text(6)}`),
        );
      this.pending.clear();
    });
  }

  get pid(): number {
    return this.child.pid;
  }

  /** Starts it and waits for its `ready` line (it loads the model: minutes for a big one). */
  static async start(o: {
    python: string;
    runDir: string;
    checkpoint: string;
    envUrl: string;
    onLog?: LogSink;
    timeoutMs?: number;
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
    const outcome = await Promise.race([
      started,
      child.exited.then((e) => ({
        error: `it exited (${e.signal ?? `code ${e.code}`}) before it was ready:\n${child.stderr.text(8)}`,
      })),
      new Promise<{ error: string }>(
        (r) => (timer = setTimeout(() => r({ error: 'it was not ready in time' }), o.timeoutMs ?? 600_000)),
      ),
    ]);
    clearTimeout(timer);
    if (outcome.error) {
      await child.stop(2_000);
      throw new ForkError(`the policy server for ${o.checkpoint}: ${outcome.error}`);
    }
    proc = new PolicyProcess(child, o.checkpoint);
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

  constructor(private readonly options: ForkHostOptions) {}

  private async envUrl(runDir: string): Promise<string> {
    if (this.options.envUrl) return this.options.envUrl;
    let s = this.servers.get(runDir);
    if (!s) {
      s = loadRunDirConfig(runDir).then((loaded) =>
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

  /** The policy server of a run at a checkpoint (started once, restarted if it has exited). */
  async policy(runDir: string, checkpoint: string): Promise<PolicyProcess> {
    if (this.stopped) throw new ForkError('the fork host has been stopped');
    const key = `${resolve(runDir)}\n${checkpoint}`;
    const existing = this.policies.get(key);
    if (existing) {
      const p = await existing.catch(() => undefined);
      if (p?.child.running) return p;
      this.policies.delete(key);
    }
    const started = this.envUrl(runDir).then((envUrl) =>
      PolicyProcess.start({
        python: this.options.python,
        runDir: resolve(runDir),
        checkpoint,
        envUrl,
        onLog: this.options.onLog,
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
    if (!checkpoint) throw new ForkError(`${runDir}: no checkpoint to fork from (checkpoints/step-NNNNNN)`);
    if (!checkpoints.includes(checkpoint))
      throw new ForkError(
        `--checkpoint ${checkpoint}: not a complete checkpoint of ${runDir} (${checkpoints.join(', ') || 'none'})`,
      );
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
    const policies = [...this.policies.values()];
    const servers = [...this.servers.values()];
    this.policies.clear();
    this.servers.clear();
    await Promise.all(policies.map(async (p) => (await p.catch(() => undefined))?.stop()));
    await Promise.all(servers.map(async (s) => (await s.catch(() => undefined))?.child.stop(3_000)));
  }
}
