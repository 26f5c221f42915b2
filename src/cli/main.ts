/** Entry point of `dist/cli.js` (the `search-agent-studio` bin). */
import { main } from './cli';

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (e: Error) => {
    process.stderr.write(`search-agent-studio: ${e.message}\n`);
    process.exitCode = 2;
  },
);
