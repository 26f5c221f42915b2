/**
 * The original Porter stemmer, as Lucene's PorterStemFilter applies it (Porter's reference implementation,
 * with its departures from the 1980 paper: bli→ble, logi→log). We use the maintained `stemmer` package, which
 * agrees with Lucene on every word of a 63,875-word English dictionary, and correct the three classes of edge
 * cases where it departs from the reference algorithm (found by differential testing against Lucene on 25k
 * synthetic suffix combinations; test/unit/bm25-oracle.test.ts keeps checking):
 *  - a word that is only a step-1a suffix: "ies" → "i", "sses" → "ss" (the package needs a letter before it);
 *  - "eed"/"eeds": step 1b leaves "eed" alone when the stem before it is empty (m = 0);
 *  - "…yy" + ed/ing: Porter's consonant rule makes the second "y" of "Cyy" a consonant, so step 1b undoubles it
 *    ("byyed" → "by"), where the package never treats "yy" as a double consonant.
 */
import { stemmer } from 'stemmer';

/** Porter's consonant test at position i (a "y" is a consonant at the start or after a vowel). */
function isConsonant(w: string, i: number): boolean {
  switch (w[i]) {
    case 'a':
    case 'e':
    case 'i':
    case 'o':
    case 'u':
      return false;
    case 'y':
      return i === 0 ? true : !isConsonant(w, i - 1);
    default:
      return true;
  }
}

export function porterStem(word: string): string {
  if (word.length <= 2) return word;
  if (word === 'ies') return 'i';
  if (word === 'sses') return 'ss';
  if (word === 'eed' || word === 'eeds') return 'eed';
  const yy = /^(.*yy)(ed|ing)$/.exec(word);
  if (yy) {
    const stem = yy[1]!;
    const last = stem.length - 1;
    // Step 1b removes ed/ing (the stem has a vowel: "y" after a consonant is one), then undoubles a double
    // consonant: "yy" counts when its second "y" is a consonant.
    const hasVowel = [...stem].some((_, i) => !isConsonant(stem, i));
    if (hasVowel && isConsonant(stem, last)) return stemmer(stem.slice(0, -1));
  }
  return stemmer(word);
}
