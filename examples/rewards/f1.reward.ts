// SQuAD token F1 against the best golden answer, with the exact match as a part for comparison.
import { defineReward, em, f1 } from 'search-agent-studio/reward';

export default defineReward({
  name: 'token F1',
  score(traj, example) {
    if (traj.answer === null) return { reward: 0, parts: { em: 0, f1: 0 } };
    const value = f1(traj.answer, example.golden);
    return { reward: value, parts: { em: em(traj.answer, example.golden), f1: value } };
  },
});
