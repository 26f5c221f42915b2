/**
 * Engine "verl" (docs/engines.md): finding veRL's Python and `export verl`, a veRL run of a run config as files for
 * one's own cluster. The trainer package does the work (search_agent_trainer/engines/verl/export.py: launch script,
 * Hydra overrides, our modules, the parquet; checked against veRL's own config in veRL's environment); this adds the
 * env server's command for the config (env-server.sh), since the host is what knows how to start it.
 */
import { chmod, writeFile } from 'node:fs/promises';
import { isAbsolute, join, resolve } from 'node:path';
import { execa } from 'execa';
import { probePython, type PythonProbe, type PythonSearch } from '../python';
import { envServerArgs, RunConfigError, type LoadedRunConfig } from './runConfig';
import { trainerDir } from './runHost';

/** The veRL the engine is written against (trainer/requirements-verl.txt); its config layout changes between versions. */
export const VERL_VERSION = '0.9.1';

/** Where veRL's Python may be, in order: what the user named (--python, the setting searchAgent.verlPythonPath), the
 * config's verl.python (relative to the config file), SAS_VERL_PYTHON, the project's .venv-verl. */
export function verlPythonCandidates(loaded: LoadedRunConfig, named: (string | undefined)[], root: string): string[] {
  const fromConfig = loaded.config.verl?.python;
  const all = [...named, fromConfig && (isAbsolute(fromConfig) || !fromConfig.includes('/') ? fromConfig : resolve(loaded.base, fromConfig)), process.env.SAS_VERL_PYTHON, join(root, '.venv-verl', 'bin', 'python')];
  return all.filter((p, i): p is string => !!p && all.indexOf(p) === i);
}

/** A probe is veRL's Python when it imports torch and has the pinned veRL; otherwise its error says what it lacks. */
export function asVerlPython(p: PythonProbe): PythonProbe {
  if (!p.ok) return p;
  if (p.verl === VERL_VERSION) return p;
  return { ...p, ok: false, error: p.verl ? `veRL ${p.verl} (the engine needs ${VERL_VERSION})` : 'veRL is not installed' };
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
  const r = await execa(python, ['-m', 'search_agent_trainer.engines.verl.main', 'export', '--config', loaded.file, '--out', resolve(out)], { env, reject: false, stdin: 'ignore' });
  const last = r.stdout.trim().split('\n').pop() ?? '';
  let result: (VerlExport & { event?: string; message?: string }) | undefined;
  try {
    result = JSON.parse(last);
  } catch {
    result = undefined;
  }
  if (result?.event === 'error') throw new RunConfigError(loaded.file, [result.message ?? 'refused']);
  if (r.exitCode !== 0 || !result) throw new Error(`${python} -m search_agent_trainer.engines.verl.main export failed (exit ${r.exitCode}): ${(r.stderr || r.stdout).trim().split('\n').slice(-5).join('\n')}`);
  const script = join(result.dir, 'env-server.sh');
  await writeFile(script, envServerScript(loaded), 'utf8');
  await chmod(script, 0o755);
  return { dir: result.dir, files: [...result.files, 'env-server.sh'].sort(), notes: result.notes, checked: result.checked };
}
