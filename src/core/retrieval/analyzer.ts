/**
 * Pyserini's default analyzer (Anserini's DefaultEnglishAnalyzer), so that BM25 scores equal Lucene's:
 * StandardTokenizer (Unicode text segmentation, UAX#29 word boundaries) → EnglishPossessiveFilter (strip a
 * trailing 's) → LowerCaseFilter → StopFilter (Lucene's 33 English stop words) → PorterStemFilter.
 *
 * The tokenizer implements the UAX#29 word-boundary rules that matter for English and Latin-script text
 * exactly (letters, digits, `_`, the MidLetter/MidNum/MidNumLet joiners such as `don't`, `3.14`, `U.S.A`, `a:b`,
 * combining marks), emits each CJK ideograph and Hiragana character as its own token and each emoji as a token
 * (as Lucene does). Approximated, and documented in docs/retrieval.md: Southeast Asian scripts (Lucene keeps
 * whole runs; so do we, without its dictionary-free subtleties), Hangul, and multi-code-point emoji sequences
 * (flags, ZWJ sequences: one token per pictograph here). Tests compare every token with Lucene's own.
 */
import { porterStem } from './porter';

/** Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET. */
export const ENGLISH_STOP_WORDS: ReadonlySet<string> = new Set(
  'a an and are as at be but by for if in into is it no not of on or such that the their then there these they this to was will with'.split(
    ' ',
  ),
);

/** StandardTokenizer's default maximum token length; longer tokens are split. */
export const MAX_TOKEN_LENGTH = 255;

// Character classes (UAX#29 Word_Break), built from Unicode properties.
// biome-ignore lint/suspicious/noConstEnum: module-private, so inlined by esbuild (the tokenizer's hot path)
const enum C {
  Other = 0,
  ALetter,
  Numeric,
  MidLetter,
  MidNum,
  MidNumLet,
  SingleQuote,
  ExtendNumLet,
  Extend,
  Ideo,
  Katakana,
  SEAsian,
  Emoji,
  Hebrew,
  Regional,
}

const RE_IDEO = /[\p{Script=Han}\p{Script=Hiragana}]/u;
const RE_KATAKANA = /[\p{Script=Katakana}\u3031-\u3035\u309B\u309C\u30A0\u30FC\uFF70]/u;
const RE_SEASIAN = /[\p{Script=Thai}\p{Script=Lao}\p{Script=Myanmar}\p{Script=Khmer}]/u;
const RE_HEBREW = /\p{Script=Hebrew}/u;
// biome-ignore lint/suspicious/noMisleadingCharacterClass: tested one code point at a time (UAX#29 Extend), never a sequence
const RE_EXTEND = /[\p{M}\u200D\p{Cf}\p{Emoji_Modifier}]/u;
const RE_REGIONAL = /\p{Regional_Indicator}/u;
const RE_EMOJI = /\p{Extended_Pictographic}/u;
const RE_ALETTER = /[\p{Alphabetic}\u05F3]/u;
const RE_NUMERIC = /\p{Nd}/u;
const RE_EXTENDNUMLET = /\p{Pc}/u;
const MID_LETTER = new Set([0x3a, 0xb7, 0x387, 0x55f, 0x5f4, 0x2027, 0xfe13, 0xfe55, 0xff1a]);
const MID_NUM = new Set([
  0x2c, 0x3b, 0x37e, 0x589, 0x60c, 0x60d, 0x66c, 0x7f8, 0x2044, 0xfe10, 0xfe14, 0xfe50, 0xfe54, 0xff0c, 0xff1b,
]);
const MID_NUM_LET = new Set([0x2e, 0x2018, 0x2019, 0x2024, 0xfe52, 0xff07, 0xff0e]);

const ASCII = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  ASCII[c] =
    (c >= 65 && c <= 90) || (c >= 97 && c <= 122)
      ? C.ALetter
      : c >= 48 && c <= 57
        ? C.Numeric
        : c === 0x27
          ? C.SingleQuote
          : c === 0x5f
            ? C.ExtendNumLet
            : MID_LETTER.has(c)
              ? C.MidLetter
              : MID_NUM.has(c)
                ? C.MidNum
                : MID_NUM_LET.has(c)
                  ? C.MidNumLet
                  : C.Other;
}

function classify(cp: number): C {
  if (cp < 128) return ASCII[cp] as C;
  if (MID_LETTER.has(cp)) return C.MidLetter;
  if (MID_NUM.has(cp)) return C.MidNum;
  if (MID_NUM_LET.has(cp)) return C.MidNumLet;
  const ch = String.fromCodePoint(cp);
  if (RE_EXTEND.test(ch)) return C.Extend;
  if (RE_REGIONAL.test(ch)) return C.Regional;
  if (RE_IDEO.test(ch)) return C.Ideo;
  if (RE_KATAKANA.test(ch)) return C.Katakana;
  if (RE_SEASIAN.test(ch)) return C.SEAsian;
  if (RE_HEBREW.test(ch) && RE_ALETTER.test(ch)) return C.Hebrew;
  if (RE_NUMERIC.test(ch)) return C.Numeric;
  if (RE_ALETTER.test(ch)) return C.ALetter;
  if (RE_EXTENDNUMLET.test(ch)) return C.ExtendNumLet;
  if (RE_EMOJI.test(ch)) return C.Emoji;
  return C.Other;
}

/** Classes of a text's code points (with a cache for the non-ASCII ones). */
const cache = new Map<number, C>();
function cls(cp: number): C {
  if (cp < 128) return ASCII[cp] as C;
  let c = cache.get(cp);
  if (c === undefined) {
    c = classify(cp);
    if (cache.size < 65536) cache.set(cp, c);
  }
  return c;
}

const isWordy = (c: C) =>
  c === C.ALetter || c === C.Hebrew || c === C.Numeric || c === C.Katakana || c === C.ExtendNumLet || c === C.SEAsian;
const isAHLetter = (c: C) => c === C.ALetter || c === C.Hebrew;
const isMidLetterish = (c: C) => c === C.MidLetter || c === C.MidNumLet || c === C.SingleQuote;
const isMidNumish = (c: C) => c === C.MidNum || c === C.MidNumLet || c === C.SingleQuote;

/**
 * StandardTokenizer's tokens. Calls `emit(token)` for each (a callback, so indexing makes no arrays).
 */
export function tokenize(text: string, emit: (token: string) => void): void {
  const n = text.length;
  let i = 0;
  // Decode one code point at i: [cp, width].
  const at = (k: number): number => {
    const c = text.charCodeAt(k);
    if (c >= 0xd800 && c <= 0xdbff && k + 1 < n) {
      const d = text.charCodeAt(k + 1);
      if (d >= 0xdc00 && d <= 0xdfff) return ((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000;
    }
    return c;
  };
  const width = (cp: number) => (cp > 0xffff ? 2 : 1);
  /** Next position after skipping Extend/Format characters from k. */
  const skipExtend = (k: number): number => {
    while (k < n) {
      const cp = at(k);
      if (cp < 128 || cls(cp) !== C.Extend) break;
      k += width(cp);
    }
    return k;
  };
  const push = (start: number, end: number) => {
    for (let s = start; s < end; s += MAX_TOKEN_LENGTH) emit(text.slice(s, Math.min(end, s + MAX_TOKEN_LENGTH)));
  };

  while (i < n) {
    const cp = at(i);
    const c = cls(cp);
    const start = i;
    i += width(cp);
    if (c === C.Ideo) {
      i = skipExtend(i);
      push(start, i);
      continue;
    }
    if (c === C.Emoji || c === C.Regional) {
      // An emoji sequence: modifiers and variation selectors (Extend), ZWJ + pictograph (WB3c), or a pair of
      // regional indicators (a flag, WB15/16).
      if (c === C.Regional && i < n && cls(at(i)) === C.Regional) i += width(at(i));
      for (;;) {
        const before = i;
        i = skipExtend(i);
        if (i < n && i > before && text.charCodeAt(i - 1) === 0x200d && cls(at(i)) === C.Emoji) {
          i += width(at(i));
          continue;
        }
        break;
      }
      push(start, i);
      continue;
    }
    if (!isWordy(c)) continue;
    i = skipExtend(i);
    let prev: C = c;
    // Extend the word while the UAX#29 rules say "no break".
    while (i < n) {
      const cp2 = at(i);
      const c2 = cls(cp2);
      const w2 = width(cp2);
      if (c2 === C.Extend) {
        i += w2;
        continue;
      }
      let joins = false;
      if (
        (isAHLetter(prev) && isAHLetter(c2)) ||
        (prev === C.Numeric && c2 === C.Numeric) ||
        (isAHLetter(prev) && c2 === C.Numeric) ||
        (prev === C.Numeric && isAHLetter(c2))
      )
        joins = true; // WB5, WB8-10
      else if (prev === C.Katakana && c2 === C.Katakana)
        joins = true; // WB13
      else if (prev === C.SEAsian && c2 === C.SEAsian) joins = true;
      else if (c2 === C.ExtendNumLet && isWordy(prev))
        joins = true; // WB13a (isWordy includes ExtendNumLet)
      else if (prev === C.ExtendNumLet && (isAHLetter(c2) || c2 === C.Numeric || c2 === C.Katakana)) joins = true; // WB13b
      if (joins) {
        prev = c2;
        i = skipExtend(i + w2);
        continue;
      }
      // WB6/7 (letter · mid · letter), WB11/12 (digit · mid · digit): look one past the joiner.
      if ((isAHLetter(prev) && isMidLetterish(c2)) || (prev === C.Numeric && isMidNumish(c2))) {
        const j = skipExtend(i + w2);
        if (j < n) {
          const c3 = cls(at(j));
          if ((isAHLetter(prev) && isAHLetter(c3)) || (prev === C.Numeric && c3 === C.Numeric)) {
            prev = c3;
            i = skipExtend(j + width(at(j)));
            continue;
          }
        }
      }
      break;
    }
    push(start, i);
  }
}

/** Lowercases one code point at a time, as Java's Character.toLowerCase (no locale, no final sigma). */
export function luceneLowerCase(s: string): string {
  let ascii = true;
  for (let k = 0; k < s.length; k++) {
    const c = s.charCodeAt(k);
    if (c >= 128) {
      ascii = false;
      break;
    }
  }
  if (ascii) return s.toLowerCase();
  let out = '';
  for (const ch of s) {
    const lower = ch.toLowerCase();
    // Java's simple mapping: one code point to one (İ → i, not i + combining dot).
    out += [...lower].length === 1 ? lower : ch === '\u0130' ? 'i' : ch;
  }
  return out;
}

/** EnglishPossessiveFilter: a trailing 's / 'S (apostrophe U+0027, U+2019 or U+FF07) is removed. */
export function stripPossessive(t: string): string {
  const n = t.length;
  if (n >= 2) {
    const a = t.charCodeAt(n - 2);
    const s = t.charCodeAt(n - 1);
    if ((a === 0x27 || a === 0x2019 || a === 0xff07) && (s === 0x73 || s === 0x53)) return t.slice(0, n - 2);
  }
  return t;
}

export interface Analyzer {
  /** A stable name, stored in indexes so a query is analysed as the documents were. */
  readonly id: string;
  analyze(text: string, emit: (term: string) => void): void;
}

/** Anserini's DefaultEnglishAnalyzer with the Porter stemmer. Stems are memoised (a bounded cache). */
export class DefaultEnglishAnalyzer implements Analyzer {
  readonly id = 'lucene-default-english-porter-v1';
  private stems = new Map<string, string>();

  analyze(text: string, emit: (term: string) => void): void {
    tokenize(text, (token) => {
      const t = luceneLowerCase(stripPossessive(token));
      if (t.length === 0 || ENGLISH_STOP_WORDS.has(t)) return;
      let s = this.stems.get(t);
      if (s === undefined) {
        s = porterStem(t);
        if (this.stems.size > 500_000) this.stems.clear();
        this.stems.set(t, s);
      }
      emit(s);
    });
  }

  terms(text: string): string[] {
    const out: string[] = [];
    this.analyze(text, (t) => out.push(t));
    return out;
  }
}
