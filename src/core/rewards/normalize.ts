/**
 * SQuAD/Search-R1 answer normalisation with Python's semantics (verl/utils/reward_score/qa_em.py
 * `normalize_answer`), not JavaScript's defaults:
 *  - `lower()`;
 *  - remove every character of Python's `string.punctuation` (ASCII only; "—", "“", "¿" stay);
 *  - remove whole words `a|an|the` where word boundaries follow Python 3 `re`'s Unicode `\b` (a word character
 *    is a Unicode letter or number or `_`; JavaScript's `\b` is ASCII-only and would split `théa` after `th`);
 *  - `" ".join(text.split())`: collapse Python whitespace (str.isspace).
 */

/** Python's `string.punctuation`. */
export const PYTHON_PUNCTUATION = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
const PUNCT_RE = /[!"#$%&'()*+,\-./:;<=>?@[\\\]^_`{|}~]/g;
/** `\b(a|an|the)\b` with Python's Unicode word characters (letters, numbers, underscore; not marks). */
const ARTICLES_RE = /(?<![\p{L}\p{N}_])(?:a|an|the)(?![\p{L}\p{N}_])/gu;
/** Python `str.split()` separators (str.isspace). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: Python's str.isspace set includes \x1c-\x1f
const PY_WHITESPACE_RE = /[\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/;

export function normalizeAnswer(s: string): string {
  const lowered = s.toLowerCase();
  const noPunct = lowered.replace(PUNCT_RE, '');
  const noArticles = noPunct.replace(ARTICLES_RE, ' ');
  return noArticles.split(PY_WHITESPACE_RE).filter(Boolean).join(' ');
}

/** Exact match after normalisation against any golden answer (`em_check`). */
export function em(prediction: string, golden: readonly string[] | string): number {
  const golds = typeof golden === 'string' ? [golden] : golden;
  const p = normalizeAnswer(prediction);
  return golds.some((g) => normalizeAnswer(g) === p) ? 1 : 0;
}

/** Substring exact match: a normalised golden answer occurs in the normalised prediction (`subem_check`). */
export function subem(prediction: string, golden: readonly string[] | string): number {
  const golds = typeof golden === 'string' ? [golden] : golden;
  const p = normalizeAnswer(prediction);
  return golds.some((g) => p.includes(normalizeAnswer(g))) ? 1 : 0;
}

/** Whether a normalised golden answer occurs in the normalised `text` as whole words (" paris " in " in paris
 * france ", not in " parisian "): what `answer_retrieved` asks of the retrieved passages. 1 or 0. */
export function answerIn(text: string, golden: readonly string[] | string): number {
  const golds = typeof golden === 'string' ? [golden] : golden;
  const answers = golds.map(normalizeAnswer).filter((n) => n !== '');
  if (!answers.length) return 0;
  // Each word of the normalised text is a run of the text's characters lowered, without punctuation (normalising
  // then only cuts at articles and whitespace): an answer one of whose words is not in there is not in the text —
  // the common case, decided without normalising the whole of a long text (the retrieved passages).
  const bare = text.toLowerCase().replace(PUNCT_RE, '');
  const possible = answers.filter((n) => n.split(' ').every((w) => bare.includes(w)));
  if (!possible.length) return 0;
  const t = ` ${normalizeAnswer(text)} `;
  return possible.some((n) => t.includes(` ${n} `)) ? 1 : 0;
}

/** SQuAD token F1, the max over golden answers. */
export function f1(prediction: string, golden: readonly string[] | string): number {
  const golds = typeof golden === 'string' ? [golden] : golden;
  const pred = normalizeAnswer(prediction).split(' ').filter(Boolean);
  let best = 0;
  for (const g of golds) {
    const gold = normalizeAnswer(g).split(' ').filter(Boolean);
    const counts = new Map<string, number>();
    for (const t of gold) counts.set(t, (counts.get(t) ?? 0) + 1);
    let common = 0;
    for (const t of pred) {
      const c = counts.get(t) ?? 0;
      if (c > 0) {
        common++;
        counts.set(t, c - 1);
      }
    }
    if (common === 0) continue;
    const precision = common / pred.length;
    const recall = common / gold.length;
    best = Math.max(best, (2 * precision * recall) / (precision + recall));
  }
  return best;
}
