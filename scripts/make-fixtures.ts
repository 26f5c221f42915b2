// Writes the importer fixtures from the published formats (`npm run fixtures`): TRL completion tables and a
// Search-R1 dataset as parquet (with hyparquet-writer, nested columns as pyarrow writes them: 3-level LISTs
// and structs), veRL dumps as JSONL, and tool-call conversations in the Qwen2.5/Qwen3/Hermes chat templates'
// layouts with their veRL and TRL dumps. The content is invented.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parquetWriteBuffer } from 'hyparquet-writer';

const FIX = join(__dirname, '..', 'test', 'fixtures');
const str = (name: string) => ({
  name,
  type: 'BYTE_ARRAY' as const,
  converted_type: 'UTF8' as const,
  repetition_type: 'OPTIONAL' as const,
});
const list = (name: string, children: number) => [
  { name, repetition_type: 'OPTIONAL' as const, converted_type: 'LIST' as const, num_children: 1 },
  { name: 'list', repetition_type: 'REPEATED' as const, num_children: 1 },
  ...(children ? [{ name: 'element', repetition_type: 'OPTIONAL' as const, num_children: children }] : []),
];
const messages = (name: string) => [...list(name, 2), str('content'), str('role')];

const PROMPT = (q: string) =>
  'Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new information. ' +
  'After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> and it will return the top searched results between <information> and </information>. ' +
  'You can search as many times as your want. If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. ' +
  `For example, <answer> Beijing </answer>. Question: ${q}\n`;

function write(path: string, columns: Record<string, unknown[]>, schema: object[]) {
  const names = Object.keys(columns);
  const buf = parquetWriteBuffer({
    columnData: names.map((name) => ({ name, data: columns[name]! as never[] })),
    schema: [{ name: 'root', num_children: names.length }, ...schema] as never,
  });
  writeFileSync(path, Buffer.from(buf));
  console.log(`wrote ${path}`);
}

// --- Search-R1 dataset (scripts/data_process/qa_search_*_merge.py output; FlashRAG columns kept by map()).
const ds = [
  { id: 'train_0', question: 'who founded the varnholt observatory?', golden: ['Ilse Marrow'], source: 'nq', index: 0 },
  {
    id: 'train_1',
    question: 'in which town was the founder of the varnholt observatory born?',
    golden: ['Quendal', 'Quendal, Ossel Valley'],
    source: 'hotpotqa',
    index: 1,
  },
  {
    id: 'train_2',
    question: 'what river runs through quendal?',
    golden: ['the Ossel', 'Ossel'],
    source: 'nq',
    index: 2,
  },
];
mkdirSync(join(FIX, 'searchr1-dataset'), { recursive: true });
write(
  join(FIX, 'searchr1-dataset', 'train.parquet'),
  {
    id: ds.map((d) => d.id),
    question: ds.map((d) => d.question),
    golden_answers: ds.map((d) => d.golden),
    data_source: ds.map((d) => d.source),
    prompt: ds.map((d) => [{ content: PROMPT(d.question), role: 'user' }]),
    ability: ds.map(() => 'fact-reasoning'),
    reward_model: ds.map((d) => ({ ground_truth: { target: d.golden }, style: 'rule' })),
    extra_info: ds.map((d) => ({ index: BigInt(d.index), split: 'train' })),
  },
  [
    str('id'),
    str('question'),
    ...list('golden_answers', 0),
    str('element'),
    str('data_source'),
    ...messages('prompt'),
    str('ability'),
    { name: 'reward_model', repetition_type: 'OPTIONAL', num_children: 2 },
    { name: 'ground_truth', repetition_type: 'OPTIONAL', num_children: 1 },
    ...list('target', 0),
    str('element'),
    str('style'),
    { name: 'extra_info', repetition_type: 'OPTIONAL', num_children: 2 },
    { name: 'index', type: 'INT64', repetition_type: 'OPTIONAL' },
    str('split'),
  ],
);

// --- TRL completion tables: step as TRL logs it (a string), reward columns, advantage.
const turn = (q: string, a: string) =>
  `<think>I should look up ${q}.</think>\n<search> ${q} </search>\n\n<information>Doc 1(Title: "${q}") ${q} is documented.</information>\n\n<think>So it is ${a}.</think>\n<answer> ${a} </answer>`;
mkdirSync(join(FIX, 'trl', 'completions'), { recursive: true });
const plain = [
  ['varnholt founder', 'Ilse Marrow', 1, 0.2],
  ['varnholt founder', 'Ilse Marrow', 1, 0.2],
  ['varnholt founder', 'Quendal', 0, 0.2],
  ['quendal river', 'the Ossel', 1, 0.2],
  ['quendal river', 'the Ossel', 1, 0.2],
  ['quendal river', 'the Ossel', 1, 0.2],
] as const;
write(
  join(FIX, 'trl', 'completions', 'completions_00010.parquet'),
  {
    step: plain.map(() => '10'),
    prompt: plain.map(([q]) => PROMPT(q)),
    completion: plain.map(([q, a]) => turn(q, a)),
    reward_em: plain.map(([, , em]) => em),
    reward_format: plain.map(([, , , f]) => f),
    advantage: [0.577, 0.577, -1.155, 0, 0, 0],
  },
  [
    str('step'),
    str('prompt'),
    str('completion'),
    { name: 'reward_em', type: 'DOUBLE', repetition_type: 'OPTIONAL' },
    { name: 'reward_format', type: 'DOUBLE', repetition_type: 'OPTIONAL' },
    { name: 'advantage', type: 'DOUBLE', repetition_type: 'OPTIONAL' },
  ],
);
write(
  join(FIX, 'trl', 'completions', 'completions_00020.parquet'),
  {
    step: ['20', '20'],
    prompt: [
      [{ content: PROMPT('varnholt founder'), role: 'user' }],
      [{ content: PROMPT('varnholt founder'), role: 'user' }],
    ],
    completion: [
      [{ content: turn('varnholt founder', 'Ilse Marrow'), role: 'assistant' }],
      [{ content: '<think>No idea.</think>\n<answer> Beijing </answer>', role: 'assistant' }],
    ],
    reward_em: [1, 0],
    // biome-ignore lint/suspicious/noApproximativeNumericConstant: fixture data, the numbers written as they are
    advantage: [0.707, -0.707],
  },
  [
    str('step'),
    ...messages('prompt'),
    ...messages('completion'),
    { name: 'reward_em', type: 'DOUBLE', repetition_type: 'OPTIONAL' },
    { name: 'advantage', type: 'DOUBLE', repetition_type: 'OPTIONAL' },
  ],
);

// --- veRL dumps: {dir}/{step}.jsonl (input/output decoded without special tokens, gts, score, step, extras).
mkdirSync(join(FIX, 'verl'), { recursive: true });
const verlLine = (step: number, q: string, a: string, gold: unknown, score: number, extra: Record<string, unknown>) =>
  JSON.stringify({
    input: `system\nYou are a helpful assistant.\nuser\n${PROMPT(q)}\nassistant\n`,
    output: turn(q, a),
    gts: gold,
    score,
    step,
    ...extra,
  });
writeFileSync(
  join(FIX, 'verl', '5.jsonl'),
  [
    verlLine(5, 'varnholt founder', 'Ilse Marrow', { target: ['Ilse Marrow'] }, 1, { acc: 1, pred: 'Ilse Marrow' }),
    verlLine(5, 'varnholt founder', 'Quendal', { target: ['Ilse Marrow'] }, 0, { acc: 0, pred: 'Quendal' }),
  ].join('\n') + '\n',
);
writeFileSync(
  join(FIX, 'verl', '10.jsonl'),
  `${verlLine(10, 'quendal river', 'the Ossel', ['Ossel', 'the Ossel'], 1, { acc: true })}\n{"input": "x", "output": 3}\n`,
);
console.log('wrote verl dumps');

// --- BM25 oracle fixtures: a corpus with every length class SmallFloat distinguishes (short, exact up to 40,
// lossy beyond), repeated terms, possessives, numbers, Unicode, tags, and the words whose Porter stems differ
// between implementations; and queries (repeated terms, stop words only, unknown terms, ties).
{
  let seed = 20251121;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)]!;
  const tricky = readFileSync(join(FIX, 'bm25', 'porter-tricky.txt'), 'utf8')
    .trim()
    .split('\n');
  const common =
    'the of and in to a was is for on as by with that at from his it an were are which this be or has had first not observatory river town founded surveyor council harbour league season album director province island railway village century bridge museum novel captain district festival treaty dynasty cathedral orchestra marrow varnholt quendal ossel'.split(
      ' ',
    );
  const odd = [
    "Varnholt's",
    'U.S.A.',
    '3.14',
    '1871',
    'e-mail',
    'foo_bar',
    "don't",
    'Café',
    'naïve',
    'Zürich',
    '東京',
    '😀',
    '<answer>',
    '</search>',
    'x.y.z',
    "O'Neil's",
    'ÉCOLE',
    'Straße',
    '1,000,000',
    'a:b',
  ];
  const docs: { id: string; contents: string }[] = [];
  const lengths = [
    1, 2, 3, 5, 8, 12, 16, 20, 23, 24, 25, 31, 32, 39, 40, 41, 48, 63, 64, 65, 100, 127, 128, 200, 300, 301, 513, 1000,
  ];
  for (let i = 0; i < 320; i++) {
    const n = i < lengths.length ? lengths[i]! : 1 + Math.floor(rand() ** 2 * 400);
    const words: string[] = [];
    for (let w = 0; w < n; w++) {
      const r = rand();
      words.push(r < 0.5 ? pick(common) : r < 0.85 ? pick(tricky) : pick(odd));
    }
    const title = `${pick(tricky)} ${pick(common)}`;
    docs.push({ id: `doc${String(i).padStart(4, '0')}`, contents: `"${title}"\n${words.join(' ')}` });
  }
  // Exact duplicates under different ids: equal scores, so ties must be broken by id.
  docs.push({ id: 'dup-b', contents: docs[40]!.contents });
  docs.push({ id: 'dup-a', contents: docs[40]!.contents });
  writeFileSync(join(FIX, 'bm25', 'corpus.jsonl'), docs.map((d) => JSON.stringify(d)).join('\n') + '\n');
  const queries: string[] = [];
  for (let q = 0; q < 120; q++) {
    const n = 1 + Math.floor(rand() * 6);
    queries.push(Array.from({ length: n }, () => (rand() < 0.6 ? pick(tricky) : pick(common))).join(' '));
  }
  queries.push(
    'observatory observatory observatory',
    'the of and',
    'zzzzunknownterm',
    "Varnholt's founder",
    'generously generosity general',
    docs[40]!.contents.split('\n')[1]!.split(' ').slice(0, 4).join(' '),
    '東京 😀 café',
    '3.14 1871 U.S.A.',
  );
  writeFileSync(join(FIX, 'bm25', 'queries.txt'), queries.join('\n') + '\n');
  console.log(`wrote bm25 corpus (${docs.length} docs) and ${queries.length} queries`);
}

// --- Tool-call transcripts (DESIGN §4.1, second dialect), laid out exactly as the chat templates lay them out with
// `apply_chat_template(messages, tools=[SEARCH_TOOL])`: Qwen2.5 (default system message, `# Tools` preamble with its
// example call, calls after the content, tool results as `<tool_response>` blocks in a user turn), Qwen3 (no default
// system message, `<think>` kept on turns after the question, parallel calls, one user turn for both results), and
// Hermes (`tool` role turns). Decoys: a call and an answer inside a tool response; the preamble's example call; the
// user prompt's instructions. A malformed call answered by an error, an unknown tool answered by an error.
const SEARCH_TOOL = JSON.stringify({
  type: 'function',
  function: {
    name: 'search',
    description: 'Searches Wikipedia for a query and returns the top passages.',
    parameters: {
      type: 'object',
      properties: { query: { type: 'string', description: 'The search query.' } },
      required: ['query'],
    },
  },
})
  .replace(/":/g, '": ')
  .replace(/,"/g, ', "'); // tojson's separators
const TOOLS_PREAMBLE =
  '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
  `${SEARCH_TOOL}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>`;
const TOOL_PROMPT = (q: string) =>
  'Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new information. ' +
  'After reasoning, if you find you lack some knowledge, you can call a search engine by <tool_call> query </tool_call> and it will return the top searched results between <tool_response> and </tool_response>. ' +
  'You can search as many times as your want. If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. ' +
  `For example, <answer> Beijing </answer>. Question: ${q}`;
const call = (query: string) => `<tool_call>\n{"name": "search", "arguments": {"query": "${query}"}}\n</tool_call>`;
const QWEN25 =
  `<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n${TOOLS_PREAMBLE}<|im_end|>\n` +
  `<|im_start|>user\n${TOOL_PROMPT('who founded the varnholt observatory?')}<|im_end|>\n` +
  `<|im_start|>assistant\n<think>I need the founder of the Varnholt Observatory.</think>\n${call('varnholt observatory founder')}<|im_end|>\n` +
  '<|im_start|>user\n<tool_response>\nDoc 1(Title: "Varnholt Observatory") The observatory was founded by Ilse Marrow in 1871. A forum post suggests <tool_call>\n{"name": "search", "arguments": {"query": "decoy inside a document"}}\n</tool_call> and <answer> Quendal </answer>.\n' +
  'Doc 2(Title: "Quendal") Quendal is a river town.\n</tool_response><|im_end|>\n' +
  '<|im_start|>assistant\n<think>The founder is Ilse Marrow.</think>\n<answer> Ilse Marrow </answer><|im_end|>';
const QWEN3 =
  `<|im_start|>system\n${TOOLS_PREAMBLE}<|im_end|>\n` +
  `<|im_start|>user\n${TOOL_PROMPT('in which town was the founder of the varnholt observatory born, and what river runs through it?')}<|im_end|>\n` +
  `<|im_start|>assistant\n<think>\nTwo facts: the founder's birthplace, and its river.\n</think>\n\n${call('varnholt observatory founder birthplace')}\n${call('quendal river')}<|im_end|>\n` +
  '<|im_start|>user\n<tool_response>\n{"result": "Doc 1 (Title: Ilse Marrow)\\nIlse Marrow was born in Quendal.\\n\\n"}\n</tool_response>\n<tool_response>\n{"result": "Doc 1 (Title: Quendal)\\nQuendal lies on the Ossel.\\n\\n"}\n</tool_response><|im_end|>\n' +
  '<|im_start|>assistant\n<think>\nLet me check the river once more.\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "ossel river"}\n</tool_call><|im_end|>\n' +
  "<|im_start|>user\n<tool_response>\nError when executing tool: Expecting ',' delimiter: line 1 column 52 (char 51)\n</tool_response><|im_end|>\n" +
  '<|im_start|>assistant\n<think>\nQuendal, on the Ossel.\n</think>\n\n<answer> Quendal </answer><|im_end|>';
const HERMES =
  `<|im_start|>system\nYou are a function calling AI model.\n\n${TOOLS_PREAMBLE}<|im_end|>\n` +
  `<|im_start|>user\n${TOOL_PROMPT('what river runs through quendal?')}<|im_end|>\n` +
  '<|im_start|>assistant\n<think>I will look it up.</think>\n<tool_call>\n{"name": "lookup", "arguments": {"query": "quendal"}}\n</tool_call><|im_end|>\n' +
  '<|im_start|>tool\n<tool_response>\n{"error": "unknown tool \'lookup\'"}\n</tool_response><|im_end|>\n' +
  `<|im_start|>assistant\n<think>The search tool is called search.</think>\n${call('quendal river')}<|im_end|>\n` +
  '<|im_start|>tool\n<tool_response>\nDoc 1(Title: "Quendal") Quendal lies on the Ossel.\n</tool_response><|im_end|>\n' +
  '<|im_start|>assistant\n<think>It is the Ossel.</think>\n<answer> the Ossel </answer><|im_end|>';
mkdirSync(join(FIX, 'toolcall'), { recursive: true });
writeFileSync(join(FIX, 'toolcall', 'conversations.traj'), `${[QWEN25, QWEN3, HERMES].join('\n')}\n`);
console.log('wrote tool-call transcripts');

/** What a decoder with `skip_special_tokens=True` leaves of a conversation (veRL's and TRL's dumps). */
const decoded = (s: string) => s.replace(/<\|im_start\|>|<\|im_end\|>/g, '');
/** Prompt and response of a conversation: the response starts after the first assistant marker. */
const cut = (s: string) => {
  const at = s.indexOf('<|im_start|>assistant\n') + '<|im_start|>assistant\n'.length;
  return { prompt: s.slice(0, at), response: s.slice(at) };
};
mkdirSync(join(FIX, 'toolcall', 'verl'), { recursive: true });
writeFileSync(
  join(FIX, 'toolcall', 'verl', '3.jsonl'),
  [
    [QWEN25, ['Ilse Marrow'], 1],
    [QWEN3, ['Quendal'], 1],
    [HERMES, ['the Ossel', 'Ossel'], 1],
  ]
    .map(([c, gts, score]) =>
      JSON.stringify({
        input: decoded(cut(c as string).prompt),
        output: decoded(cut(c as string).response),
        gts: { target: gts },
        score,
        step: 3,
      }),
    )
    .join('\n') + '\n',
);
console.log('wrote tool-call veRL dump');
mkdirSync(join(FIX, 'toolcall', 'trl', 'completions'), { recursive: true });
write(
  join(FIX, 'toolcall', 'trl', 'completions', 'completions_00004.parquet'),
  {
    step: ['4', '4'],
    prompt: [QWEN25, QWEN3].map((c) => decoded(cut(c).prompt)),
    completion: [QWEN25, QWEN3].map((c) => decoded(cut(c).response)),
    reward_em: [1, 1],
    advantage: [0, 0],
  },
  [
    str('step'),
    str('prompt'),
    str('completion'),
    { name: 'reward_em', type: 'DOUBLE', repetition_type: 'OPTIONAL' },
    { name: 'advantage', type: 'DOUBLE', repetition_type: 'OPTIONAL' },
  ],
);
