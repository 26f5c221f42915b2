import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MetricsTail } from '../../src/core/host/metricsTail';
import { scratchDir } from '../support/scratch';

describe('metrics tail', () => {
  it('returns only complete new lines, keeps a partial line for later, reports malformed lines by number, restarts when the file shrinks', async () => {
    const file = join(scratchDir('sas-tail-'), 'metrics.jsonl');
    const tail = new MetricsTail(file);
    assert.deepEqual((await tail.read()).rows, [], 'a missing file is not an error');
    writeFileSync(file, '{"step":0,"val/em":0.1}\n{"step":1,"critic/score/mean":0.2}\n{"step":2,');
    let r = await tail.read();
    assert.deepEqual(
      r.rows.map((x) => x.step),
      [0, 1],
    );
    appendFileSync(file, '"x":1}\nnot json\n{"nostep":1}\n');
    r = await tail.read();
    assert.deepEqual(r.rows, [{ step: 2, x: 1 }]);
    assert.deepEqual(
      r.malformed.map((m) => m.line),
      [4, 5],
    );
    assert.deepEqual((await tail.read()).rows, []);
    writeFileSync(file, '{"step":0}\n');
    r = await tail.read();
    assert.equal(r.reset, true);
    assert.deepEqual(r.rows, [{ step: 0 }]);
  });
});
