/**
 * Finding a Python that can run the trainer, and saying exactly what it has. Spawns with argument arrays
 * (never a shell string).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';

export interface PythonProbe {
  executable: string;
  /** True when the interpreter ran and imported torch. */
  ok: boolean;
  python?: string;
  torch?: string;
  cuda?: boolean;
  cudaDevices?: string[];
  /** Versions of the optional packages, or null when absent. */
  transformers?: string | null;
  peft?: string | null;
  /** TRL, for engine "trl" (trainer/requirements-trl.txt). */
  trl?: string | null;
  /** veRL's version (engine "verl": its own environment, .venv-verl), or null when absent. */
  verl?: string | null;
  /** Why it is not usable (not found, no torch, timed out, …). */
  error?: string;
}

const PROBE_SCRIPT = `
import json, sys
out = {"python": sys.version.split()[0]}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = bool(torch.cuda.is_available())
    out["cudaDevices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if out["cuda"] else []
except Exception as e:
    out["error"] = "cannot import torch: %s: %s" % (type(e).__name__, e)
from importlib import metadata
for name in ("transformers", "peft", "trl", "verl"):
    try:
        out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
`;

export async function probePython(executable: string, timeoutMs = 120_000): Promise<PythonProbe> {
  try {
    const r = await execa(executable, ['-c', PROBE_SCRIPT], { timeout: timeoutMs, reject: false, stdin: 'ignore' });
    if (r.failed && r.exitCode === undefined) {
      const code = (r as { code?: string }).code;
      const why = r.timedOut
        ? `timed out after ${timeoutMs} ms`
        : code === 'ENOENT'
          ? 'not found (ENOENT)'
          : code === 'EACCES'
            ? 'not executable (EACCES)'
            : (r.originalMessage ?? r.shortMessage);
      return { executable, ok: false, error: why };
    }
    const last = r.stdout.trim().split('\n').pop() ?? '';
    let parsed: Omit<PythonProbe, 'executable' | 'ok'>;
    try {
      parsed = JSON.parse(last);
    } catch {
      return { executable, ok: false, error: `exit ${r.exitCode}: ${(r.stderr || r.stdout).trim().split('\n').slice(-3).join(' | ')}` };
    }
    return { executable, ok: parsed.error === undefined && parsed.torch !== undefined, ...parsed };
  } catch (e) {
    return { executable, ok: false, error: (e as Error).message };
  }
}

/**
 * Where to look for the trainer's Python, in order: what the user named (a setting, --python, the Python
 * extension's interpreter), SAS_PYTHON, the project's own .venv (made by scripts/setup.sh), python3 on PATH,
 * /usr/bin/python3. Duplicates removed.
 */
export function pythonCandidates(named: (string | undefined)[] = [], root?: string): string[] {
  const out: string[] = [];
  const add = (p: string | undefined) => {
    if (p && !out.includes(p)) out.push(p);
  };
  named.forEach(add);
  add(process.env.SAS_PYTHON);
  if (root) add(join(root, '.venv', 'bin', 'python'));
  add('python3');
  add('/usr/bin/python3');
  return out.filter((p) => !p.includes('/') || existsSync(p) || named.includes(p));
}

export interface PythonSearch {
  found?: PythonProbe;
  tried: PythonProbe[];
}

/** The first candidate that imports torch, and what each one tried said. */
export async function findPython(candidates: string[]): Promise<PythonSearch> {
  const tried: PythonProbe[] = [];
  for (const c of candidates) {
    const probe = await probePython(c);
    tried.push(probe);
    if (probe.ok) return { found: probe, tried };
  }
  return { tried };
}

/** The message when no Python works: what was tried and what to do. */
export function noPythonMessage(search: PythonSearch): string {
  return [
    'No Python with torch was found. Tried:',
    ...search.tried.map((p) => `  ${p.executable}: ${p.error ?? 'unusable'}`),
    'Run `bash scripts/setup.sh` (it makes .venv with torch), or set searchAgent.pythonPath / pass --python to a Python that has torch.',
  ].join('\n');
}
