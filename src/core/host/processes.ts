/**
 * The two child processes of a run — the env server (`node dist/server.js`) and the trainer
 * (`python -m search_agent_trainer`) — spawned with argument arrays (never a shell string), each in its own
 * process group so that stopping kills the whole tree, and each told our pid (SAS_PARENT_PID) so that it stops by
 * itself if we die without stopping it.
 */
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { packageRoot } from '../paths';

export type LogSink = (line: string) => void;

/** Signals a process group (falls back to the process alone); false when nothing was there. */
export function killTree(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pid, signal);
    return true;
  } catch {
    try {
      process.kill(pid, signal);
      return true;
    } catch {
      return false;
    }
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Calls `onLine` for every complete line of a stream; the tail without a newline at the end. */
function lines(stream: NodeJS.ReadableStream | null | undefined, onLine: (line: string) => void): void {
  if (!stream) return;
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    rest += chunk;
    let i: number;
    while ((i = rest.indexOf('\n')) >= 0) {
      onLine(rest.slice(0, i).replace(/\r$/, ''));
      rest = rest.slice(i + 1);
    }
  });
  stream.on('end', () => {
    if (rest) onLine(rest);
    rest = '';
  });
}

/** The last `size` lines seen (for error messages). */
export class Tail {
  readonly lines: string[] = [];
  constructor(private readonly size = 40) {}
  push(line: string): void {
    this.lines.push(line);
    if (this.lines.length > this.size) this.lines.shift();
  }
  text(n = this.size): string {
    return this.lines.slice(-n).join('\n');
  }
}

export interface Exit {
  code: number | null;
  signal: string | null;
}

/** A spawned child: its pid, how it ended, and a graceful stop (SIGTERM to its group, then SIGKILL after grace). */
export class Child {
  readonly exited: Promise<Exit>;
  private ended = false;
  readonly stderr = new Tail();

  constructor(
    readonly name: string,
    readonly proc: ResultPromise,
  ) {
    this.exited = proc.then(
      (r) => ({ code: r.exitCode ?? null, signal: r.signal ?? null }),
      (e: { exitCode?: number; signal?: string }) => ({ code: e.exitCode ?? null, signal: e.signal ?? null }),
    );
    void this.exited.then(() => (this.ended = true));
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  get running(): boolean {
    return !this.ended;
  }

  /** `signal` (SIGTERM) to the process group, then SIGKILL after `graceMs`; resolves when it has exited. */
  async stop(graceMs: number, signal: NodeJS.Signals = 'SIGTERM'): Promise<Exit> {
    if (this.ended) return this.exited;
    killTree(this.pid, signal);
    const timer = setTimeout(() => killTree(this.pid, 'SIGKILL'), graceMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
      // Whatever the child left in its group (workers) goes too.
      killTree(this.pid, 'SIGKILL');
    }
  }
}

export interface SpawnOptions {
  cwd?: string;
  env?: Record<string, string>;
  onStdout?: (line: string) => void;
  onStderr?: LogSink;
  /** `pipe`: the child reads requests from its stdin (`child.proc.stdin`); default `ignore`. */
  stdin?: 'pipe' | 'ignore';
}

export function spawnChild(name: string, file: string, args: string[], options: SpawnOptions = {}): Child {
  const proc = execa(file, args, {
    cwd: options.cwd,
    env: { ...options.env, SAS_PARENT_PID: String(process.pid) },
    extendEnv: true,
    detached: true,
    stdin: options.stdin ?? 'ignore',
    buffer: false,
    reject: false,
    cleanup: true,
  });
  const child = new Child(name, proc);
  lines(proc.stdout, (l) => options.onStdout?.(l));
  lines(proc.stderr, (l) => {
    child.stderr.push(l);
    options.onStderr?.(l);
  });
  return child;
}

export class EnvServerError extends Error {
  constructor(
    message: string,
    readonly stderr: string,
  ) {
    super(message);
    this.name = 'EnvServerError';
  }
}

export interface EnvServerProcess {
  child: Child;
  port: number;
  url: string;
}

/** How to run the env server: a Node and the arguments before the server's own (default: dist/server.js). */
export interface ServerLauncher {
  node: string;
  args: string[];
  /** Extra environment (e.g. ELECTRON_RUN_AS_NODE=1 when `node` is the editor's Electron binary). */
  env?: Record<string, string>;
}

/** The bundled env server script: dist/server.js beside this bundle, or in the package root. */
export function envServerScript(): string {
  return join(packageRoot(), 'dist', 'server.js');
}

/**
 * Starts the env server and waits for its `{"event":"listening","port":N}` line. Rejects with an EnvServerError
 * that says what to do when it exits first (a port in use, a bad index, a reward module that does not compile) or
 * does not come up within `timeoutMs`.
 */
export async function startEnvServerProcess(
  args: string[],
  options: { onLog?: LogSink; timeoutMs?: number; launcher?: ServerLauncher } = {},
): Promise<EnvServerProcess> {
  const timeoutMs = options.timeoutMs ?? 120_000;
  let resolveListening!: (port: number) => void;
  const listening = new Promise<number>((r) => (resolveListening = r));
  const launcher = options.launcher ?? { node: process.execPath, args: [envServerScript()] };
  const child = spawnChild('env server', launcher.node, [...launcher.args, ...args], {
    env: launcher.env,
    onStdout: (line) => {
      try {
        const msg = JSON.parse(line) as { event?: string; port?: number };
        if (msg.event === 'listening' && typeof msg.port === 'number') resolveListening(msg.port);
      } catch {
        options.onLog?.(line);
      }
    },
    onStderr: options.onLog,
  });
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    listening.then((port) => ({ port })),
    child.exited.then((exit) => ({ exit })),
    new Promise<{ timeout: true }>((r) => (timer = setTimeout(() => r({ timeout: true }), timeoutMs))),
  ]);
  clearTimeout(timer);
  if ('port' in outcome) return { child, port: outcome.port, url: `http://127.0.0.1:${outcome.port}` };
  if ('timeout' in outcome) {
    await child.stop(2_000);
    throw new EnvServerError(
      `the env server did not come up within ${Math.round(timeoutMs / 1000)} s (building an index for a large corpus can take longer: build it once with \`search-agent-studio index\` and name it in retriever.index)`,
      child.stderr.text(),
    );
  }
  // Give the stderr stream a moment to drain before reading it.
  await new Promise((r) => setImmediate(r));
  const stderr = child.stderr.text();
  const inUse = /port already in use|EADDRINUSE/.test(stderr);
  const why = inUse
    ? `port ${args[args.indexOf('--port') + 1]} is already in use: choose another port (0 picks a free one) or stop what holds it`
    : `the env server exited (code ${outcome.exit.code ?? outcome.exit.signal}) before listening`;
  throw new EnvServerError(`${why}${stderr ? `:\n${child.stderr.text(8)}` : ''}`, stderr);
}
