// The demo world (`npm run demo-corpus`): an invented world of people, towns, rivers, provinces, institutions and
// works, written as a Search-R1-style corpus (examples/demo/corpus.jsonl: {id, contents = "Title"\ntext}) and
// as question datasets (examples/demo/train.jsonl, eval.jsonl) whose answers are only in the corpus. Two-hop
// questions need an entity found by the first search (`meta.bridge`). The held-out split shares no question and no answer
// entity with the training split. Seeded: the same files every time.
//
// `--rivers N --out DIR` writes a variant of the same world with N rivers instead of 48 (`npm run demo-corpus --
// --rivers 180 --out examples/demo-multihop`: the two-hop recipe's world, docs/demo.md). With 48, the training river
// questions have only 36 distinct answers and a tiny policy learns them as a closed class: it answers held-out river
// questions with a town. The default (no options) writes examples/demo (as it always has, plus `meta.bridge` since stop 42).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const { values: opts } = parseArgs({ options: { rivers: { type: 'string', default: '48' }, out: { type: 'string' } } });
const RIVERS = Number(opts.rivers);
if (!Number.isInteger(RIVERS) || RIVERS < 1)
  throw new Error(`--rivers: expected a positive integer, got ${JSON.stringify(opts.rivers)}`);

let seed = 1871;
const rand = () => {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return ((seed >>> 8) & 0xffffff) / 0x1000000;
};
const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
const shuffle = <T>(xs: T[]): T[] => {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
};

const ONSETS = [
  'b',
  'br',
  'd',
  'dr',
  'f',
  'g',
  'gr',
  'h',
  'k',
  'kr',
  'l',
  'm',
  'n',
  'p',
  'pr',
  'r',
  's',
  'st',
  't',
  'tr',
  'v',
  'w',
  'z',
  'th',
  'sk',
  'qu',
];
const NUCLEI = ['a', 'e', 'i', 'o', 'u', 'ae', 'ei', 'ou', 'ar', 'en', 'or', 'il', 'an', 'y'];
const CODAS = ['', '', 'n', 'r', 'l', 's', 'th', 'nd', 'rk', 'st', 'm', 'x', 'v', 'lt'];
const used = new Set<string>();
/** A new invented word of `syllables` syllables, capitalised, never repeated. */
function invent(syllables: number): string {
  for (;;) {
    let w = '';
    for (let s = 0; s < syllables; s++) {
      const nucleus = pick(NUCLEI);
      // A coda only after a vowel, so no "lrk" clusters.
      w += pick(ONSETS) + nucleus + (s === syllables - 1 && /[aeiouy]$/.test(nucleus) ? pick(CODAS) : '');
    }
    w = w[0]!.toUpperCase() + w.slice(1);
    if (w.length >= 4 && w.length <= 11 && !used.has(w.toLowerCase())) {
      used.add(w.toLowerCase());
      return w;
    }
  }
}

interface Province {
  name: string;
}
interface River {
  name: string;
  province: Province;
  towns: Town[];
}
interface Town {
  name: string;
  province: Province;
  river: River;
  industry: string;
  founded: number;
}
interface Person {
  first: string;
  last: string;
  name: string;
  born: Town;
  year: number;
  died: number;
  profession: string;
  she: boolean;
}
interface Institution {
  name: string;
  kind: string;
  town: Town;
  founder: Person;
  year: number;
}
interface Work {
  title: string;
  kind: string;
  author: Person;
  year: number;
}

const provinces: Province[] = Array.from({ length: 24 }, () => ({ name: invent(3) }));
const rivers: River[] = Array.from({ length: RIVERS }, () => ({
  name: invent(2),
  province: pick(provinces),
  towns: [],
}));
const INDUSTRIES = [
  'salt',
  'glassmaking',
  'wool',
  'timber',
  'clockmaking',
  'shipbuilding',
  'copper',
  'paper',
  'cheese',
  'rope',
  'dyeing',
  'printing',
];
const towns: Town[] = Array.from({ length: 180 }, () => {
  const river = pick(rivers);
  const t: Town = {
    name: invent(2 + (rand() < 0.3 ? 1 : 0)),
    province: rand() < 0.7 ? river.province : pick(provinces),
    river,
    industry: pick(INDUSTRIES),
    founded: int(900, 1600),
  };
  river.towns.push(t);
  return t;
});
const FIRST_F = Array.from({ length: 60 }, () => invent(2));
const FIRST_M = Array.from({ length: 60 }, () => invent(2));
const PROFESSIONS = [
  'surveyor',
  'astronomer',
  'composer',
  'engineer',
  'cartographer',
  'botanist',
  'shipwright',
  'poet',
  'chemist',
  'architect',
  'printer',
  'physician',
];
const people: Person[] = Array.from({ length: 320 }, () => {
  const she = rand() < 0.5;
  const first = pick(she ? FIRST_F : FIRST_M);
  const last = invent(2 + (rand() < 0.4 ? 1 : 0));
  const year = int(1700, 1900);
  return {
    first,
    last,
    name: `${first} ${last}`,
    born: pick(towns),
    year,
    died: year + int(35, 90),
    profession: pick(PROFESSIONS),
    she,
  };
});
const KINDS = [
  'Observatory',
  'Museum',
  'Academy',
  'Library',
  'Conservatory',
  'Botanical Garden',
  'Shipyard',
  'Guild Hall',
  'Institute',
  'Printing House',
];
const institutions: Institution[] = [];
for (const founder of shuffle([...people]).slice(0, 150)) {
  const kind = pick(KINDS);
  const town = pick(towns.filter((t) => t !== founder.born));
  const base = rand() < 0.5 ? founder.last : invent(2);
  institutions.push({ name: `${base} ${kind}`, kind, town, founder, year: founder.year + int(25, 45) });
}
const WORK_KINDS = ['treatise', 'atlas', 'symphony', 'novel', 'star catalogue', 'herbal', 'cantata', 'manual'];
const ADJ = [
  'Silent',
  'Northern',
  'Copper',
  'Hollow',
  'Amber',
  'Seventh',
  'Winter',
  'Lesser',
  'Drowned',
  'Patient',
  'Distant',
  'Salt',
];
const NOUN = [
  'Meridian',
  'Lantern',
  'Harbour',
  'Almanac',
  'Orchard',
  'Compass',
  'Tide',
  'Lexicon',
  'Garden',
  'Chorus',
  'Cartulary',
  'Ledger',
];
const works: Work[] = [];
const titles = new Set<string>();
for (const author of shuffle([...people]).slice(0, 140)) {
  let title: string;
  do title = `The ${pick(ADJ)} ${pick(NOUN)} of ${invent(2)}`;
  while (titles.has(title));
  titles.add(title);
  works.push({ title, kind: pick(WORK_KINDS), author, year: author.year + int(20, 50) });
}

// ---------------------------------------------------------------------------------------------------------
// Passages.
const FILLER = [
  'Records from the period are incomplete, and several accounts disagree on the details.',
  'Local histories mention the place in connection with the regional fairs held each autumn.',
  'A later survey corrected a number of errors in the earlier maps of the area.',
  'The archive holds letters, ledgers and drawings from the same decades.',
  'Visitors in the nineteenth century described the setting as quiet and well kept.',
  'Part of the original building was rebuilt after a fire.',
  'Its name appears in several guidebooks of the time.',
];
const passages: { id: string; contents: string }[] = [];
const add = (title: string, text: string) =>
  passages.push({ id: String(passages.length), contents: `"${title}"\n${text}` });
const pro = (p: Person) => (p.she ? 'She' : 'He');
const an = (word: string) => `${/^[aeiou]/i.test(word) ? 'an' : 'a'} ${word}`;
const their = (p: Person) => (p.she ? 'her' : 'his');
const filler = (n: number) =>
  shuffle([...FILLER])
    .slice(0, n)
    .join(' ');

for (const p of provinces)
  add(
    p.name,
    `${p.name} is a province. Its towns include ${
      shuffle(towns.filter((t) => t.province === p))
        .slice(0, 4)
        .map((t) => t.name)
        .join(', ') || 'a few villages'
    }. ${filler(2)}`,
  );
for (const r of rivers) {
  const list = r.towns.map((t) => t.name);
  add(
    `${r.name} (river)`,
    `The ${r.name} is a river in ${r.province.name}. ${list.length ? `It flows through ${list.join(', ')}.` : 'It has no towns on its banks.'} ${filler(1)}`,
  );
}
for (const t of towns) {
  add(
    t.name,
    `${t.name} is a town in ${t.province.name}, on the ${t.river.name} river. It was founded around ${t.founded} and became known for ${t.industry}. ${filler(2)}`,
  );
}
for (const p of people) {
  add(
    p.name,
    `${p.name} (${p.year}–${p.died}) was ${an(p.profession)} born in ${p.born.name}. ${pro(p)} spent most of ${their(p)} working life away from ${their(p)} birthplace. ${filler(1)}`,
  );
}
for (const i of institutions) {
  add(
    i.name,
    `The ${i.name} is ${an(i.kind.toLowerCase())} in ${i.town.name}. It was founded in ${i.year} by ${i.founder.name}, ${an(i.founder.profession)}. ${filler(2)}`,
  );
  add(`${i.name} (history)`, `In its first decades the ${i.name} struggled for funds. ${filler(3)}`);
}
for (const w of works) {
  add(w.title, `${w.title} is ${an(w.kind)} written by ${w.author.name} in ${w.year}. ${filler(2)}`);
}
// Distractors: passages that share words with the questions but not the answers.
for (let k = 0; k < 1900; k++) {
  const p = pick(people);
  const i = pick(institutions);
  const t = pick(towns);
  const texts = [
    `A portrait of ${p.name} hangs in a private collection. ${filler(2)}`,
    `Correspondence between members of the ${i.name} survives in part. ${filler(2)}`,
    `The road to ${t.name} was paved in the last century. ${filler(2)}`,
    `${an(pick(PROFESSIONS)).replace(/^a/, 'A')} from ${t.name} once visited the ${i.name}. ${filler(1)}`,
  ];
  add(`${pick([p.name, i.name, t.name])} (miscellany)`, pick(texts));
}

// ---------------------------------------------------------------------------------------------------------
// Questions. Each has its answer entity; the held-out split takes every question whose answer entity is in the
// held-out entity set (so the splits share no answer entity), and the two splits share no question text.
// A two-hop question's `bridge` is the entity its first search finds and its second query must name (the founder, the
// birthplace, the author): the dataset line's `meta.bridge`, for the trainer's `val/bridge_searched_by_hops/2`.
// A person is named by the whole name or by the surname alone (`bridge: [name, surname]`): every invented word is new
// to the world, so a surname names one person as surely as the whole name does (first names come from a pool of 60
// and are shared) — except where an institution is named after its founder and the question itself says the
// surname, where a query could copy it from the question without having found anyone: there the whole name only.
type Q = { question: string; golden: string[]; answer: string; hops: 1 | 2; kind: string; bridge?: string | string[] };
const questions: Q[] = [];
const personBridge = (p: Person, question: string): string | string[] =>
  new RegExp(`\\b${p.last}\\b`, 'i').test(question) ? p.name : [p.name, p.last];
for (const i of institutions) {
  questions.push({
    question: `who founded the ${i.name}?`,
    golden: [i.founder.name],
    answer: i.founder.name,
    hops: 1,
    kind: 'founder',
  });
  const q2 = `in which town was the founder of the ${i.name} born?`;
  questions.push({
    question: q2,
    golden: [i.founder.born.name],
    answer: i.founder.born.name,
    hops: 2,
    kind: 'founder-birthplace',
    bridge: personBridge(i.founder, q2),
  });
}
for (const p of people) {
  questions.push({
    question: `in which town was ${p.name} born?`,
    golden: [p.born.name],
    answer: p.born.name,
    hops: 1,
    kind: 'birthplace',
  });
  questions.push({
    question: `what river runs through the birthplace of ${p.name}?`,
    golden: [p.born.river.name, `the ${p.born.river.name}`],
    answer: p.born.river.name,
    hops: 2,
    kind: 'birthplace-river',
    bridge: p.born.name,
  });
}
for (const t of towns)
  questions.push({
    question: `what river runs through ${t.name}?`,
    golden: [t.river.name, `the ${t.river.name}`],
    answer: t.river.name,
    hops: 1,
    kind: 'river',
  });
for (const w of works) {
  questions.push({
    question: `who wrote ${w.title}?`,
    golden: [w.author.name],
    answer: w.author.name,
    hops: 1,
    kind: 'author',
  });
  const q2 = `in which town was the author of ${w.title} born?`;
  questions.push({
    question: q2,
    golden: [w.author.born.name],
    answer: w.author.born.name,
    hops: 2,
    kind: 'author-birthplace',
    bridge: personBridge(w.author, q2),
  });
}
const answers = shuffle([...new Set(questions.map((q) => q.answer))]);
const heldOut = new Set(answers.slice(0, Math.round(answers.length * 0.12)));
const seen = new Set<string>();
const train: object[] = [];
const evalSet: object[] = [];
for (const q of shuffle(questions)) {
  if (seen.has(q.question)) continue;
  seen.add(q.question);
  const split = heldOut.has(q.answer) ? 'eval' : 'train';
  const row = {
    id: `demo-${split}-${(split === 'eval' ? evalSet : train).length}`,
    question: q.question,
    golden: q.golden,
    data_source: 'demo',
    split,
    meta: { hops: q.hops, kind: q.kind, ...(q.bridge ? { bridge: q.bridge } : {}) },
  };
  (split === 'eval' ? evalSet : train).push(row);
}

const out = opts.out ? resolve(opts.out) : join(__dirname, '..', 'examples', 'demo');
mkdirSync(out, { recursive: true });
writeFileSync(join(out, 'corpus.jsonl'), passages.map((p) => JSON.stringify(p)).join('\n') + '\n');
writeFileSync(join(out, 'train.jsonl'), train.map((r) => JSON.stringify(r)).join('\n') + '\n');
writeFileSync(join(out, 'eval.jsonl'), evalSet.map((r) => JSON.stringify(r)).join('\n') + '\n');
console.log(`demo corpus: ${passages.length} passages; questions: ${train.length} train, ${evalSet.length} held-out`);
