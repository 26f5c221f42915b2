/**
 * The env server as a process: stdout carries one JSON line `{"event":"listening","port":N}`; logs go to
 * stderr; SIGTERM/SIGINT close it. Used by `dist/server.js` and `search-agent-studio serve`.
 */
import { parseArgs } from 'node:util';
import { VERSION } from '../core/version';
import { startEnvServer } from './server';

export async function runServer(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { port: { type: 'string', default: '0' } }, strict: true });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be an integer in 0..65535, got ${values.port}`);
  const server = await startEnvServer({ port, version: VERSION, log: (line) => process.stderr.write(`[env-server] ${line}\n`) });
  process.stdout.write(`${JSON.stringify({ event: 'listening', port: server.port })}\n`);
  const stop = (signal: string) => {
    process.stderr.write(`[env-server] ${signal}: closing\n`);
    void server.close().then(() => process.exit(0));
    setTimeout(() => process.exit(0), 3_000).unref();
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}

