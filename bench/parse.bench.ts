/**
 * Parser throughput vs a port of Search-R1's regex post-processing, on the same realistic rollouts; and the
 * tool-call dialect vs the same content in tags (goal: at least half as fast), both detected as they would be.
 */
import { parseTrajectory } from '../src/core/tags/parser';
import { finalAnswer, turnsOf } from '../src/core/tags/searchr1';
import { invalidActionCount, parseResponse, searchQueries } from '../src/core/tags/trajectory';
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
  report(
    lines,
    `parse (segments + diagnostics + final answer): ${fmt.mbps(bytes, a.seconds)} vs Search-R1 regex port ${fmt.mbps(bytes, b.seconds)} → ${fmt.ratio(b.seconds / a.seconds)} its speed`,
  );
  const [c, d] = await versus(['ours+turns', oursWithTurns], ['Search-R1 regex port', peer]);
  report(
    lines,
    `parse + per-turn Search-R1 actions: ${fmt.mbps(bytes, c.seconds)} vs ${fmt.mbps(bytes, d.seconds)} → ${fmt.ratio(d.seconds / c.seconds)} its speed`,
  );

  // The same content as tool calls: per trajectory, what every instrument reads (dialect detected from prompt
  // and response, segments, call JSON, turns, searches, invalid actions, final answer).
  const calls = makeRollouts(4000, { seed: 7, dialect: 'toolcall' });
  const read = (rs: typeof rollouts) => () => {
    for (const r of rs) {
      const p = parseResponse(r.response, { prompt: r.prompt });
      const turns = turnsOf(p);
      sink += turns.length + searchQueries(p).length + invalidActionCount(p, turns) + (finalAnswer(p)?.length ?? 0);
    }
  };
  const [t, s] = await versus(['tool calls', read(calls)], ['same content in tags', read(rollouts)]);
  const callBytes = calls.reduce((n, r) => n + r.response.length, 0);
  report(
    lines,
    `tool-call trajectories (Qwen2.5 layout, ${(callBytes / 1e6).toFixed(1)} MB) read in ${fmt.ms(t.seconds)} vs the same content in tags in ${fmt.ms(s.seconds)} → ${fmt.ratio(s.seconds / t.seconds)} its speed (goal ≥ 0.50×)`,
  );
  if (sink === -1) console.log(sink);
  return lines;
}
