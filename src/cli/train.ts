/**
 * `search-agent-studio train` and `demo`: the run host (src/core/host) without VS Code. A progress bar on a TTY,
 * plain lines otherwise; Ctrl-C stops the run the way the editor's Stop does (the trainer checkpoints); a failure
 * prints the trainer's error and how to resume.
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import { EngineUnavailableError } from '../core/host/engines';
import { listCheckpoints } from '../core/host/fork';
import { EnvServerError } from '../core/host/processes';
import { loadRunConfig, makeNewRunDir, RunConfigError, runNeeds, standaloneConfig } from '../core/host/runConfig';
import { RunDirError, RunHost, type RunOutcome } from '../core/host/runHost';
import { readRun } from '../core/host/runs';
import { packageRoot } from '../core/paths';
import { MemoryPlanError } from '../core/plan/check';
import { parseBytes } from '../core/plan/plan';
import { HOPS_METRICS } from '../core/protocol/dashboard';
import { findPython, noPythonMessage, pythonCandidates, runPythonNote, type TrainerNeeds } from '../core/python';
import { UsageError } from '../server/run';
import { defineCommand } from './command';

/**
 * The CLI's Python candidates: --python alone when given (a typo must not silently train with another interpreter),
 * else — first for a resume — the Python the run started in (run.json `python`: the same torch and transformers), then
 * the usual ones with the `.venv` of the current directory (`search-agent-studio setup`'s default) and of the package.
 */
export function cliPythonCandidates(python?: string, runPython?: string): string[] {
  return python ? [python] : pythonCandidates([runPython], [process.cwd(), packageRoot()]);
}

type Event = {
  event: string;
  step?: number;
  total?: number;
  phase?: string;
  metrics?: Record<string, number>;
  message?: string;
  [k: string]: unknown;
};

/** A metric for a person: `digits` decimals, or – when it is not a finite number. */
export const fmt = (v: unknown, digits = 3) => (typeof v === 'number' && Number.isFinite(v) ? v.toFixed(digits) : '–');

/** Seconds as the CLI prints them: 14m58s, 58s (– when not a duration). */
export function duration(s: number): string {
  if (!Number.isFinite(s) || s < 0) return '–';
  const whole = Math.round(s);
  const m = Math.floor(whole / 60);
  return m ? `${m}m${String(whole % 60).padStart(2, '0')}s` : `${whole}s`;
}

/** Renders the trainer's events: one redrawn line on a TTY, one line per step or evaluation otherwise. */
export class ProgressPrinter {
  private started = Date.now();
  private stepStarted = 0;
  private firstStep: number | undefined;
  private last: Record<string, number> = {};
  private val: Record<string, number> = {};
  private drawn = false;

  constructor(
    private readonly out: NodeJS.WriteStream | { isTTY?: boolean; columns?: number; write(s: string): boolean },
    private readonly quiet = false,
  ) {}

  private line(s: string): void {
    if (this.drawn) this.out.write('\r\x1b[K');
    this.drawn = false;
    this.out.write(`${s}\n`);
  }

  private draw(step: number, total: number, phase: string, extra = ''): void {
    if (!this.out.isTTY || this.quiet) return;
    const width = 24;
    const done = total ? Math.min(width, Math.round((width * step) / total)) : 0;
    const elapsed = (Date.now() - this.stepStarted) / 1000;
    const steps = this.firstStep === undefined ? 0 : step - this.firstStep;
    const eta = steps > 0 ? duration((elapsed / steps) * (total - step)) : '–';
    const text = `[${'#'.repeat(done)}${'.'.repeat(width - done)}] ${step}/${total} ${phase.padEnd(7)} reward ${fmt(this.last['critic/score/mean'])}  val EM ${fmt(this.val['val/em'])}  eta ${eta}${extra}`;
    this.out.write(`\r\x1b[K${text.slice(0, Math.max(20, (this.out.columns ?? 120) - 1))}`);
    this.drawn = true;
  }

  event(e: Event): void {
    switch (e.event) {
      case 'started':
        this.started = Date.now();
        // precision: the run's numerics (model.dtype; for `fastest` what was measured and why, run.json `numerics`)
        this.line(
          `run started: ${e.model} policy (${Number(e.parameters).toLocaleString('en-US')} parameters) on ${e.device}${typeof e.precision === 'string' ? `, ${e.precision}` : ''}; ${e.train_examples} training / ${e.eval_examples} held-out questions; ${e.total} steps${e.resumed ? ` (resumed at step ${e.step})` : ''}`,
        );
        break;
      case 'progress':
        if (e.phase === 'warmup') {
          const [k, n] = [Number(e.warmup_step ?? 0), Number(e.warmup_steps ?? 0)];
          // the warm start's pace against the reference machine's (trainer/search_agent_trainer/pace.py): said early;
          // a slower machine's is a `warning` event too, printed as one (with --quiet as well), not twice
          const pace = e.pace as { message?: unknown; slow?: unknown } | undefined;
          if (typeof pace?.message === 'string' && !this.quiet && pace.slow !== true) this.line(pace.message);
          if (this.out.isTTY) this.draw(k, n, 'warm-up', `  loss ${fmt(e.loss)}`);
          else if (!this.quiet && (k % 100 === 0 || k === n))
            this.line(`warm start ${k}/${n}: loss ${fmt(e.loss)}  (${duration((Date.now() - this.started) / 1000)})`);
        } else {
          if (this.firstStep === undefined && e.phase === 'rollout') {
            this.firstStep = (e.step ?? 1) - 1;
            this.stepStarted = Date.now();
          }
          this.draw(e.step ?? 0, e.total ?? 0, e.phase ?? '');
        }
        break;
      case 'metrics':
        this.last = e.metrics ?? {};
        if (!this.out.isTTY && !this.quiet) {
          const m = this.last;
          this.line(
            `step ${e.step}: reward ${fmt(m['critic/score/mean'])}  searches ${fmt(m['env/number_of_valid_search'], 2)}  zero-variance groups ${fmt(m['reward/frac_zero_std_groups'], 2)}  response ${fmt(m['response_length/mean'], 0)} tokens`,
          );
        }
        break;
      case 'eval':
        this.val = e.metrics ?? {};
        if (!this.quiet)
          this.line(
            `step ${e.step}: held-out exact match ${fmt(this.val['val/em'])}, searches per question ${fmt(this.val['val/searches_mean'], 2)}  (${duration((Date.now() - this.started) / 1000)})`,
          );
        break;
      case 'warning':
        this.line(`warning: ${e.message}`);
        break;
      case 'checkpoint':
        break;
      case 'error':
        this.line(`error: ${e.message}`);
        break;
      case 'finished':
        if (this.drawn) this.out.write('\n');
        this.drawn = false;
        break;
    }
  }
}

/** An evaluation's headline numbers; `byHops`: exact match, searches per question, the share with a golden answer
 * in what the searches returned and the share whose later search named the bridge entity, by the hops a question needs
 * (`val/em_by_hops/<h>`, `val/searches_by_hops/<h>`, `val/answer_retrieved_by_hops/<h>`,
 * `val/bridge_searched_by_hops/<h>`), where the data has them. */
export interface HeldOut {
  step: number;
  em: number;
  searches?: number;
  byHops: { hops: number; em: number; searches?: number; retrieved?: number; bridge?: number }[];
}

/** Held-out exact match at the first and last evaluation of a run (from metrics.jsonl). */
export async function heldOutEm(runDir: string): Promise<{ before?: HeldOut; after?: HeldOut }> {
  let text = '';
  try {
    text = await readFile(join(runDir, 'metrics.jsonl'), 'utf8');
  } catch {
    return {};
  }
  const evals: HeldOut[] = [];
  for (const line of text.split('\n')) {
    try {
      const m = JSON.parse(line);
      if (typeof m['val/em'] !== 'number') continue;
      const hops = Object.keys(m)
        .flatMap((k) => HOPS_METRICS.hopsOf(k) ?? [])
        .sort((a, b) => a - b);
      const byHops = hops.map((h) => ({
        hops: h,
        em: m[HOPS_METRICS.em(h)] as number,
        searches: m[HOPS_METRICS.searches(h)] as number | undefined,
        ...(typeof m[HOPS_METRICS.retrieved(h)] === 'number'
          ? { retrieved: m[HOPS_METRICS.retrieved(h)] as number }
          : {}),
        ...(typeof m[HOPS_METRICS.bridge(h)] === 'number' ? { bridge: m[HOPS_METRICS.bridge(h)] as number } : {}),
      }));
      evals.push({ step: m.step, em: m['val/em'], searches: m['val/searches_mean'], byHops });
    } catch {
      /* a partial last line */
    }
  }
  return { before: evals[0], after: evals.length > 1 ? evals[evals.length - 1] : undefined };
}

interface TrainRequest {
  force?: boolean;
  gpuMemoryBytes?: number;
  config?: string;
  needs: TrainerNeeds;
  runDir?: string;
  resume: boolean;
  python?: string;
  verlPython?: string;
  port: number;
  quiet: boolean;
}

/**
 * A word as a POSIX shell reads it back unchanged: as it is when it holds only characters no shell treats specially,
 * else in single quotes (inside which nothing is special; a single quote itself is closed, escaped and reopened).
 */
export function shellQuote(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** The command that resumes a run, safe to paste into a shell whatever the run directory is called. */
export function resumeCommand(runDir: string): string {
  return `search-agent-studio train --resume --run-dir ${shellQuote(runDir)}`;
}

async function runTraining(
  req: TrainRequest,
  log: (s: string) => void,
): Promise<{ code: number; outcome?: RunOutcome; python?: string }> {
  const resumed = req.resume && req.runDir ? await readRun(resolve(req.runDir)) : undefined;
  if (resumed?.state === 'finished') {
    // Nothing to continue: starting the processes would only rewrite run.json (its record totals among it).
    log(
      `the run is already finished (${resumed.step}/${resumed.total ?? resumed.step} steps): ${relative(process.cwd(), resumed.dir) || resumed.dir}`,
    );
    return { code: 0 };
  }
  const runPython = resumed?.python;
  const search = await findPython(cliPythonCandidates(req.python, runPython), req.needs);
  const note = req.python ? undefined : runPythonNote(search, runPython);
  if (note) log(note);
  if (!search.found) {
    process.stderr.write(`${noPythonMessage(search, req.needs)}\n`);
    return { code: 1 };
  }
  const printer = new ProgressPrinter(process.stdout, req.quiet);
  let host: RunHost;
  try {
    host = await RunHost.start({
      config: req.config,
      runDir: req.runDir,
      resume: req.resume,
      python: search.found.executable,
      verlPython: req.verlPython,
      port: req.port,
      runsParent: resolve('runs'),
      onEvent: (e) => printer.event(e as Event),
      onNote: (note) => process.stderr.write(`warning: ${note}\n`),
      force: req.force,
      gpuMemoryBytes: req.gpuMemoryBytes,
      onMemoryCheck: (line) => log(line),
      // the trainer's own warnings and errors are events too (printed by the printer): their log lines are not
      // printed again
      onTrainerLog: (l) => {
        if (
          !req.quiet &&
          /warning|error|Traceback/i.test(l) &&
          !/^(?:\d\d:\d\d:\d\d (?:step|eval|warning:|error:)|error: )/.test(l)
        )
          process.stderr.write(`[trainer] ${l}\n`);
      },
      // the env server's log goes to <run dir>/logs/server.log (the host); what it skipped or failed at is shown
      onServerLog: (l) => {
        if (/skipped|… and \d+ more|warning|error|:\d+: /i.test(l)) process.stderr.write(`${l}\n`);
      },
    });
  } catch (e) {
    if (e instanceof MemoryPlanError) {
      process.stderr.write(`search-agent-studio: ${e.message}\nstart it anyway: --force\n`);
      return { code: 1 };
    }
    if (
      e instanceof RunConfigError ||
      e instanceof RunDirError ||
      e instanceof EnvServerError ||
      e instanceof EngineUnavailableError
    ) {
      process.stderr.write(`search-agent-studio: ${e.message}\n`);
      return { code: e instanceof RunConfigError || e instanceof RunDirError ? 2 : 1 };
    }
    throw e;
  }
  log(
    `run directory: ${relative(process.cwd(), host.runDir) || host.runDir}  (env server ${host.server.url}, trainer pid ${host.trainer.pid}, Python ${search.found.executable})`,
  );
  let interrupts = 0;
  const onSignal = () => {
    interrupts++;
    if (interrupts === 1) {
      process.stderr.write('\nstopping: the trainer finishes its step and checkpoints (Ctrl-C again to kill it)\n');
      void host.stop();
    } else {
      process.stderr.write('killing the trainer\n');
      host.trainer.stop(0).catch(() => undefined);
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const outcome = await host.done;
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  const where = relative(process.cwd(), outcome.runDir) || outcome.runDir;
  if (outcome.invalidConfig) {
    // The trainer refused the config before training anything: nothing to resume (docs/training.md: 2, a bad config).
    process.stderr.write(
      `search-agent-studio: ${outcome.error?.message ?? 'the trainer refused the config'}\n${outcome.removed ? '' : `log: ${join(where, 'logs', 'trainer.log')}\n`}`,
    );
    return { code: 2, outcome };
  }
  if (outcome.status === 'failed') {
    process.stderr.write(`\nthe run failed at step ${outcome.step}: ${outcome.error?.message ?? ''}\n`);
    if (outcome.error?.traceback)
      process.stderr.write(`${outcome.error.traceback.trimEnd().split('\n').slice(-12).join('\n')}\n`);
    process.stderr.write(`log: ${join(where, 'logs', 'trainer.log')}\nresume: ${resumeCommand(where)}\n`);
    return { code: 1, outcome };
  }
  if (outcome.status === 'stopped') {
    // What a resume starts from is the last checkpoint on disk: said as it is (a killed trainer wrote none of the
    // step it was in; a stop during the warm start saves nothing).
    const last = (await listCheckpoints(outcome.runDir)).at(-1);
    const lastStep = last === undefined ? undefined : Number(last.slice('step-'.length));
    const saved =
      last === undefined
        ? 'no checkpoint on disk: a resume starts the run from the beginning'
        : `the last checkpoint on disk: ${join(where, 'checkpoints', last)} (step ${lastStep})`;
    if (outcome.error) {
      process.stderr.write(`\n${outcome.error.message}; ${saved}\nresume: ${resumeCommand(where)}\n`);
      return { code: 1, outcome };
    }
    log(
      lastStep === outcome.step
        ? `stopped at step ${outcome.step} (checkpointed); resume: ${resumeCommand(where)}`
        : `stopped at step ${outcome.step}, not checkpointed; ${saved}; resume: ${resumeCommand(where)}`,
    );
  }
  return { code: 0, outcome, python: search.found.executable };
}

/**
 * Held-out exact match of a run's last checkpoint with /retrieve returning nothing (an evaluation-only run in
 * <runDir>/eval-no-retrieval): the answers are invented, so a policy that learned to use retrieval scores ~0. The
 * evaluation-only config drops what would train: the curriculum's stages (their steps would contradict `steps: 0`)
 * and the warm start (model.init skips it anyway).
 */
export function noRetrievalConfig(config: Record<string, any>, checkpoint: string): Record<string, any> {
  const cfg = structuredClone(config);
  cfg.model = { ...cfg.model, init: checkpoint };
  cfg.retriever = { kind: 'none', topk: cfg.retriever?.topk ?? 3 };
  const { stages: _stages, supervised_warmup: _warmup, ...train } = cfg.train ?? {};
  cfg.train = { ...train, steps: 0 };
  cfg.name = `${cfg.name ?? 'run'}-no-retrieval`;
  return cfg;
}

async function evalWithoutRetrieval(runDir: string, step: number, python: string): Promise<HeldOut | undefined> {
  const run = JSON.parse(await readFile(join(runDir, 'run.json'), 'utf8')) as { config: Record<string, any> };
  const cfg = noRetrievalConfig(run.config, join(runDir, 'checkpoints', `step-${String(step).padStart(6, '0')}`));
  const dir = join(runDir, 'eval-no-retrieval');
  // made anew each time: an earlier evaluation left there would be another run in the directory, which RunHost
  // refuses to start in
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  const file = join(dir, 'config.run.json');
  await writeFile(file, JSON.stringify(cfg, null, 2));
  const host = await RunHost.start({ config: file, runDir: dir, python });
  const outcome = await host.done;
  if (outcome.status !== 'finished')
    throw new Error(
      `the evaluation ${outcome.status}${outcome.error ? `: ${outcome.error.message}` : ''} (${join(dir, 'logs', 'trainer.log')})`,
    );
  return (await heldOutEm(dir)).before;
}

/**
 * The demo's `--seed`: the config with another seed, written (paths made absolute) into the run directory — made here,
 * a fresh one under ./runs unless named — as demo.run.json, which the run then starts from (run.json records it too).
 */
async function seededConfig(
  config: string,
  seed: number,
  runDir: string | undefined,
): Promise<{ config: string; runDir: string } | { code: number }> {
  let loaded;
  try {
    loaded = await loadRunConfig(config);
  } catch (e) {
    if (!(e instanceof RunConfigError)) throw e;
    process.stderr.write(`search-agent-studio: ${e.message}\n`);
    return { code: 2 };
  }
  const dir = runDir ? resolve(runDir) : makeNewRunDir(loaded, resolve('runs'));
  await mkdir(dir, { recursive: true });
  const file = join(dir, 'demo.run.json');
  await writeFile(file, `${JSON.stringify({ ...standaloneConfig(loaded), seed }, null, 2)}\n`);
  return { config: file, runDir: dir };
}

/** The demo's last line: held-out exact match before and after, by hops, and with retrieval disabled. */
export function demoSummary(em: { before?: HeldOut; after?: HeldOut }, seconds: number, blind?: HeldOut): string {
  const hops = (h: HeldOut, detail: boolean) =>
    h.byHops
      .map((b) => {
        const parts = [
          `${fmt(b.searches, 2)} searches`,
          ...(b.bridge === undefined ? [] : [`bridge entity searched ${fmt(b.bridge)}`]),
          ...(b.retrieved === undefined ? [] : [`answer retrieved ${fmt(b.retrieved)}`]),
        ];
        return `${b.hops}-hop ${fmt(b.em)}${detail ? ` (${parts.join(', ')})` : ''}`;
      })
      .join(', ');
  return (
    `held-out exact match: ${fmt(em.before?.em)} before training (after the warm start) → ${fmt(em.after?.em)} after ${em.after?.step ?? 0} steps ` +
    `(${duration(seconds)}); searches per question ${fmt(em.after?.searches, 2)}` +
    (em.after?.byHops.length ? `; by hops: ${hops(em.after, true)}` : '') +
    `; with retrieval disabled ${fmt(blind?.em)}` +
    (blind?.byHops.length ? ` (${hops(blind, false)})` : '')
  );
}

export const trainCommand = defineCommand({
  command: 'train [config]',
  describe:
    'start the env server and the trainer for a run config (Ctrl-C stops after a checkpoint; --resume continues a run)',
  builder: (y) =>
    y
      .positional('config', { type: 'string', describe: 'the run config (*.run.json)' })
      .option('run-dir', {
        type: 'string',
        describe: "the run directory (default: a new one under the config's output_dir or ./runs)",
      })
      .option('resume', {
        type: 'boolean',
        default: false,
        describe: 'continue the run in --run-dir from its last checkpoint',
      })
      .option('python', { type: 'string', describe: "the trainer's Python (the only one tried)" })
      .option('verl-python', {
        type: 'string',
        describe:
          "engine verl: veRL's Python, the only one tried when named (default: the config's verl.python, SAS_VERL_PYTHON, .venv-verl)",
      })
      .option('port', { type: 'number', default: 0, describe: 'env server port on 127.0.0.1 (0: any free port)' })
      .option('quiet', { type: 'boolean', default: false, describe: 'print only warnings, errors and the result' })
      .option('force', {
        type: 'boolean',
        default: false,
        describe: 'start even when the memory plan says the run does not fit the GPU (search-agent-studio plan)',
      })
      .option('gpu-memory', {
        type: 'string',
        describe: "the GPU's memory for the memory plan (default: what the trainer's Python reports, else 80GiB)",
      })
      .example('$0 train examples/demo.run.json', 'train the demo config')
      .example('$0 train --resume --run-dir runs/demo-20260101-120000', 'continue a stopped run'),
  run: async (a) => {
    if (a.resume ? !a['run-dir'] || a.config : !a.config)
      throw new UsageError(a.resume ? '--resume needs --run-dir and no config' : 'name one run config');
    if (!Number.isInteger(a.port) || a.port < 0 || a.port > 65535)
      throw new UsageError(`--port must be an integer in 0..65535, got ${a.port}`);
    let gpuMemoryBytes: number | undefined;
    try {
      gpuMemoryBytes = a['gpu-memory'] === undefined ? undefined : parseBytes(a['gpu-memory']);
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
    const needs = await runNeeds({ config: a.config, runDir: a['run-dir'], resume: a.resume });
    const { code, outcome } = await runTraining(
      {
        config: a.config,
        needs,
        runDir: a['run-dir'],
        resume: a.resume,
        python: a.python,
        verlPython: a['verl-python'],
        port: a.port,
        quiet: a.quiet,
        force: a.force,
        gpuMemoryBytes,
      },
      (s) => console.log(s),
    );
    if (outcome && outcome.status !== 'failed') {
      const em = await heldOutEm(outcome.runDir);
      if (em.before || em.after)
        console.log(
          `held-out exact match: ${fmt(em.before?.em)} before → ${fmt(em.after?.em)} after (step ${em.after?.step ?? em.before?.step})`,
        );
    }
    return code;
  },
});

/**
 * The main job on the embedded defaults: examples/demo-multihop.run.json, the two-hop recipe (tiny policy, BM25 over the
 * two-hop world, GRPO on exact match, bf16 where the CPU has it natively; 14 minutes on 2 cores). `--config examples/demo.run.json` is
 * the one-hop demo (one search per question; minutes).
 */
export const demoCommand = defineCommand({
  command: 'demo',
  describe:
    'the main job on the embedded defaults: train a tiny search agent on the two-hop demo world (CPU, about 14 minutes on 2 cores); prints held-out exact match before and after, by hops, and with retrieval off',
  builder: (y) =>
    y
      .option('run-dir', { type: 'string', describe: 'the run directory (default: a new one under ./runs)' })
      .option('python', { type: 'string', describe: "the trainer's Python (the only one tried)" })
      .option('config', {
        type: 'string',
        describe:
          'another run config instead of examples/demo-multihop.run.json (examples/demo.run.json: the one-hop demo, under 10 minutes on 2 cores)',
      })
      .option('seed', {
        type: 'number',
        describe:
          "the run's seed instead of the config's (the config with it is written to the run directory as demo.run.json)",
      })
      .option('quiet', { type: 'boolean', default: false, describe: 'print only warnings, errors and the result' })
      .example('$0 demo', 'the two-hop recipe, seed 1')
      .example('$0 demo --seed 2', 'the same recipe with another seed')
      .example('$0 demo --config examples/demo.run.json', 'the one-hop demo'),
  run: async (a) => {
    if (a.seed !== undefined && (!Number.isSafeInteger(a.seed) || a.seed < 0))
      throw new UsageError(`--seed must be a non-negative integer, got ${a.seed}`);
    let config = a.config ?? join(packageRoot(), 'examples', 'demo-multihop.run.json');
    let runDir = a['run-dir'];
    if (a.seed !== undefined) {
      const derived = await seededConfig(config, a.seed, runDir);
      if ('code' in derived) return derived.code;
      ({ config, runDir } = derived);
    }
    console.log(
      'The demo: a tiny policy learns, on CPU, to search a corpus of invented facts (BM25) and answer from what it finds;',
    );
    console.log(
      'a short supervised warm start teaches it the tags only (random queries and answers), then GRPO on exact match.',
    );
    const t0 = Date.now();
    const needs = await runNeeds({ config });
    const { code, outcome, python } = await runTraining(
      { config, needs, runDir, resume: false, python: a.python, port: 0, quiet: a.quiet },
      (s) => console.log(s),
    );
    if (!outcome || outcome.status === 'failed' || !python) return code || 1;
    const trained = Date.now();
    const em = await heldOutEm(outcome.runDir);
    let blind: HeldOut | undefined;
    if (outcome.status === 'finished') {
      console.log(
        'checking the trained policy with /retrieve returning nothing (it should not know the invented answers)…',
      );
      blind = await evalWithoutRetrieval(outcome.runDir, outcome.step, python).catch((e: Error) => {
        process.stderr.write(`the no-retrieval check failed: ${e.message}\n`);
        return undefined;
      });
    }
    console.log(demoSummary(em, (trained - t0) / 1000, blind));
    return code;
  },
});
