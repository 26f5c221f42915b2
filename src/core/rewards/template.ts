/**
 * The module "Search Agent: New Reward Function" writes (tested: it type-checks against the generated types and
 * scores). Its types come from the extension's TypeScript server plugin (src/ts-plugin), in any workspace.
 */
export function rewardTemplate(name: string): string {
  return `// ${name}: a reward for Search-R1-style trajectories. Edit and save: the Reward Lab re-scores the rollouts.
// \`traj\`: the parsed trajectory (answer, searches, turns, valid format, diagnostics, prompt, response).
// \`example\`: golden answers, question, data source. Return a number or { reward, parts }.
import { defineReward, em, f1 } from 'search-agent-studio/reward';

export default defineReward({
  name: '${name}',
  score(traj, example) {
    if (traj.answer === null) return { reward: 0, parts: { em: 0, format: traj.valid ? 1 : 0 } };
    const exact = em(traj.answer, example.golden);
    // Partial credit for a near miss, a small bonus for a valid format.
    const reward = exact ? 1 : 0.5 * f1(traj.answer, example.golden);
    return { reward: Math.min(1, reward + (traj.valid ? 0.1 : 0)), parts: { em: exact, format: traj.valid ? 1 : 0 } };
  },
});
`;
}
