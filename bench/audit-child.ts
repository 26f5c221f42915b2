/**
 * `audit <path> --json` in a process of its own, its output discarded: prints {seconds, maxRssMiB, rollouts} as JSON,
 * so the benchmark sees one audit's time and peak memory (bench/searchr1.bench.ts).
 */
import { performance } from 'node:perf_hooks';
import { audit } from '../src/cli/audit';

async function main() {
  const path = process.argv[2]!;
  let rollouts = 0;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const code = await audit(path, {
    json: true,
    out: (s) => {
      if (s.startsWith(',') || s.startsWith('\n{')) rollouts++;
    },
    err: () => {},
  });
  const seconds = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  process.stdout.write(
    `${JSON.stringify({ seconds, cpu: (c.user + c.system) / 1e6, maxRssMiB: process.resourceUsage().maxRSS / 1024, rollouts, code })}\n`,
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
