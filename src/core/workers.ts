/** Worker threads of the package's own programs, bundled or run from source. */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Worker, type WorkerOptions } from 'node:worker_threads';

/**
 * A worker running `bundle` from `dir` (the caller's `__dirname`: dist/ when bundled, where esbuild writes the worker
 * beside the bundle that spawns it), or — running from source (tests) — `source` from `dir` through the test register.
 */
export function spawnWorker(dir: string, bundle: string, source: string, options: WorkerOptions = {}): Worker {
  const bundled = join(dir, bundle);
  if (existsSync(bundled)) return new Worker(bundled, options);
  const register = join(__dirname, '..', '..', 'test', 'register.cjs');
  return new Worker(`require(${JSON.stringify(register)}); require(${JSON.stringify(join(dir, source))});`, {
    ...options,
    eval: true,
  });
}
