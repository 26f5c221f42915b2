/**
 * The process host of a training run, shared by the extension and the CLI (DESIGN §2): validate the config, check
 * the engine (engines.ts), start the env server and wait for it to listen, start the engine's trainer against it, pass on the trainer's events and logs,
 * and end both cleanly. Stopping is SIGTERM → the trainer finishes its step, checkpoints and exits with status
 * `stopped` → after a grace period the whole process tree is killed. The run directory is the record: whatever
 * happens here, it stays readable and resumable.
 */

import { appendFileSync, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { constants as osConstants } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { trainerDir } from '../paths';
import { checkRunMemory, refuseWhatDoesNotFit } from '../plan/check';
import { probePython } from '../python';
import type { RunEvent, RunJson } from '../run/format';
import { engineHost } from './engines';
import {
  type Child,
  type EnvServerProcess,
  type Exit,
  type LogSink,
  type ServerLauncher,
  spawnChild,
  startEnvServerProcess,
} from './processes';
import { envServerArgs, type LoadedRunConfig, loadRunConfig, loadRunDirConfig, makeNewRunDir } from './runConfig';
import { readRun } from './runs';

export type RunStatus = 'finished' | 'stopped' | 'failed';

export interface RunOutcome {
  status: RunStatus;
  runDir: string;
  /** Last completed step (run.json). */
  step: number;
  exit: Exit;
  /** For `failed`: the trainer's error message and traceback (run.json), else the last lines of its stderr. */
  error?: { message: string; traceback?: string };
  /** `failed` before anything was trained because the config (its data) is invalid: the trainer exited 2, its error
   * names the key. There is nothing to resume. */
  invalidConfig?: boolean;
  /** With `invalidConfig`: the run directory this host's run created held nothing but what the failed start wrote
   * (run.json, events, logs), and was removed — no dead run that looks resumable is left. */
  removed?: boolean;
}

/**
 * A run directory that cannot be started in (exit 2 in the CLI, as a bad config): a new run's that holds something
 * already (another run's checkpoints and metrics would mix with it), or a resumed run's whose trainer is still running.
 */
export class RunDirError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RunDirError';
  }
}

/** What is in a directory besides `except` (the config a run starts from may live in its run directory: the demo's
 * --seed, the no-retrieval check); [] when it does not exist. */
function entriesBesides(dir: string, except: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new RunDirError(`${dir}: cannot be used as the run directory (${(e as Error).message})`);
  }
  return names.filter((n) => resolve(dir, n) !== except);
}

/** Whether a run directory holds only what a start that failed on its config writes: run.json, events.jsonl, an
 * empty metrics.jsonl, logs/ and empty rollouts/ and checkpoints/ (`keep`: the config the run started from). */
function onlyAFailedStart(dir: string, keep: string): boolean {
  const empty = (p: string) => {
    try {
      return statSync(p).isDirectory() ? readdirSync(p).length === 0 : statSync(p).size === 0;
    } catch {
      return true;
    }
  };
  return entriesBesides(dir, keep).every(
    (n) =>
      n === 'run.json' ||
      n === 'events.jsonl' ||
      n === 'logs' ||
      ((n === 'rollouts' || n === 'checkpoints' || n === 'metrics.jsonl') && empty(join(dir, n))),
  );
}

/**
 * The env server's log in <run dir>/logs/server.log (DESIGN §4.2): lines are held until the trainer has made the run
 * directory (the server starts first), then appended; a directory that never came is not made for it.
 */
class ServerLog {
  private pending: string[] = [];
  private ready = false;
  dropped = false;

  constructor(private readonly runDir: string) {}

  line(l: string): void {
    if (this.dropped) return;
    this.pending.push(l);
    if (this.pending.length > 10_000) this.pending.shift();
    this.flush();
  }

  flush(): void {
    if (this.dropped || !this.pending.length) return;
    if (!this.ready) {
      if (!existsSync(join(this.runDir, 'run.json'))) return;
      mkdirSync(join(this.runDir, 'logs'), { recursive: true });
      this.ready = true;
    }
    try {
      appendFileSync(join(this.runDir, 'logs', 'server.log'), this.pending.map((l) => `${l}\n`).join(''));
    } catch {
      /* a log that cannot be written is not the run's failure */
    }
    this.pending = [];
  }
}

export interface RunHostOptions {
  /** A *.run.json to start from (a new run), or nothing with `resume`. */
  config?: string;
  /** The run directory: new runs default to a fresh one under the config's output_dir or `runsParent`. */
  runDir?: string;
  runsParent?: string;
  resume?: boolean;
  /** A Python that imports torch (see findPython). */
  python: string;
  /** veRL's Python (engine verl; the setting searchAgent.verlPythonPath), tried before the config's verl.python. */
  verlPython?: string;
  /** The env server's port (0: any free one). */
  port?: number;
  onEvent?: (event: RunEvent & Record<string, unknown>) => void;
  onTrainerLog?: LogSink;
  onServerLog?: LogSink;
  /** A setting the engine handles its own way (veRL's notes, e.g. "model.dtype fp32: … not mapped"): a warning. */
  onNote?: (note: string) => void;
  /** How to run the env server (tests run it from source); default: this Node with dist/server.js. */
  serverLauncher?: ServerLauncher;
  /** Time the trainer gets to finish its step and checkpoint after SIGTERM. */
  stopGraceMs?: number;
  /** Start a run the memory plan says does not fit (src/core/plan/check.ts). */
  force?: boolean;
  /** The GPU's memory for the plan (default: what the trainer's Python reports for its first GPU, else 80 GiB). */
  gpuMemoryBytes?: number;
  /** The memory check's verdict (one line), when the run was planned or why it was not. */
  onMemoryCheck?: (line: string) => void;
}

/**
 * The run host's memory check: the plan of a Hugging Face run on GPUs against the trainer's GPU (asked of its Python,
 * unless `gpuMemoryBytes`): a run that does not fit is refused (MemoryPlanError, with the changes that would make it
 * fit) unless `force`. Returns what the plan sets for keys the config leaves unset (veRL's offload: PLANNER_KEYS),
 * which the engine launches the run with.
 */
export async function checkRunHostMemory(
  loaded: LoadedRunConfig,
  options: Pick<RunHostOptions, 'python' | 'gpuMemoryBytes' | 'force' | 'onMemoryCheck'>,
): Promise<Record<string, unknown>> {
  const c = loaded.config;
  if (c.model.kind !== 'hf' || c.model.device === 'cpu') return {};
  let cuda: boolean | undefined;
  let gpuMemoryBytes = options.gpuMemoryBytes;
  if (gpuMemoryBytes === undefined) {
    const probe = await probePython(options.python, { timeoutMs: 60_000 });
    cuda = probe.ok ? probe.cuda : undefined;
    gpuMemoryBytes = probe.cudaMemory?.[0];
  }
  const check = checkRunMemory(loaded, { gpuMemoryBytes, cuda });
  options.onMemoryCheck?.(check.line);
  refuseWhatDoesNotFit(check, loaded.file, !!options.force);
  return Object.fromEntries((check.plan?.chosen ?? []).map((x) => [x.key, x.value]));
}

export class RunHost {
  readonly done: Promise<RunOutcome>;
  private stopping = false;

  private constructor(
    readonly runDir: string,
    readonly loaded: LoadedRunConfig,
    readonly server: EnvServerProcess,
    readonly trainer: Child,
    private readonly options: RunHostOptions,
    /** This start made the run directory (it did not exist): a start that fails on its config may remove it. */
    private readonly madeRunDir: boolean,
    private readonly serverLog: ServerLog,
  ) {
    this.done = this.finish();
  }

  get id(): string {
    return basename(this.runDir);
  }

  /**
   * Starts a run; rejects (with nothing left running) when the config is invalid, the run directory cannot be started
   * in (RunDirError: a new run's holds something already, a resumed run's trainer is still running), the engine
   * cannot run in this Python (EngineUnavailableError, saying how to install what it lacks) or the env server cannot
   * start.
   */
  static async start(options: RunHostOptions): Promise<RunHost> {
    let loaded: LoadedRunConfig;
    let runDir: string;
    let made = false;
    if (options.resume) {
      if (!options.runDir) throw new Error('resume needs the run directory');
      runDir = resolve(options.runDir);
      loaded = await loadRunDirConfig(runDir);
      // A second trainer in the same directory would interleave its metrics and checkpoints with the first's.
      const run = await readRun(runDir);
      if (run?.state === 'running')
        throw new RunDirError(
          `${runDir}: the run is still running (trainer pid ${run.pid}); stop it first (Ctrl-C in its terminal, or kill -TERM ${run.pid})`,
        );
    } else {
      if (!options.config) throw new Error('a run config (*.run.json) is needed');
      loaded = await loadRunConfig(options.config);
      if (options.runDir) runDir = resolve(options.runDir);
      else {
        // named and created at once: another run started in the same second takes the next name
        runDir = makeNewRunDir(loaded, options.runsParent ?? resolve('runs'));
        made = true;
      }
      // A new run in a directory that holds something (another run) would mix with it: its metrics appended, its
      // checkpoints taken for this run's by a later resume.
      const there = entriesBesides(runDir, loaded.file);
      if (there.length)
        throw new RunDirError(
          `${runDir}: the run directory exists and is not empty (${there.slice(0, 3).join(', ')}${there.length > 3 ? ', …' : ''}); continue the run there with --resume, or name another --run-dir`,
        );
    }
    const madeRunDir = made || !existsSync(runDir);
    try {
      return await RunHost.launch(runDir, loaded, options, madeRunDir);
    } catch (e) {
      // a directory this start made and nothing ran in (the plan refused, no engine, no env server) is not left behind
      if (made && existsSync(runDir) && onlyAFailedStart(runDir, loaded.file))
        await rm(runDir, { recursive: true, force: true });
      throw e;
    }
  }

  private static async launch(
    runDir: string,
    loaded: LoadedRunConfig,
    options: RunHostOptions,
    madeRunDir: boolean,
  ): Promise<RunHost> {
    const planned = await checkRunHostMemory(loaded, options);
    const dir = trainerDir();
    const engine = await engineHost(loaded.config.engine ?? 'builtin', options.python, dir);
    const serverLog = new ServerLog(runDir);
    const server = await startEnvServerProcess(envServerArgs(loaded, { port: options.port }), {
      onLog: (l) => {
        serverLog.line(l);
        options.onServerLog?.(l);
      },
      launcher: options.serverLauncher,
    });
    let trainer: Child;
    try {
      const launch = await engine.launch({
        python: options.python,
        trainerDir: dir,
        runDir,
        envUrl: server.url,
        resume: !!options.resume,
        loaded,
        verlPython: options.verlPython,
        planned,
      });
      trainer = spawnChild('trainer', launch.file, launch.args, {
        cwd: dir,
        env: {
          PYTHONPATH: [dir, process.env.PYTHONPATH].filter(Boolean).join(':'),
          PYTHONUNBUFFERED: '1',
          ...launch.env,
        },
        onStdout: (line) => {
          let event: (RunEvent & Record<string, unknown>) | undefined;
          try {
            event = JSON.parse(line);
          } catch {
            options.onTrainerLog?.(line);
            return;
          }
          if (event && typeof event === 'object' && typeof event.event === 'string') options.onEvent?.(event);
        },
        onStderr: options.onTrainerLog,
      });
      for (const note of launch.notes ?? []) options.onNote?.(note);
    } catch (e) {
      await server.child.stop(3_000);
      throw e;
    }
    return new RunHost(runDir, loaded, server, trainer, options, madeRunDir, serverLog);
  }

  /**
   * Asks the trainer to stop (it checkpoints), kills the tree after the grace period; resolves with the outcome.
   * `hostClosing` (a window reloading or closing, not a user's Stop) sends SIGHUP instead of SIGTERM: the run records
   * `stop_reason: host-gone`, and the next window offers to resume it.
   */
  async stop(options: { hostClosing?: boolean } = {}): Promise<RunOutcome> {
    if (!this.stopping) {
      this.stopping = true;
      void this.trainer.stop(this.options.stopGraceMs ?? 60_000, options.hostClosing ? 'SIGHUP' : 'SIGTERM');
    }
    return this.done;
  }

  private async finish(): Promise<RunOutcome> {
    const exit = await this.trainer.exited;
    await this.server.child.stop(3_000);
    this.serverLog.flush();
    let run: Partial<RunJson> = {};
    try {
      run = JSON.parse(await readFile(join(this.runDir, 'run.json'), 'utf8'));
    } catch {
      /* the trainer failed before writing it */
    }
    const step = run.step ?? 0;
    if (exit.code === 0 && (run.status === 'finished' || run.status === 'stopped'))
      return { status: run.status, runDir: this.runDir, step, exit };
    const tail = this.trainer.stderr.text(12);
    // Exit 2: the trainer found the config (or its data) invalid before training anything (__main__.py, run.py).
    if (exit.code === 2 && !this.stopping) {
      const said = [...this.trainer.stderr.lines].reverse().find((l) => /^(?:\d\d:\d\d:\d\d )?error: /.test(l));
      const message = run.error?.message ?? said?.replace(/^(?:\d\d:\d\d:\d\d )?error: /, '') ?? tail;
      let removed = false;
      if (this.madeRunDir && existsSync(this.runDir) && onlyAFailedStart(this.runDir, this.loaded.file)) {
        this.serverLog.dropped = true;
        await rm(this.runDir, { recursive: true, force: true });
        removed = true;
      }
      return { status: 'failed', runDir: this.runDir, step, exit, error: { message }, invalidConfig: true, removed };
    }
    // Killed after the grace period, or by someone else: the run did not end cleanly, but a stop was asked.
    if (this.stopping && exit.code !== 1)
      return {
        status: 'stopped',
        runDir: this.runDir,
        step,
        exit,
        error: {
          // (after the grace period, or at once: the CLI's second Ctrl-C) — the step it was in is not checkpointed
          message: `the trainer was killed before it had stopped and checkpointed (${exit.signal ?? exit.code})`,
        },
      };
    const error =
      run.error ??
      (exit.signal
        ? { message: killedMessage(exit.signal), ...(tail ? { traceback: tail } : {}) }
        : { message: tail ? tail : `the trainer exited with code ${exit.code}` });
    return { status: 'failed', runDir: this.runDir, step, exit, error };
  }
}

/**
 * What a trainer ended by a signal it did not handle means (`kill -9`, the kernel's out-of-memory killer, a crash):
 * the signal and the exit status a shell would show (128 + its number). Its last log lines go beside it.
 */
export function killedMessage(signal: string): string {
  const number = (osConstants.signals as Record<string, number | undefined>)[signal];
  const why =
    signal === 'SIGKILL'
      ? ': another process or the kernel (out of memory?) ended it; it could not checkpoint'
      : signal === 'SIGSEGV' || signal === 'SIGBUS' || signal === 'SIGABRT'
        ? ': it crashed'
        : '';
  return `the trainer was killed by ${signal}${number !== undefined ? ` (exit status ${128 + number})` : ''}${why}; resume from its last checkpoint`;
}
