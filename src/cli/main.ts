/** Entry point of `dist/cli.js` (the `search-agent-studio` bin). */
import { main } from './cli';

// Piped into `head` and the like: a closed stdout ends the program quietly.
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(0);
  throw e;
});

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (e: Error) => {
    process.stderr.write(`search-agent-studio: ${e.message}\n`);
    process.exitCode = 2;
  },
);
