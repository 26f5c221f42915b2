/** `search-agent-studio serve`: the env server (src/server) in the foreground, with its options' help. */
import { SERVE_OPTIONS, type ServeValues, serve, UsageError } from '../server/run';
import { defineCommand } from './command';

export const serveCommand = defineCommand({
  command: 'serve',
  describe:
    "run the env server (Search-R1's /retrieve, /reward, /health) on 127.0.0.1; with nothing named: BM25 over the demo corpus",
  builder: (y) => {
    for (const [name, o] of Object.entries(SERVE_OPTIONS))
      y.option(name, { type: 'string', describe: o.describe, ...('default' in o ? { default: o.default } : {}) });
    return y as typeof y & { argv: ServeValues };
  },
  run: async (a, io) => {
    try {
      await serve(a as unknown as ServeValues);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (e instanceof UsageError || code === 'ENOENT' || code === 'EADDRINUSE') {
        io.err(
          `search-agent-studio serve: ${code === 'EADDRINUSE' ? 'port already in use: ' : ''}${(e as Error).message}\n`,
        );
        return 2;
      }
      throw e;
    }
    return -1; // keeps running until a signal
  },
});
