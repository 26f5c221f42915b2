/**
 * Finding a Python that can run the trainer, and saying exactly what it has. Spawns with argument arrays
 * (never a shell string).
 */
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
for name in ("transformers", "peft"):
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
