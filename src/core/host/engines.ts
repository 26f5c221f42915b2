/**
 * The run host's engine dispatch (DESIGN §5): for each engine of the run config (`engine`), what it needs in the
 * trainer's Python, checked before anything is spawned, and the trainer's command line. builtin and trl both start
 * `python -m search_agent_trainer`, which picks the engine from the config (trl runs `accelerate launch` itself when
 * the run wants several processes, and supervises it: trainer/search_agent_trainer/engines/trl/launch.py). Whatever
 * the engine, the trainer speaks the same events on stdout and writes the same run directory.
 *
 * Another engine adds an entry to ENGINE_HOSTS: its `check` (what its Python lacks) and its `launch` (the command;
 * it may use another interpreter, run a preparation step first, or add environment variables).
 */
import { execa } from 'execa';
import { packageRoot } from '../paths';
import type { Engine } from '../run/engines';
import type { LoadedRunConfig } from './runConfig';
import { VerlUnavailableError, verlLaunch } from './verl';

export interface EngineContext {
  /** The trainer's Python (findPython's). */
  python: string;
  /** trainer/ (the package's parent: cwd and PYTHONPATH of the trainer). */
  trainerDir: string;
  runDir: string;
  envUrl: string;
  resume: boolean;
  loaded: LoadedRunConfig;
  /** veRL's Python as the user named it (the setting searchAgent.verlPythonPath), tried first (engine verl). */
  verlPython?: string;
  /** What the memory plan sets for keys the config leaves unset (dotted keys: veRL's PLANNER_KEYS), for a new run. */
  planned?: Record<string, unknown>;
}

export interface TrainerLaunch {
  file: string;
  args: string[];
  env?: Record<string, string>;
  /** What the engine does its own way with this config (veRL's prepare notes): shown to the user as warnings. */
  notes?: string[];
}

export interface EngineHost {
  /** What the engine lacks in this Python (a message that says how to install it), or undefined. */
  check?(python: string, trainerDir: string): Promise<string | undefined>;
  launch(ctx: EngineContext): Promise<TrainerLaunch> | TrainerLaunch;
}

export class EngineUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EngineUnavailableError';
  }
}

/** `python -m search_agent_trainer …`: the trainer's own command line (it dispatches on the config's engine). */
export function trainerModuleLaunch(ctx: EngineContext): TrainerLaunch {
  return {
    file: ctx.python,
    args: [
      '-m',
      'search_agent_trainer',
      '--run-dir',
      ctx.runDir,
      '--env-url',
      ctx.envUrl,
      ...(ctx.resume ? ['--resume'] : ['--config', ctx.loaded.file]),
    ],
  };
}

/** What this Python lacks for `engine`, as the trainer itself reports it (`--check`: engines.<name>). */
export async function trainerEngineCheck(
  python: string,
  trainerDir: string,
  engine: Engine,
): Promise<string | undefined> {
  const r = await execa(python, ['-m', 'search_agent_trainer', '--check'], {
    cwd: trainerDir,
    env: { PYTHONPATH: [trainerDir, process.env.PYTHONPATH].filter(Boolean).join(':') },
    reject: false,
    timeout: 180_000,
    stdin: 'ignore',
  });
  let report: { engines?: Record<string, string | null> };
  try {
    report = JSON.parse(r.stdout.trim().split('\n').pop() ?? '');
  } catch {
    return `${python} -m search_agent_trainer --check failed (exit ${r.exitCode}): ${(r.stderr || r.stdout).trim().split('\n').slice(-3).join(' | ')}`;
  }
  const lacks = report.engines?.[engine];
  return lacks === undefined ? `this trainer (${python}) does not know engine "${engine}"` : (lacks ?? undefined);
}

export const ENGINE_HOSTS: Record<Engine, EngineHost | undefined> = {
  builtin: { launch: trainerModuleLaunch },
  trl: { check: (python, dir) => trainerEngineCheck(python, dir, 'trl'), launch: trainerModuleLaunch },
  verl: { launch: verlEngineLaunch },
};

/** veRL: its own Python (found and checked by verl.ts: the setting, the config's verl.python, SAS_VERL_PYTHON,
 * .venv-verl), the run prepared in its directory, then veRL's main_ppo with our recorder under Ray. */
async function verlEngineLaunch(ctx: EngineContext): Promise<TrainerLaunch> {
  try {
    const l = await verlLaunch({
      loaded: ctx.loaded,
      runDir: ctx.runDir,
      envUrl: ctx.envUrl,
      resume: ctx.resume,
      trainerDir: ctx.trainerDir,
      verlPython: ctx.verlPython,
      root: packageRoot(),
      planned: ctx.planned,
    });
    return { file: l.file, args: l.args, env: l.env, notes: l.notes };
  } catch (e) {
    if (e instanceof VerlUnavailableError) throw new EngineUnavailableError(e.message);
    throw e;
  }
}

/** The engine's host; throws EngineUnavailableError when there is none or its Python lacks what it needs. */
export async function engineHost(engine: Engine, python: string, trainerDir: string): Promise<EngineHost> {
  const host = ENGINE_HOSTS[engine];
  if (!host) throw new EngineUnavailableError(`engine "${engine}" is not available in this version (docs/engines.md)`);
  const lacks = await host.check?.(python, trainerDir);
  if (lacks) throw new EngineUnavailableError(lacks);
  return host;
}
