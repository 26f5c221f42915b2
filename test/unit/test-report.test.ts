/** `npm test` prints what failed in each failed suite again after its summary: CI keeps only the tail of the output. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

type Report = (output: string) => string;
const load = async (): Promise<Report> =>
  ((await import(pathToFileURL(join(__dirname, '../../scripts/failure-report.mjs')).href)) as { failureReport: Report })
    .failureReport;

describe("the test runner's failure report", () => {
  it("finds mocha's failing block, pytest's short summary and tsc's errors; otherwise the last lines; capped", async () => {
    const failureReport = await load();
    const mocha = [
      '  ✔ a',
      '  ✔ b',
      '',
      '  41 passing (5m)',
      '  1 failing',
      '',
      '  1) suite',
      '       the test:',
      '     AssertionError: 1 == 2',
      '      at x (a.ts:3:4)',
    ].join('\n');
    assert.equal(failureReport(`\x1b[32m${mocha}\x1b[0m`), mocha.split('\n').slice(4).join('\n'));
    const pytest = [
      '....F.',
      '=== FAILURES ===',
      'E  assert 0',
      '',
      '=== short test summary info ===',
      'FAILED tests/test_a.py::test_b - assert 0',
      '1 failed, 5 passed in 2s',
    ].join('\n');
    assert.equal(
      failureReport(pytest),
      ['=== short test summary info ===', 'FAILED tests/test_a.py::test_b - assert 0', '1 failed, 5 passed in 2s'].join(
        '\n',
      ),
    );
    assert.equal(
      failureReport('src/a.ts(3,4): error TS2322: no\nnoise\nsrc/b.ts(1,1): error TS1005: x'),
      'src/a.ts(3,4): error TS2322: no\nsrc/b.ts(1,1): error TS1005: x',
    );
    const other = Array.from({ length: 100 }, (_, i) => `line ${i}`).join('\n');
    assert.equal(failureReport(other).split('\n')[0], 'line 60');
    const long = failureReport(['  2 failing', ...Array.from({ length: 300 }, (_, i) => `x${i}`)].join('\n')).split(
      '\n',
    );
    assert.equal(long.length, 121);
    assert.match(long[120]!, /… 181 more lines/);
  });
});
