// Scratch directories for tests: made under the OS temp dir and removed when the test process exits, passed or
// failed, so a run of the suites leaves nothing in /tmp (before this, each full run left ~25 directories, 16 MB
// each for the CLI demo's). SAS_KEEP_TMP=1 (or the e2e harness's SAS_E2E_KEEP=1) keeps them and prints where they
// are, to look at after a failure.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const made: string[] = [];
let hooked = false;

function keep(): boolean {
  return Boolean(process.env.SAS_KEEP_TMP || process.env.SAS_E2E_KEEP);
}

function removeAll(): void {
  if (keep()) {
    if (made.length)
      process.stderr.write(
        `kept ${made.length} scratch director${made.length === 1 ? 'y' : 'ies'}:\n${made.map((d) => `  ${d}\n`).join('')}`,
      );
    return;
  }
  for (const dir of made.splice(0)) {
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      // a child still writing into it, or already gone: nothing a test can do at exit
    }
  }
}

/** A fresh directory `<tmp>/<prefix>XXXXXX`, removed when this process exits (unless SAS_KEEP_TMP=1). */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  if (!hooked) {
    hooked = true;
    process.once('exit', removeAll);
  }
  made.push(dir);
  return dir;
}
