// Substring exact match (Search-R1's subem_check): 1 when a golden answer occurs in the normalised answer.
import { defineReward, subem } from 'search-agent-studio/reward';

export default defineReward({
  name: 'substring exact match',
  score(traj, example) {
    return traj.answer === null ? 0 : subem(traj.answer, example.golden);
  },
});
