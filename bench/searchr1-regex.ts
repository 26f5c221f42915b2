/**
 * The peer for the parser benchmark: a literal port to JavaScript of Search-R1's regex post-processing of a
 * rollout — per turn `postprocess_predictions` (first `<(search|answer)>(.*?)</\1>`), `extract_solution`,
 * `extract_information_blocks` and `is_valid_sequence` (verl/utils/reward_score/qa_em_format.py), the same
 * facts our parser yields for one rollout.
 */
const TAG_SPLIT = /(<\/?(?:think|search|information|answer)>)/;
const TAG_RE = /^<\/?(?:think|search|information|answer)>$/;

export function isValidSequence(text: string): [boolean, string] {
  const am = /<\|im_start\|>assistant\s*/.exec(text);
  if (!am) return [false, 'Missing assistant marker'];
  const content = text.slice(am.index + am[0].length);
  for (const tag of ['think', 'search', 'information', 'answer']) {
    const opening = content.split(`<${tag}>`).length - 1;
    const closing = content.split(`</${tag}>`).length - 1;
    if (opening !== closing) return [false, `Mismatch in ${tag} tags: ${opening} opening vs ${closing} closing tags`];
  }
  const parts = content.split(TAG_SPLIT);
  let state = 'start';
  for (const part of parts) {
    if (!part.trim()) continue;
    if (TAG_RE.test(part)) {
      if (part === '<think>' && (state === 'start' || state === 'information')) state = 'in_think';
      else if (part === '</think>' && state === 'in_think') state = 'after_think';
      else if (part === '<search>' && state === 'after_think') state = 'in_search';
      else if (part === '</search>' && state === 'in_search') state = 'after_search';
      else if (part === '<information>' && state === 'after_search') state = 'in_information';
      else if (part === '</information>' && state === 'in_information') state = 'information';
      else if (part === '<answer>' && state === 'after_think') state = 'in_answer';
      else if (part === '</answer>' && state === 'in_answer') state = 'end';
      else return [false, `Unexpected tag ${part} in state ${state}`];
    } else if (state === 'in_think' || state === 'in_search' || state === 'in_information' || state === 'in_answer') {
      // content allowed
    } else if (state === 'start' || state === 'after_think' || state === 'after_search' || state === 'information') {
      if (part.trim()) return [false, `Unexpected content '${part.trim()}' between tags (state: ${state})`];
    } else return [false, `Unexpected content in state ${state}`];
  }
  if (state !== 'end') return [false, `Incomplete sequence, ended in state ${state}`];
  return [true, 'Valid sequence format'];
}

export function extractSolution(s: string): string | null {
  const m = [...s.matchAll(/<answer>([\s\S]*?)<\/answer>/g)];
  return m.length <= 1 ? null : m[m.length - 1]![1]!.trim();
}

export function extractInformationBlocks(s: string): string[] {
  return [...s.matchAll(/<information>([\s\S]*?)<\/information>/g)].map((m) => m[1]!.trim());
}

/** Turn actions: the response split at its observations, then `postprocess_predictions` on each turn. */
export function turnActions(response: string): (string | null)[] {
  const turns = response.split(
    /<information>[\s\S]*?<\/information>|My previous action is invalid\.[^\n]*Let me try again\./,
  );
  return turns.map((t) => {
    const m = /<(search|answer)>([\s\S]*?)<\/\1>/.exec(t);
    return m ? m[1]! : null;
  });
}

export function searchR1Process(prompt: string, response: string) {
  return {
    valid: isValidSequence(prompt + response)[0],
    answer: extractSolution(prompt + response),
    information: extractInformationBlocks(response).length,
    actions: turnActions(response),
  };
}
