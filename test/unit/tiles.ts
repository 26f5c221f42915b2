/** Shared by the parser tests: the parser's tiling invariant. */
import assert from 'node:assert/strict';
import type { ParsedTrajectory } from '../../src/core/tags/parser';

/** Every character belongs to exactly one segment, in order; content spans lie inside their segment. */
export function assertTiles(p: ParsedTrajectory, offset = 0): void {
  let at = offset;
  for (const s of p.segments) {
    assert.equal(s.start, at, `segment starts where the previous ended (${JSON.stringify(s)})`);
    assert.ok(s.end >= s.start);
    assert.ok(s.contentStart >= s.start && s.contentEnd <= s.end && s.contentStart <= s.contentEnd, JSON.stringify(s));
    at = s.end;
  }
  assert.equal(at, offset + p.text.length);
  for (const d of p.diagnostics)
    assert.ok(d.start >= offset && d.end <= offset + p.text.length && d.start <= d.end, JSON.stringify(d));
}

/** Random concatenations of `pieces` (0–39 of them; seeded, the same every run), `trials` times. */
export function soup(
  pieces: readonly string[],
  seed: number,
  trials: number,
  each: (text: string, trial: number) => void,
): void {
  const rand = (k: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % k;
  };
  for (let trial = 0; trial < trials; trial++) {
    let text = '';
    const len = rand(40);
    for (let k = 0; k < len; k++) text += pieces[rand(pieces.length)];
    each(text, trial);
  }
}
