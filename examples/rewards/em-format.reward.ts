// Search-R1's qa_em_format: exact match plus format credit (structure 0.2, final format 0.1, retrieval 0).
// This uses the response's last <answer>; `searchR1EmFormat` reproduces Search-R1 exactly, including its
// extraction from prompt + response that needs the prompt's example answer.
import { defineReward, emFormat } from 'search-agent-studio/reward';

export default defineReward({
  name: 'exact match + format (Search-R1 qa_em_format)',
  score(traj, example) {
    return emFormat(traj, example, { structureFormatScore: 0.2, finalFormatScore: 0.1, retrievalScore: 0 });
  },
});
