/**
 * Engine "verl" on the host side (docs/engines.md): finding veRL's Python (its own environment), launching a run
 * (`verlLaunch`: the run prepared by the trainer package, then veRL's main_ppo with our recorder, under Ray), and
 * `export verl`, the same as files for one's own cluster. The trainer package does the work
 * (search_agent_trainer/engines/verl: overrides.py, export.py, main.py); export adds the env server's command for
 * the config (env-server.sh), since the host is what knows how to start it.
 */
import { existsSync } from 'node:fs';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { execa } from 'execa';
import { trainerDir } from '../paths';
import { type PythonProbe, type PythonSearch, probePython } from '../python';
import { envServerArgs, type LoadedRunConfig, RunConfigError, standaloneConfig } from './runConfig';

/** The veRL the engine is written against (trainer/requirements-verl.txt); its config layout changes between versions. */
export const VERL_VERSION = '0.9.1';

/** Where veRL's Python may be: what the user named (--python, --verl-python, the setting
 * searchAgent.verlPythonPath) and only it — a Python named and passed over for another would train or export with
 * a veRL the user did not choose; else, in order, the config's verl.python (relative to the config file),
 * SAS_VERL_PYTHON, the project's .venv-verl. */
export function verlPythonCandidates(loaded: LoadedRunConfig, named: (string | undefined)[], root: string): string[] {
  const chosen = named.find((p) => !!p?.trim());
  if (chosen) return [chosen];
  const fromConfig = loaded.config.verl?.python;
  const all = [
    fromConfig && (isAbsolute(fromConfig) || !fromConfig.includes('/') ? fromConfig : resolve(loaded.base, fromConfig)),
    process.env.SAS_VERL_PYTHON,
    join(root, '.venv-verl', 'bin', 'python'),
  ];
  return all.filter((p, i): p is string => !!p && all.indexOf(p) === i);
}

/** A probe is veRL's Python when it imports torch and has the pinned veRL; otherwise its error says what it lacks. */
export function asVerlPython(p: PythonProbe): PythonProbe {
  if (!p.ok) return p;
  if (p.verl === VERL_VERSION) return p;
  return {
    ...p,
    ok: false,
    error: p.verl ? `veRL ${p.verl} (the engine needs ${VERL_VERSION})` : 'veRL is not installed',
  };
}

/** The first candidate with veRL VERSION, and what each one tried said. */
export async function findVerlPython(candidates: string[]): Promise<PythonSearch> {
  const tried: PythonProbe[] = [];
  for (const c of candidates) {
    const probe = asVerlPython(await probePython(c));
    tried.push(probe);
    if (probe.ok) return { found: probe, tried };
  }
  return { tried };
}

export function noVerlPythonMessage(search: PythonSearch): string {
  return [
    `No Python with veRL ${VERL_VERSION} was found. Tried:`,
    ...search.tried.map((p) => `  ${p.executable}: ${p.error ?? 'unusable'}`),
    'Run `bash scripts/setup-verl.sh` (it makes .venv-verl; --gpu adds vLLM), or name veRL’s Python: verl.python in the run config, the setting searchAgent.verlPythonPath, or --python.',
  ].join('\n');
}

export interface VerlExport {
  dir: string;
  /** Relative to dir (our package under trainer/ not listed). */
  files: string[];
  /** Settings veRL handles its own way (warnings for the user). */
  notes: string[];
  /** Composed with veRL's own Hydra config (false: the Python had no veRL). */
  checked: boolean;
}

const shellQuote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/** The env server for an export: one per node (the Ray workers call 127.0.0.1, so the same URL serves every node). */
export function envServerScript(loaded: LoadedRunConfig): string {
  const args = envServerArgs(loaded);
  if (args[0] !== '--port') throw new Error('envServerArgs: expected --port first');
  return [
    '#!/usr/bin/env bash',
    '# The env server (/retrieve, /reward) for this export (search-agent-studio export verl; docs/engines.md): run one on',
    '# every node of the Ray cluster, then launch with SAS_ENV_URL=http://127.0.0.1:$SAS_ENV_PORT ./launch.sh',
    '# SAS_ENV_PORT: its port (default 8790). SAS_STUDIO: the search-agent-studio command (default: on PATH).',
    'set -euo pipefail',
    `exec "\${SAS_STUDIO:-search-agent-studio}" serve --port "\${SAS_ENV_PORT:-8790}" ${args.slice(2).map(shellQuote).join(' ')}`,
    '',
  ].join('\n');
}

/** Writes the export of a run config to `out` with veRL's (or any trainer-capable) Python. A config veRL cannot
 * train is a RunConfigError naming the key; nothing is written then. */
export async function exportVerl(loaded: LoadedRunConfig, out: string, python: string): Promise<VerlExport> {
  const env = { ...process.env, PYTHONPATH: [trainerDir(), process.env.PYTHONPATH].filter(Boolean).join(':') };
  const r = await execa(
    python,
    ['-m', 'search_agent_trainer.engines.verl.main', 'export', '--config', loaded.file, '--out', resolve(out)],
    { env, reject: false, stdin: 'ignore' },
  );
  const last = r.stdout.trim().split('\n').pop() ?? '';
  let result: (VerlExport & { event?: string; message?: string }) | undefined;
  try {
    result = JSON.parse(last);
  } catch {
    result = undefined;
  }
  if (result?.event === 'error') throw new RunConfigError(loaded.file, [result.message ?? 'refused']);
  if (r.exitCode !== 0 || !result)
    throw new Error(
      `${python} -m search_agent_trainer.engines.verl.main export failed (exit ${r.exitCode}): ${(r.stderr || r.stdout).trim().split('\n').slice(-5).join('\n')}`,
    );
  const script = join(result.dir, 'env-server.sh');
  await writeFile(script, envServerScript(loaded), 'utf8');
  await chmod(script, 0o755);
  return {
    dir: result.dir,
    files: [...result.files, 'env-server.sh'].sort(),
    notes: result.notes,
    checked: result.checked,
  };
}

/** What the run host passes an engine (the fields of the engine dispatch's context that veRL needs). */
export interface VerlLaunchContext {
  loaded: LoadedRunConfig;
  runDir: string;
  envUrl: string;
  resume: boolean;
  /** trainer/ (PYTHONPATH of the trainer package). */
  trainerDir: string;
  /** The setting searchAgent.verlPythonPath (or --python), tried first. */
  verlPython?: string;
  /** The extension's or the CLI's root (.venv-verl). */
  root: string;
  /** What the memory plan sets (dotted keys the config leaves unset: PLANNER_KEYS); written into the config launched. */
  planned?: Record<string, unknown>;
}

export interface VerlLaunch {
  file: string;
  args: string[];
  env: Record<string, string>;
  /** Settings veRL handles its own way (the host shows them as warnings). */
  notes: string[];
  /** The veRL Python found. */
  python: PythonProbe;
}

/** Prepares a veRL run in runDir (parquet, loop and tool files, resolved config under runDir/verl/) and returns the
 * command that trains it: `python -m search_agent_trainer.engines.verl.main OVERRIDES…` (Ray starts locally unless
 * RAY_ADDRESS names a cluster). Resuming prepares again from the config the run was prepared with (the env server has
 * a new URL) and veRL continues from its last checkpoint in the run directory (trainer.resume_mode=auto). No veRL
 * Python: a message naming each candidate and what it lacks. A config veRL cannot train: RunConfigError naming the
 * key. Stop: SIGTERM to the process (the step finishes, veRL checkpoints, the run ends `stopped`). */
export async function verlLaunch(ctx: VerlLaunchContext): Promise<VerlLaunch> {
  const search = await findVerlPython(verlPythonCandidates(ctx.loaded, [ctx.verlPython], ctx.root));
  if (!search.found) throw new VerlUnavailableError(noVerlPythonMessage(search));
  const python = search.found.executable;
  const prepared = join(ctx.runDir, 'verl', 'run-config.json');
  const config = ctx.resume && existsSync(prepared) ? prepared : await plannedConfig(ctx);
  const env = { PYTHONPATH: [ctx.trainerDir, process.env.PYTHONPATH].filter(Boolean).join(':') };
  const r = await execa(
    python,
    [
      '-m',
      'search_agent_trainer.engines.verl.main',
      'prepare',
      '--config',
      config,
      '--run-dir',
      ctx.runDir,
      '--env-url',
      ctx.envUrl,
      '--python',
      python,
    ],
    { env: { ...process.env, ...env }, cwd: ctx.trainerDir, reject: false, stdin: 'ignore' },
  );
  let plan: { command?: string[]; notes?: string[]; event?: string; message?: string } | undefined;
  try {
    plan = JSON.parse(r.stdout.trim().split('\n').pop() ?? '');
  } catch {
    plan = undefined;
  }
  if (plan?.event === 'error') throw new RunConfigError(ctx.loaded.file, [plan.message ?? 'refused']);
  if (r.exitCode !== 0 || !plan?.command)
    throw new Error(
      `${python} -m search_agent_trainer.engines.verl.main prepare failed (exit ${r.exitCode}): ${(r.stderr || r.stdout).trim().split('\n').slice(-5).join('\n')}`,
    );
  const [file, ...args] = plan.command;
  return { file: file!, args, env, notes: plan.notes ?? [], python: search.found };
}

/**
 * The config a new run is prepared from: the user's file, or — when the memory plan sets keys the config leaves unset
 * (PLANNER_KEYS: veRL's offload) — a copy with them, `<run>/verl/planned.run.json` (paths made absolute). A key the
 * config sets is never overridden; the prepared run-config.json keeps them, so a resume launches the same.
 */
export async function plannedConfig(ctx: Pick<VerlLaunchContext, 'loaded' | 'runDir' | 'planned'>): Promise<string> {
  const planned = Object.entries(ctx.planned ?? {});
  if (!planned.length) return ctx.loaded.file;
  const config = standaloneConfig(ctx.loaded);
  const python = config.verl?.python;
  if (typeof python === 'string' && python.includes('/') && !isAbsolute(python))
    config.verl.python = resolve(ctx.loaded.base, python);
  for (const [dotted, value] of planned) {
    const [section, key] = dotted.split('.') as [string, string];
    const sec = (config[section] ??= {});
    if (sec[key] !== undefined && sec[key] !== null) continue; // the config's own value stands
    sec[key] = value;
  }
  const file = join(ctx.runDir, 'verl', 'planned.run.json');
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, `${JSON.stringify(config, null, 2)}\n`, 'utf8');
  return file;
}

export class VerlUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'VerlUnavailableError';
  }
}
