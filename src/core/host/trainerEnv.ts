/**
 * Setting up the trainer's Python: a virtual environment with the pinned requirements (trainer/requirements.txt:
 * torch, transformers, peft), made from a base Python ≥ 3.10, then checked the way every launch checks a Python
 * (src/core/python.ts). Used by "Search Agent: Set Up Trainer Environment" and `search-agent-studio setup`.
 * Every step's output goes to `onLog` (and `<venv>/sas-setup.log`); `signal` cancels (the running step is killed
 * and an environment this call created is removed); spawned with argument arrays.
 */
import { createWriteStream, existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { type PythonProbe, probePython, type TrainerNeeds } from '../python';

/** The oldest Python the trainer supports (trainer/pyproject.toml's requires-python). */
export const MINIMUM_PYTHON = [3, 10] as const;

export class SetupError extends Error {
  constructor(
    message: string,
    /** Set when the user cancelled. */
    readonly cancelled = false,
  ) {
    super(message);
    this.name = 'SetupError';
  }
}

export interface SetupProgress {
  /** `base` (checking the base Python), `venv` (creating it), `install` (pip), `check` (probing the result). */
  phase: 'base' | 'venv' | 'install' | 'check';
  message: string;
}

export interface SetupOptions {
  /** Pythons to make the environment from, tried in order (the first ≥ 3.10 with `venv` is used). */
  basePythons: string[];
  /** The environment's directory (e.g. the extension's global storage `.venv`, or the workspace's `.venv`). */
  venvDir: string;
  /** The requirements file installed into it (trainer/requirements.txt). */
  requirements: string;
  /** More pip arguments (an index URL; tests: `--no-index --find-links DIR`). */
  pipArgs?: string[];
  /** What the environment is checked for at the end (torch always; transformers/peft when asked). */
  needs?: TrainerNeeds;
  onLog?: (line: string) => void;
  onProgress?: (p: SetupProgress) => void;
  signal?: AbortSignal;
}

export interface SetupResult {
  /** The environment's interpreter (`<venv>/bin/python`, `Scripts\python.exe` on Windows). */
  python: string;
  probe: PythonProbe;
  /** The base Python it was made from. */
  base: string;
  log: string;
}

/** The interpreter of a virtual environment. */
export function venvPython(venvDir: string): string {
  return process.platform === 'win32' ? join(venvDir, 'Scripts', 'python.exe') : join(venvDir, 'bin', 'python');
}

const BASE_CHECK =
  'import sys, json\ntry:\n    import venv, ensurepip\n    ok = True\nexcept ImportError:\n    ok = False\nprint(json.dumps({"version": list(sys.version_info[:3]), "venv": ok}))';

/** Whether `python` can make the environment: its version and whether it has `venv` with `ensurepip`. */
export async function checkBasePython(
  python: string,
): Promise<{ ok: true; version: string } | { ok: false; why: string }> {
  const r = await execa(python, ['-c', BASE_CHECK], { reject: false, stdin: 'ignore', timeout: 60_000 });
  if (r.exitCode !== 0) {
    const code = (r as { code?: string }).code;
    return {
      ok: false,
      why:
        code === 'ENOENT'
          ? 'not found (ENOENT)'
          : `exit ${r.exitCode ?? code}: ${(r.stderr || r.shortMessage || '').trim().split('\n').pop()}`,
    };
  }
  let info: { version: number[]; venv: boolean };
  try {
    info = JSON.parse(r.stdout.trim().split('\n').pop() ?? '');
  } catch {
    return { ok: false, why: `unexpected output: ${r.stdout.slice(0, 200)}` };
  }
  const version = info.version.join('.');
  const [major = 0, minor = 0] = info.version;
  if (major < MINIMUM_PYTHON[0] || (major === MINIMUM_PYTHON[0] && minor < MINIMUM_PYTHON[1]))
    return { ok: false, why: `Python ${version} is too old (the trainer needs Python ≥ ${MINIMUM_PYTHON.join('.')})` };
  if (!info.venv)
    return {
      ok: false,
      why: `Python ${version} has no venv/ensurepip module (on Debian or Ubuntu: sudo apt install python3-venv)`,
    };
  return { ok: true, version };
}

/** A pip line worth showing as progress ("Collecting torch==2.15.0", "Downloading …", "Installing collected packages"). */
function pipProgress(line: string): string | undefined {
  const t = line.trim();
  if (
    /^(Collecting|Downloading|Installing collected packages|Successfully installed|Requirement already satisfied|Processing|Building wheel)/.test(
      t,
    )
  )
    return t.length > 160 ? `${t.slice(0, 157)}…` : t;
  return undefined;
}

/** Makes (or updates) the trainer's environment; resolves with the checked interpreter, or rejects with SetupError. */
export async function setupTrainerEnv(o: SetupOptions): Promise<SetupResult> {
  const logFile = join(o.venvDir, 'sas-setup.log');
  const lines: string[] = [];
  let file: ReturnType<typeof createWriteStream> | undefined;
  const log = (line: string) => {
    lines.push(line);
    file?.write(`${line}\n`);
    o.onLog?.(line);
  };
  const progress = (phase: SetupProgress['phase'], message: string) => o.onProgress?.({ phase, message });
  const cancelled = () => new SetupError('cancelled', true);
  const createdHere = !existsSync(venvPython(o.venvDir));

  /** Runs one step, its output streamed line by line to the log; rejects with the last lines when it fails. */
  const step = async (cmd: string, args: string[], what: string, onLine?: (line: string) => void) => {
    if (o.signal?.aborted) throw cancelled();
    log(`$ ${[cmd, ...args].join(' ')}`);
    const child = execa(cmd, args, {
      reject: false,
      stdin: 'ignore',
      all: true,
      buffer: false,
      cancelSignal: o.signal,
      forceKillAfterDelay: 3_000,
      env: { PIP_NO_INPUT: '1', PYTHONUNBUFFERED: '1' },
    });
    const tail: string[] = [];
    let partial = '';
    child.all?.setEncoding('utf8');
    child.all?.on('data', (chunk: string) => {
      const parts = (partial + chunk).split(/\r?\n/);
      partial = parts.pop() ?? '';
      for (const l of parts) {
        log(l);
        tail.push(l);
        if (tail.length > 12) tail.shift();
        onLine?.(l);
      }
    });
    const r = await child;
    if (partial) log(partial);
    if (o.signal?.aborted || r.isCanceled) throw cancelled();
    if (r.exitCode !== 0)
      throw new SetupError(
        `${what} failed (exit ${r.exitCode ?? (r as { code?: string }).code}): ${
          tail
            .filter((l) => l.trim())
            .slice(-4)
            .join(' ⏎ ') || r.shortMessage
        }`,
      );
  };

  try {
    progress('base', 'looking for a Python ≥ 3.10 with venv');
    const refused: string[] = [];
    let base: string | undefined;
    for (const p of o.basePythons) {
      const c = await checkBasePython(p);
      if (c.ok) {
        base = p;
        break;
      }
      refused.push(`${p}: ${c.why}`);
    }
    if (!base)
      throw new SetupError(
        `no Python to make the environment from (Python ≥ ${MINIMUM_PYTHON.join('.')} with venv). Tried:\n  ${refused.join('\n  ') || '(none)'}`,
      );
    if (createdHere) {
      progress('venv', `creating ${o.venvDir}`);
      await step(base, ['-m', 'venv', o.venvDir], 'creating the virtual environment');
    }
    file = createWriteStream(logFile, { flags: 'a' });
    file.write(`${lines.join('\n')}\n`);
    const python = venvPython(o.venvDir);
    progress('install', `installing ${o.requirements}`);
    await step(
      python,
      [
        '-m',
        'pip',
        'install',
        '--disable-pip-version-check',
        '--progress-bar',
        'off',
        '-r',
        o.requirements,
        ...(o.pipArgs ?? []),
      ],
      'pip install',
      (l) => {
        const m = pipProgress(l);
        if (m) progress('install', m);
      },
    );
    progress('check', 'checking the environment');
    const probe = await probePython(python, { needs: o.needs });
    log(
      `${python}: ${probe.ok ? `Python ${probe.python}, torch ${probe.torch}${probe.cuda ? ' (CUDA)' : ''}, transformers ${probe.transformers ?? 'not installed'}, peft ${probe.peft ?? 'not installed'}` : `unusable: ${probe.error}`}`,
    );
    if (!probe.ok) throw new SetupError(`the new environment cannot run the trainer: ${probe.error}`);
    return { python, probe, base, log: logFile };
  } catch (e) {
    if (e instanceof SetupError && e.cancelled && createdHere) {
      file?.end();
      file = undefined;
      await rm(o.venvDir, { recursive: true, force: true });
    }
    throw e;
  } finally {
    file?.end();
  }
}
