// Exact match (Search-R1's em_check): 1 when the final answer equals a golden answer after normalisation.
import { defineReward, em } from 'search-agent-studio/reward';

export default defineReward({
  name: 'exact match',
  score(traj, example) {
    return traj.answer === null ? 0 : em(traj.answer, example.golden);
  },
});
