/** Entry point of `dist/server.js` (spawned by the extension and the CLI): `node dist/server.js [--port N]`. */
import { runServer } from './run';

runServer(process.argv.slice(2)).catch((e: Error) => {
  const code = (e as NodeJS.ErrnoException).code;
  process.stderr.write(`[env-server] ${code === 'EADDRINUSE' ? 'port already in use: ' : ''}${e.message}\n`);
  process.exit(2);
});
