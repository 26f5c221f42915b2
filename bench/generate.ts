/**
 * Realistic synthetic Search-R1 rollouts for benchmarks: think/search/information/answer turns, three
 * ~100-word documents per search (documents dominate a rollout's length, as in real ones), an occasional
 * invalid action, tags inside documents, and token arrays when asked. With `dialect: 'toolcall'` the same
 * content (same seed, same draws) as chat-template tool calls in the Qwen2.5 layout: `<tool_call>` JSON, tool
 * responses in user turns, a malformed call answered by an error where Search-R1 has an invalid action.
 */
import { INVALID_ACTION_MESSAGE } from '../src/core/tags/parser';
import { rng } from './util';

const WORDS = (
  'the of and in to a was is for on as by with he that at from his it an were are which this be or has had first not ' +
  'observatory river town founded surveyor council harbour league season album director province island railway ' +
  'village century bridge museum novel captain district championship festival treaty dynasty cathedral orchestra'
).split(' ');

export interface GenOptions {
  seed?: number;
  tokens?: boolean;
  dialect?: 'searchr1' | 'toolcall';
}

export function makeRollouts(
  count: number,
  options: GenOptions = {},
): { response: string; prompt: string; record: (i: number) => string }[] {
  const r = rng(options.seed ?? 1);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
  const words = (n: number) => Array.from({ length: n }, () => pick(WORDS)).join(' ');
  const out: { response: string; prompt: string; record: (i: number) => string }[] = [];
  for (let k = 0; k < count; k++) {
    const question = `${words(8)}?`;
    const tool = options.dialect === 'toolcall';
    const prompt = tool
      ? `<|im_start|>system\n# Tools\n\n<tools>\n{"type": "function", "function": {"name": "search"}}\n</tools><|im_end|>\n<|im_start|>user\nAnswer the given question. Question: ${question}<|im_end|>\n<|im_start|>assistant\n`
      : `<|im_start|>user\nAnswer the given question. For example, <answer> Beijing </answer>. Question: ${question}\n<|im_end|>\n<|im_start|>assistant\n`;
    const reply = (body: string) =>
      `<|im_end|>\n<|im_start|>user\n<tool_response>\n${body}\n</tool_response><|im_end|>\n<|im_start|>assistant\n`;
    let response = '';
    const searches = 1 + Math.floor(r() * 3);
    for (let s = 0; s < searches; s++) {
      response += `<think>${words(15 + Math.floor(r() * 30))}</think>\n`;
      if (r() < 0.08) {
        const junk = words(6);
        response += tool
          ? `<tool_call>\n{"name": "search", "arguments": {"query": "${junk}"}\n</tool_call>${reply('Error when executing tool: invalid JSON')}`
          : `${junk}\n\n${INVALID_ACTION_MESSAGE}\n`;
        continue;
      }
      const query = words(4);
      let docs = '';
      for (let d = 1; d <= 3; d++) {
        const inner = r() < 0.1 ? ` <answer>${words(2)}</answer> ` : ' ';
        docs += `Doc ${d}(Title: "${words(2)}") ${words(50)}${inner}${words(50)}\n`;
      }
      response += tool
        ? `<tool_call>\n{"name": "search", "arguments": {"query": "${query}"}}\n</tool_call>${reply(docs.trimEnd())}`
        : `<search> ${query} </search>\n\n<information>${docs.trimEnd()}</information>\n\n`;
    }
    response += `<think>${words(12)}</think>\n<answer> ${words(2)} </answer>${tool ? '<|im_end|>' : ''}`;
    const reward = r() < 0.4 ? 1 : 0;
    const group = Math.floor(k / 5);
    out.push({
      prompt,
      response,
      record: (i: number) =>
        JSON.stringify({
          v: 1,
          id: `r${i}`,
          step: 1 + Math.floor(i / 320),
          group,
          sample: k % 5,
          split: 'train',
          question,
          golden: [words(2)],
          data_source: pick(['nq', 'hotpotqa', 'demo']),
          prompt,
          response,
          reward,
          reward_parts: { em: reward },
          finish: 'answer',
          turns: searches + 1,
          searches,
          ...(options.tokens ? tokenArrays(response, r) : {}),
        }),
    });
  }
  return out;
}

function tokenArrays(response: string, r: () => number) {
  const text = response.match(/\S+\s*/g) ?? [];
  return {
    tokens: {
      text,
      ids: text.map(() => Math.floor(r() * 150000)),
      role: text.map(() => 'generated'),
      loss_mask: text.map(() => 1),
      logprob: text.map(() => Number((-r() * 3).toFixed(4))),
    },
  };
}
