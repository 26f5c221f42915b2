/**
 * readLines on huge lines (issue 40, item 8): a line that spans many chunks costs linear work — each byte looked at for
 * a newline once and copied at most once (asserted on the splitter's counters, not on time) — and a line too long
 * to become a string is reported and skipped, with its line number, while the lines around it are read.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSource } from '../../src/core/importers';
import { LineSplitter, readLines, tooLongMessage } from '../../src/core/store/jsonl';

describe('line splitting', () => {
  it('reads a line spanning thousands of chunks with each byte scanned once and copied at most once', () => {
    const total = 32 * 1024 * 1024;
    const chunk = 8 * 1024; // 4,096 chunks: the old carry-and-rescan loop looked at ~4,096 × 16 MB = 64 GB
    const s = new LineSplitter();
    const buf = Buffer.alloc(chunk, 0x61);
    const lines = [];
    for (let at = 0; at < total; at += chunk) lines.push(...s.push(buf));
    lines.push(...s.push(Buffer.from('\n{"b":1}\n')));
    assert.equal(lines.length, 2);
    assert.equal(lines[0]!.text.length, total);
    assert.equal(lines[1]!.text, '{"b":1}');
    assert.equal(s.stats.scanned, total + 9, 'each byte looked at once');
    assert.ok(s.stats.copied <= total, `each byte copied at most once (${s.stats.copied})`);
  });

  it('keeps CRLF, blank lines, line numbers and a last line without a newline as before', () => {
    const s = new LineSplitter();
    const out = [
      ...s.push(Buffer.from('a\r\n\n  \r\nb')),
      ...s.push(Buffer.from('c\r')),
      ...s.push(Buffer.from('\nd')),
      ...s.end(),
    ];
    assert.deepEqual(out, [
      { line: 1, text: 'a' },
      { line: 3, text: '  ' },
      { line: 4, text: 'bc' },
      { line: 5, text: 'd' },
    ]);
  });

  it('reports a line longer than the longest string as too long (its size, not its text) and reads on', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sas-lines-'));
    const file = join(dir, 'rollouts.jsonl');
    const ok = (id: string) => JSON.stringify({ v: 2, id, prompt: 'q', response: '<answer>a</answer>' });
    writeFileSync(
      file,
      `${ok('a')}\n{"v":2,"id":"huge","prompt":"${'x'.repeat(300_000)}","response":""}\n${ok('b')}\n`,
    );
    const items = [];
    for await (const l of readLines(file, undefined, { chunkBytes: 4096, maxLineBytes: 100_000 })) items.push(l);
    assert.deepEqual(
      items.map((l) => [l.line, l.tooLong ?? l.text.length]),
      [
        [1, ok('a').length],
        [2, 300_045],
        [3, ok('b').length],
      ],
    );
    // The importers' front door reports it with file and line and keeps the others (at the default limit, ~512 MB,
    // this line is read; the message is the same for a real 600 MB one).
    assert.match(
      tooLongMessage(600 * 2 ** 20),
      /^the line is 600 MB, longer than the longest line that can be read \(\d+ MB\): skipped$/,
    );
    const ids = [];
    for await (const it of readSource(file)) ids.push(it.record?.id);
    assert.deepEqual(ids, ['a', 'huge', 'b']);
  });
});
