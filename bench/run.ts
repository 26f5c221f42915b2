/**
 * `npm run bench [name…]`: every benchmark (bench/*.bench.ts), or the named ones. Each prints its numbers as
 * ratios against a peer measured in the same run; the summary at the end is what docs/benchmarks.md records.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

async function main() {
  const only = process.argv.slice(2);
  const files = readdirSync(__dirname)
    .filter((f) => f.endsWith('.bench.ts'))
    .filter((f) => only.length === 0 || only.includes(f.replace('.bench.ts', '')))
    .sort();
  const summary: string[] = [];
  for (const f of files) {
    console.log(`\n━━━ ${f}`);
    const mod = require(join(__dirname, f)) as { run(): Promise<string[]> };
    for (const line of await mod.run()) summary.push(`${f.replace('.bench.ts', '')}: ${line}`);
  }
  console.log(`\n━━━ summary (node ${process.versions.node}, ${require('node:os').cpus().length} cores)`);
  for (const line of summary) console.log(`  ${line}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
