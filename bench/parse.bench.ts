/** Parser throughput vs a port of Search-R1's regex post-processing, on the same realistic rollouts. */
import { parseTrajectory } from '../src/core/tags/parser';
import { finalAnswer, turnsOf } from '../src/core/tags/searchr1';
import { makeRollouts } from './generate';
import { searchR1Process } from './searchr1-regex';
import { fmt, report, versus } from './util';

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const rollouts = makeRollouts(4000, { seed: 7 });
  const bytes = rollouts.reduce((n, r) => n + r.response.length, 0);
  console.log(`parse: ${rollouts.length} rollouts, ${(bytes / 1e6).toFixed(1)} MB of responses`);
  let sink = 0;
  const ours = () => {
    for (const r of rollouts) {
      const p = parseTrajectory(r.response);
      sink += p.segments.length + p.diagnostics.length + (finalAnswer(p)?.length ?? 0);
    }
  };
  const oursWithTurns = () => {
    for (const r of rollouts) {
      const p = parseTrajectory(r.response);
      sink += turnsOf(p).length + (finalAnswer(p)?.length ?? 0);
    }
  };
  const peer = () => {
    for (const r of rollouts) {
      const x = searchR1Process(r.prompt, r.response);
      sink += x.actions.length + (x.answer?.length ?? 0) + x.information;
    }
  };
  const [a, b] = await versus(['ours', ours], ['Search-R1 regex port', peer]);
  report(lines, `parse (segments + diagnostics + final answer): ${fmt.mbps(bytes, a.seconds)} vs Search-R1 regex port ${fmt.mbps(bytes, b.seconds)} → ${fmt.ratio(b.seconds / a.seconds)} its speed`);
  const [c, d] = await versus(['ours+turns', oursWithTurns], ['Search-R1 regex port', peer]);
  report(lines, `parse + per-turn Search-R1 actions: ${fmt.mbps(bytes, c.seconds)} vs ${fmt.mbps(bytes, d.seconds)} → ${fmt.ratio(d.seconds / c.seconds)} its speed`);
  if (sink === -1) console.log(sink);
  return lines;
}
