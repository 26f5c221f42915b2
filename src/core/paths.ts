/** Where the package's own files are (dist/ bundles, src/ when run from source, the installed extension). */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

let root: string | undefined;

/** The directory holding our package.json, found by walking up from this module. */
export function packageRoot(): string {
  if (root) return root;
  let dir = __dirname;
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if (JSON.parse(readFileSync(pkg, 'utf8')).name === 'search-agent-studio') return (root = dir);
      } catch {
        /* keep walking */
      }
    }
    const up = dirname(dir);
    if (up === dir) throw new Error(`cannot find the search-agent-studio package above ${__dirname}`);
    dir = up;
  }
}

/** The demo corpus that ships with the project (the embedded default for the env server). */
export function demoCorpusPath(): string {
  return join(packageRoot(), 'examples', 'demo', 'corpus.jsonl');
}
