/** The processes benchmarks start: the real env server on a free loopback port, and a trainer module run with the
 * project's Python (`SAS_PYTHON` picks another), its last stdout line being the result. */
import { spawn } from 'node:child_process';
import { join } from 'node:path';

/** The env server (src/server/main.ts) with `args` (its options), listening on a free port. */
export async function envServer(root: string, args: string[]): Promise<{ url: string; stop: () => void }> {
  const child = spawn(
    process.execPath,
    ['-r', join(root, 'test', 'register.cjs'), join(root, 'src', 'server', 'main.ts'), '--port', '0', ...args],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  const port = await new Promise<number>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d;
      if (buf.includes('\n')) resolve(JSON.parse(buf.split('\n')[0]!).port);
    });
    child.once('exit', () => reject(new Error('the env server exited before listening')));
  });
  return { url: `http://127.0.0.1:${port}`, stop: () => child.kill() };
}

/** `python -m search_agent_trainer.<module> …args`; resolves to its stdout (stderr passes through). */
export function trainerModule(root: string, module: string, args: string[]): Promise<string> {
  const exe = process.env.SAS_PYTHON ?? join(root, '.venv', 'bin', 'python');
  const name = `search_agent_trainer.${module}`;
  const child = spawn(exe, ['-m', name, ...args], {
    cwd: root,
    env: { ...process.env, PYTHONPATH: join(root, 'trainer') },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${exe} -m ${name} exited with ${code}`)),
    );
  });
}

/** The JSON object on the last line of a benchmark module's stdout. */
export function lastJson<T>(out: string): T {
  return JSON.parse(out.trim().split('\n').pop()!) as T;
}
