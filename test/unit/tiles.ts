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
  for (const d of p.diagnostics) assert.ok(d.start >= offset && d.end <= offset + p.text.length && d.start <= d.end, JSON.stringify(d));
}
