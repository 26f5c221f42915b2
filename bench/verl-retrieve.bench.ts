/**
 * veRL's agent-loop searches against the real env server (`npm run bench verl-retrieve`):
 * trainer/search_agent_trainer/engines/verl/retrieve_benchmark.py, one worker's 320 trajectories × 4 turns of one
 * query each (Search-R1's 2,560 a turn over 8 workers), one `/retrieve` request per query (the agent loop before)
 * vs coalesced into batched requests (engines/verl/batching.py), same queries, same hits checked. `SAS_PYTHON`
 * picks the interpreter (no veRL needed).
 */
import { join } from 'node:path';
import { envServer, lastJson, trainerModule } from './processes';
import { fmt, report } from './util';

interface Side {
  queries: number;
  queries_per_s: { one_per_query: number; coalesced: number };
  ratio: number;
  requests: { one_per_query: number; coalesced: number };
  same_hits: boolean;
}

export async function run(): Promise<string[]> {
  const lines: string[] = [];
  const root = join(__dirname, '..');
  const env = await envServer(root, []);
  try {
    const r = lastJson<{ trajectories: number; turns: number; burst: Side; staggered: Side & { spread_ms: number } }>(
      await trainerModule(root, 'engines.verl.retrieve_benchmark', ['--env-url', env.url]),
    );
    const b = r.burst;
    const s = r.staggered;
    if (!b.same_hits || !s.same_hits)
      throw new Error('coalesced searches returned other hits than one request per query');
    report(
      lines,
      `veRL agent-loop searches, ${r.trajectories} trajectories × ${r.turns} turns ending together: coalesced ${Math.round(b.queries_per_s.coalesced)} queries/s in ${b.requests.coalesced} requests vs one request per query ${Math.round(b.queries_per_s.one_per_query)} queries/s in ${b.requests.one_per_query} → ${fmt.ratio(b.ratio)}`,
    );
    report(
      lines,
      `veRL agent-loop searches, turns ending over ${s.spread_ms} ms: ${s.requests.coalesced} requests vs ${s.requests.one_per_query} (${fmt.ratio(s.requests.one_per_query / s.requests.coalesced)} fewer), ${Math.round(s.queries_per_s.coalesced)} vs ${Math.round(s.queries_per_s.one_per_query)} queries/s → ${fmt.ratio(s.ratio)} (the turns' spread bounds both)`,
    );
  } finally {
    env.stop();
  }
  return lines;
}
