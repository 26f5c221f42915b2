// Writes dist/reward-api.d.ts: the reward API's declarations (tsc, from src/core/rewards/api.ts and what it
// imports) as one ambient file declaring the module `search-agent-studio/reward`, for reward modules'
// IntelliSense. Internal modules are renamed under `search-agent-studio/internal/` so they cannot clash.
//   node scripts/reward-types.mjs [out.d.ts]
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

const root = join(import.meta.dirname, '..');
const out = process.argv[2] ?? join(root, 'dist', 'reward-api.d.ts');
execFileSync(
  process.execPath,
  [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.reward-types.json')],
  { stdio: 'inherit' },
);
let text = readFileSync(join(root, 'out', 'reward-types', 'reward-api.d.ts'), 'utf8');
const names = [...text.matchAll(/^declare module "([^"]+)"/gm)].map((m) => m[1]);
for (const name of names) text = text.replaceAll(`"${name}"`, `"search-agent-studio/internal/${name}"`);
const header =
  '// The reward-module API of Search Agent Studio (generated from src/core/rewards/api.ts; do not edit).\n// Reward modules import it as `search-agent-studio/reward`.\n';
text = `${header}${text}\ndeclare module "search-agent-studio/reward" {\n    export * from "search-agent-studio/internal/rewards/api";\n}\n`;
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, text);
console.log(`wrote ${out} (${names.length} modules)`);
