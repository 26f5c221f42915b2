/**
 * The tool-call dialects (DESIGN §4.1): the parser and transcripts on conversations laid out as the Qwen2.5,
 * Qwen3 and Hermes chat templates lay them out (test/fixtures/toolcall, written by scripts/make-fixtures.ts),
 * their veRL and TRL dumps, Llama 3.1 JSON calls, detection and forcing, and what summaries, the format check
 * and the reward API make of them.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trajectoryFacts } from '../../src/core/audit/summary';
import { readSource, type SourceItem } from '../../src/core/importers';
import { replayModel } from '../../src/core/inspect/replay';
import { RolloutTable, rowFacts } from '../../src/core/inspect/table';
import { emFormat, makeTrajectory } from '../../src/core/rewards/api';
import { formatValid, formatValidResponse } from '../../src/core/rewards/format';
import { informationBlocks } from '../../src/core/rewards/qaEmFormat';
import { messageText } from '../../src/core/run/fields';
import type { Rollout } from '../../src/core/run/format';
import { RolloutStore } from '../../src/core/store/rollouts';
import { TrajectoryDocument } from '../../src/core/tags/document';
import { type Dialect, detectDialect, type ParsedTrajectory, parseTrajectory } from '../../src/core/tags/parser';
import { finalAnswer, turnsOf } from '../../src/core/tags/searchr1';
import { readToolCall, renderToolMessages } from '../../src/core/tags/toolcall';
import { documentsOf, invalidActionCount, parseResponse, searchQueries } from '../../src/core/tags/trajectory';
import { parseTranscript, splitConversations } from '../../src/core/tags/transcript';
import { assertTiles, soup } from './tiles';

const FIX = join(__dirname, '..', 'fixtures', 'toolcall');
const TRAJ = readFileSync(join(FIX, 'conversations.traj'), 'utf8');
const conversations = () => splitConversations(TRAJ).map((s) => TRAJ.slice(s.start, s.end));

const nonBlank = (p: ParsedTrajectory) =>
  p.segments.filter((s) => s.kind !== 'text' || p.text.slice(s.start - p.offset, s.end - p.offset).trim());
const kinds = (p: ParsedTrajectory) => nonBlank(p).map((s) => s.kind);
const codes = (p: ParsedTrajectory) => p.diagnostics.map((d) => d.code);
/** What every instrument reads of a response: the numbers that must agree across layouts and dumps. */
function reading(p: ParsedTrajectory) {
  const turns = turnsOf(p);
  return {
    dialect: p.dialect,
    searches: searchQueries(p),
    answer: finalAnswer(p) ?? null,
    turns: turns.map((t) => t.action),
    invalid: invalidActionCount(p, turns),
  };
}
async function all(path: string, read = {}): Promise<Rollout[]> {
  const out: SourceItem[] = [];
  for await (const item of readSource(path, undefined, read)) out.push(item);
  assert.deepEqual(
    out.flatMap((i) => i.issues),
    [],
  );
  return out.map((i) => i.record!);
}

/** What the three fixture conversations read as (Qwen2.5, Qwen3, Hermes). */
const EXPECTED = [
  {
    dialect: 'toolcall',
    searches: ['varnholt observatory founder'],
    answer: 'Ilse Marrow',
    turns: ['search', 'answer'],
    invalid: 0,
  },
  {
    dialect: 'toolcall',
    searches: ['varnholt observatory founder birthplace', 'quendal river'],
    answer: 'Quendal',
    turns: ['search', null, 'answer'],
    invalid: 1,
  },
  {
    dialect: 'toolcall',
    searches: ['quendal river'],
    answer: 'the Ossel',
    turns: [null, 'search', 'answer'],
    invalid: 1,
  },
];

describe('tool-call trajectories', () => {
  it('a file of three tool-call conversations is three trajectories, each with its searches', () => {
    const cs = conversations();
    assert.equal(cs.length, 3, 'tool-reply user turns do not start a conversation');
    const read = cs.map((c) => reading(parseTranscript(c).parsed));
    assert.deepEqual(read, EXPECTED);
    // The question comes from the user turn, not from a tool reply; the prompt ends at the first assistant marker.
    const t = parseTranscript(cs[0]!);
    assert.equal(t.question, 'who founded the varnholt observatory?');
    assert.ok(cs[0]!.slice(t.promptStart, t.promptEnd).endsWith('<|im_start|>assistant\n'));
    assert.ok(cs[0]!.slice(t.responseStart).startsWith('<think>I need the founder'));
  });

  it('Qwen2.5: decoys inside a tool response are document text; its documents are read', () => {
    const t = parseTranscript(conversations()[0]!);
    const p = t.parsed;
    assertTiles(p, t.responseStart);
    assert.deepEqual(kinds(p), [
      'think',
      'search',
      'template',
      'template',
      'information',
      'template',
      'template',
      'think',
      'answer',
      'template',
    ]);
    assert.deepEqual(p.diagnostics, []);
    const info = p.segments.find((s) => s.kind === 'information')!;
    const docs = documentsOf(p, info);
    assert.deepEqual(
      docs.map((d) => d.title),
      ['"Varnholt Observatory"', '"Quendal"'],
    );
    assert.match(docs[0]!.text, /<answer> Quendal <\/answer>/, 'the decoy answer stays in the document');
    assert.equal(p.segments.filter((s) => s.kind === 'search').length, 1, 'the decoy call is not a call');
    // Turn numbers: the observation belongs to the turn of its call; the next generation starts turn 1.
    assert.deepEqual(
      nonBlank(p)
        .filter((s) => s.kind !== 'template')
        .map((s) => [s.kind, s.turn]),
      [
        ['think', 0],
        ['search', 0],
        ['information', 0],
        ['think', 1],
        ['answer', 1],
      ],
    );
  });

  it('only the assistant acts: the preamble’s example call and the prompt’s instructions are not actions, even when parsed', () => {
    const whole = parseTrajectory(conversations()[0]!, { dialect: 'toolcall', expectAnswer: false });
    assertTiles(whole);
    assert.deepEqual(searchQueries(whole), ['varnholt observatory founder']);
    assert.equal(finalAnswer(whole), 'Ilse Marrow');
    assert.ok(
      !codes(whole).includes('invalid-tool-call'),
      '{"name": <function-name>, …} in the system message is not read',
    );
  });

  it('Qwen3: parallel calls answered in order; {"result": …} responses decoded; a malformed call and its error reply', () => {
    const t = parseTranscript(conversations()[1]!);
    const p = t.parsed;
    const turns = turnsOf(p);
    assert.equal(turns[0]!.observations.length, 2);
    const [r1, r2] = turns[0]!.observations.map((k) => documentsOf(p, p.segments[k]!));
    assert.deepEqual([r1![0]!.title, r1![0]!.text], ['Ilse Marrow', 'Ilse Marrow was born in Quendal.']);
    assert.deepEqual([r2![0]!.title, r2![0]!.text], ['Quendal', 'Quendal lies on the Ossel.']);
    const bad = p.segments.find((s) => s.call?.error !== undefined)!;
    assert.match(bad.call!.error!, /not valid JSON/);
    const d = p.diagnostics.find((x) => x.code === 'invalid-tool-call')!;
    assert.equal(d.severity, 'error');
    assert.ok(d.start >= bad.contentStart && d.end <= bad.contentEnd, 'the diagnostic is on the call’s body');
    assert.equal(p.segments[turns[1]!.observation!]!.kind, 'feedback', 'the error reply is feedback');
    assert.equal(turns[1]!.action, null);
    // The editor: hover on the second call shows its own response's documents.
    const doc = new TrajectoryDocument(TRAJ);
    const c = doc.conversations[1]!;
    const second = c.rel.parsed.segments.filter((s) => s.call?.query !== undefined)[1]!;
    const hover = doc.searchAt(TRAJ, c.start + second.start + 3)!;
    assert.equal(hover.query, 'quendal river');
    assert.deepEqual(
      hover.docs.map((x) => x.title),
      ['Quendal'],
    );
    const invalid = doc.searchAt(TRAJ, c.start + bad.start + 3)!;
    assert.match(invalid.error!, /not valid JSON/);
  });

  it('Hermes: tool role turns; an unknown tool is an invalid action answered by an error', () => {
    const p = parseTranscript(conversations()[2]!).parsed;
    assert.deepEqual(codes(p), ['unknown-tool']);
    assert.match(p.diagnostics[0]!.message, /unknown tool "lookup": the search tool is "search"/);
    assert.deepEqual(
      nonBlank(p)
        .filter((s) => s.kind === 'information' || s.kind === 'feedback')
        .map((s) => s.kind),
      ['feedback', 'information'],
    );
  });

  it('the outline: one trajectory per conversation, turns named by their searches', () => {
    const doc = new TrajectoryDocument(TRAJ);
    const outline = doc.outline(TRAJ);
    assert.deepEqual(
      outline.map((n) => n.name),
      [
        'Trajectory 1: who founded the varnholt observatory?',
        'Trajectory 2: in which town was the founder of the varnholt observatory born, and what river runs through it?',
        'Trajectory 3: what river runs through quendal?',
      ],
    );
    assert.equal(outline[0]!.detail, '2 turns · toolcall');
    assert.deepEqual(
      outline[1]!.children.map((n) => n.name),
      [
        'prompt',
        'Turn 1: 2 searches “varnholt observatory founder birthplace”, “quendal river”',
        'Turn 2: invalid action',
        'Turn 3: answer “Quendal”',
      ],
    );
    assert.deepEqual(
      outline[1]!.children[1]!.children.map((n) => n.name),
      [
        "think: Two facts: the founder's birthplace, an…",
        'search: varnholt observatory founder birthplace',
        'search: quendal river',
        'tool response: 1 documents',
        'tool response: 1 documents',
      ],
    );
    assert.match(outline[2]!.children[1]!.children[1]!.name, /^invalid tool call: unknown tool "lookup"/);
    // Folding: tool responses fold as comments, like information blocks.
    assert.ok(
      doc.foldingSpans().some((s) => s.kind === 'comment' && TRAJ.slice(s.start, s.end).startsWith('<tool_response>')),
    );
  });

  it('veRL and TRL dumps (special tokens dropped by the decoder) read as the transcripts do', async () => {
    const verl = await all(join(FIX, 'verl'));
    assert.deepEqual(
      verl.map((r) => reading(parseResponse(r.response, { prompt: r.prompt, dialect: r.dialect }))),
      EXPECTED,
    );
    assert.deepEqual(
      verl.map((r) => [r.dialect, r.searches, r.turns, r.finish]),
      [
        ['toolcall', 1, 2, 'answer'],
        ['toolcall', 2, 3, 'answer'],
        ['toolcall', 1, 3, 'answer'],
      ],
    );
    // `</tool_call>\nuser\n<tool_response>`: the role words the decoder left are template, not the model's text.
    const p = parseResponse(verl[0]!.response, { prompt: verl[0]!.prompt });
    assert.deepEqual(
      p.segments.filter((s) => s.kind === 'template').map((s) => verl[0]!.response.slice(s.start, s.end)),
      ['user', 'assistant'],
    );
    const trl = await all(join(FIX, 'trl'));
    assert.deepEqual(
      trl.map((r) => reading(parseResponse(r.response, { prompt: r.prompt }))),
      EXPECTED.slice(0, 2),
    );
    // Facts (summaries, the inspector's columns) agree.
    assert.deepEqual(
      verl.map((r) => {
        const f = trajectoryFacts(r);
        return [f.dialect, f.searches, f.turns, f.invalidActions, f.formatValid];
      }),
      [
        ['toolcall', 1, 2, 0, true],
        ['toolcall', 2, 3, 1, false],
        ['toolcall', 1, 3, 1, false],
      ],
    );
  });

  it('Llama 3.1 JSON tool calls (ipython turns) as a third dialect', () => {
    const text =
      '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "search", "parameters": {"query": "varnholt founder"}}<|eot_id|>' +
      '<|start_header_id|>ipython<|end_header_id|>\n\n"Doc 1(Title: Varnholt) Founded by Ilse Marrow. <answer>decoy</answer> {\\"name\\": \\"search\\"}"<|eot_id|>' +
      '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "search", "parameters": {"query": "quendal"<|eot_id|>' +
      '<|start_header_id|>ipython<|end_header_id|>\n\nError: invalid call<|eot_id|>' +
      '<|start_header_id|>assistant<|end_header_id|>\n\n<answer> Ilse Marrow </answer><|eot_id|>';
    assert.equal(detectDialect(text), 'llama-json');
    const p = parseTrajectory(text);
    assertTiles(p);
    assert.deepEqual(reading(p), {
      dialect: 'llama-json',
      searches: ['varnholt founder'],
      answer: 'Ilse Marrow',
      turns: ['search', null, 'answer'],
      invalid: 1,
    });
    assert.deepEqual(codes(p), ['invalid-tool-call']);
    assert.deepEqual(
      nonBlank(p)
        .filter((s) => s.kind !== 'template')
        .map((s) => s.kind),
      ['search', 'information', 'search', 'feedback', 'answer'],
    );
    assert.deepEqual(
      documentsOf(p, p.segments.find((s) => s.kind === 'information')!).map((d) => d.title),
      ['Varnholt'],
    );
    // Detected from the prompt's `Environment: ipython` even before any call.
    assert.equal(
      detectDialect('<answer>x</answer>', '<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n'),
      'llama-json',
    );
  });

  it('detection: the first action decides (a decoy inside a document comes after it); a tools preamble; forcing', () => {
    assert.equal(
      detectDialect(
        '<think>x</think><search>q</search><information>a page with <tool_call>{}</tool_call></information>',
      ),
      'searchr1',
    );
    assert.equal(
      detectDialect(
        '<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call><tool_response>see <search>x</search></tool_response>',
      ),
      'toolcall',
    );
    assert.equal(detectDialect('<answer>x</answer>'), 'searchr1');
    assert.equal(
      detectDialect('<answer>x</answer>', '<|im_start|>system\n# Tools\n\n<tools>\n{}\n</tools><|im_end|>'),
      'toolcall',
    );
    // Forced: the other dialect's tags are plain text.
    const r1 = '<think>a</think><search>q</search><information>d</information><answer>x</answer>';
    assert.deepEqual(searchQueries(parseTrajectory(r1, { dialect: 'toolcall' })), []);
    assert.deepEqual(searchQueries(parseTrajectory(r1)), ['q']);
  });

  it('reads a call as the engines do: JSON body, name, arguments; the search tool’s query', () => {
    const o = { searchTool: 'search', tools: ['calculator'] };
    const r = (body: string) => readToolCall(body, o);
    assert.deepEqual(r('{"name": "search", "arguments": {"query": " q "}}'), { call: { name: 'search', query: 'q' } });
    assert.deepEqual(
      r('{"name": "search", "arguments": {"query_list": ["a", "b"]}}'),
      { call: { name: 'search', query: 'a; b' } },
      'veRL’s search tool',
    );
    assert.deepEqual(
      r('{"name": "calculator", "arguments": {"x": 1}}'),
      { call: { name: 'calculator' } },
      'a declared tool: valid, not a search',
    );
    assert.equal(r('{"name": "search", "arguments": {"query": ""}}').problem?.code, 'empty-search');
    // The templates' own layout is read without JSON.parse: escapes decoded exactly as JSON.parse would.
    assert.deepEqual(r('\n{"name": "search", "arguments": {"query": "a \\"b\\" \\u00e9\\n"}}\n'), {
      call: { name: 'search', query: 'a "b" é' },
    });
    assert.equal(
      r('{"name": "search", "arguments": {"query": "tab\there"}}').problem?.code,
      'invalid-tool-call',
      'a raw control character is not JSON',
    );
    assert.match(r('{"name": "search", "arguments": {"query": "q"}} and more').call.error!, /text after the object/);
    assert.match(r('{"name": "search", "arguments": {"query": "q"}').call.error!, /a closing \} or \] is missing/);
    for (const [body, code, message] of [
      ['{"name": "search", "arguments": {"query": "q"}', 'invalid-tool-call', /not valid JSON/],
      ['["search"]', 'invalid-tool-call', /a JSON object with a string "name"/],
      [
        '{"name": "search", "arguments": "{\\"query\\": \\"q\\"}"}',
        'invalid-tool-call',
        /needs an "arguments" object, got string/,
      ],
      [
        '{"name": "lookup", "arguments": {}}',
        'unknown-tool',
        /unknown tool "lookup": the search tool is "search" \(the prompt also declares "calculator"\)/,
      ],
      ['{"name": "search", "arguments": {}}', 'missing-query', /has no "query" argument/],
      ['{"name": "search", "arguments": {"query": 3}}', 'missing-query', /"query" must be a string, got number/],
    ] as const) {
      const x = r(body);
      assert.equal(x.problem?.code, code, body);
      assert.match(x.call.error!, message, body);
    }
    // A configurable search tool name; tools declared in the prompt.
    const p = parseResponse('<tool_call>\n{"name": "wiki", "arguments": {"query": "q"}}\n</tool_call>', {
      searchTool: 'wiki',
    });
    assert.deepEqual(searchQueries(p), ['q']);
    const prompt = `<tools>\n${JSON.stringify({ type: 'function', function: { name: 'calculator' } })}\n</tools>`;
    const q = parseResponse(
      '<tool_call>\n{"name": "calculator", "arguments": {"x": 1}}\n</tool_call>',
      { prompt },
      { expectAnswer: false },
    );
    assert.deepEqual([searchQueries(q), codes(q), turnsOf(q)[0]!.action], [[], [], 'tool']);
  });

  it('a <think> the prompt opened (Qwen3 thinking templates) is not an unopened close', () => {
    const prompt = '<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n';
    const response = 'reasoning\n</think>\n\n<answer> x </answer>';
    const p = parseResponse(response, { prompt, dialect: 'toolcall' });
    assert.deepEqual(codes(p), []);
    assert.deepEqual(kinds(p), ['think', 'answer']);
    assert.equal(formatValidResponse(response, { prompt, dialect: 'toolcall' }).valid, true);
  });

  it('the tool-call format check: think → (call+ → response+ → think)* → answer', () => {
    const [q25, q3, hermes] = conversations();
    assert.deepEqual(formatValid(q25!), { valid: true, reason: 'Valid sequence format' });
    assert.match(formatValid(q3!).reason, /Invalid tool call: the tool call is not valid JSON/);
    assert.match(formatValid(hermes!).reason, /Invalid tool call: unknown tool/);
    const ok =
      '<think>a</think>\n<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>\n<tool_response>\nd\n</tool_response>\n<think>b</think>\n<answer>x</answer>';
    assert.equal(formatValidResponse(ok).valid, true);
    assert.match(formatValidResponse(ok.replace('<think>b</think>', 'so')).reason, /Unexpected content 'so'/);
    assert.match(
      formatValidResponse(ok.replace('<think>a</think>\n', '')).reason,
      /Unexpected tool call in state start/,
    );
    assert.match(formatValidResponse(ok.replace('<answer>x</answer>', '')).reason, /Incomplete sequence/);
  });

  it('the reward API reads both dialects alike: a reward module works unchanged', () => {
    const tags =
      '<think>a</think>\n<search> varnholt founder </search>\n\n<information>Doc 1(Title: V) Founded by Ilse Marrow.</information>\n\n<think>b</think>\n<answer> Ilse Marrow </answer>';
    const calls =
      '<think>a</think>\n<tool_call>\n{"name": "search", "arguments": {"query": "varnholt founder"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{"result": "Doc 1 (Title: V)\\nFounded by Ilse Marrow."}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>b</think>\n<answer> Ilse Marrow </answer><|im_end|>';
    const a = makeTrajectory('p', tags);
    const b = makeTrajectory('p', calls);
    assert.deepEqual([a.dialect, b.dialect], ['searchr1', 'toolcall']);
    const view = (t: typeof a) => ({
      answer: t.answer,
      searches: t.searches,
      valid: t.valid,
      turns: t.turns.map((x) => x.action),
      invalid: t.invalidActions,
    });
    assert.deepEqual(view(b), view(a));
    const example = { golden: ['Ilse Marrow'] };
    assert.deepEqual(emFormat(b, example, { retrievalScore: 0.5 }), emFormat(a, example, { retrievalScore: 0.5 }));
    const wrong = { golden: ['Ilse Marrow'] };
    const noAnswerA = makeTrajectory('p', tags.replace('<answer> Ilse Marrow </answer>', '<answer> Quendal </answer>'));
    const noAnswerB = makeTrajectory(
      'p',
      calls.replace('<answer> Ilse Marrow </answer>', '<answer> Quendal </answer>'),
    );
    assert.deepEqual(
      emFormat(noAnswerB, wrong, { retrievalScore: 0.5 }),
      emFormat(noAnswerA, wrong, { retrievalScore: 0.5 }),
      'retrieval correct from the decoded tool response',
    );
    assert.deepEqual(informationBlocks(calls), ['Doc 1 (Title: V)\nFounded by Ilse Marrow.']);
    // A forced dialect.
    assert.deepEqual(makeTrajectory('p', tags, { dialect: 'toolcall' }).searches, []);
  });

  it('TRL’s conversational messages with tool calls become text in the Qwen2.5 layout', () => {
    const messages = [
      {
        role: 'assistant',
        content: '<think>a</think>',
        tool_calls: [
          { type: 'function', function: { name: 'search', arguments: { query: 'q1' } } },
          { type: 'function', function: { name: 'search', arguments: '{"query": "q2"}' } },
        ],
      },
      { role: 'tool', name: 'search', content: 'Doc 1(Title: A) a' },
      { role: 'tool', name: 'search', content: 'Doc 1(Title: B) b' },
      { role: 'assistant', content: '<answer>x</answer>' },
    ];
    const text = messageText(messages);
    assert.equal(
      text,
      '<think>a</think>\n<tool_call>\n{"name": "search", "arguments": {"query":"q1"}}\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"query": "q2"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\nDoc 1(Title: A) a\n</tool_response>\n<tool_response>\nDoc 1(Title: B) b\n</tool_response><|im_end|>\n<|im_start|>assistant\n<answer>x</answer><|im_end|>',
    );
    assert.equal(renderToolMessages(messages), text);
    assert.deepEqual(reading(parseTrajectory(text)), {
      dialect: 'toolcall',
      searches: ['q1', 'q2'],
      answer: 'x',
      turns: ['search', 'answer'],
      invalid: 0,
    });
    // Messages without tools keep the plain join.
    assert.equal(
      messageText([
        { role: 'assistant', content: 'a' },
        { role: 'assistant', content: 'b' },
      ]),
      'a\nb',
    );
  });

  it('the inspector and the replay: facts, filters, search cards and document cards', async () => {
    const verl = await all(join(FIX, 'verl'));
    const facts = verl.map((record, index) => rowFacts({ index, file: 'f', line: index + 1, errors: [], record }));
    assert.deepEqual(
      facts.map((f) => [f.dialect, f.searches, f.invalid, f.valid]),
      [
        ['toolcall', 1, 0, true],
        ['toolcall', 2, 1, false],
        ['toolcall', 1, 1, false],
      ],
    );
    const table = new RolloutTable();
    for (const f of facts) table.add(f);
    assert.deepEqual([...table.query({ filter: 'dialect == "toolcall" && invalid > 0' })!], [1, 2]);
    const m = replayModel(verl[1]!, { index: 1, file: 'f', line: 2 });
    assert.equal(m.dialect, 'toolcall');
    const searches = m.entries.filter((e) => e.kind === 'search');
    assert.deepEqual(
      searches.map((e) => [e.tool, e.query, e.error?.slice(0, 24)]),
      [
        ['search', 'varnholt observatory founder birthplace', undefined],
        ['search', 'quendal river', undefined],
        [undefined, undefined, 'the tool call is not val'],
      ],
    );
    assert.deepEqual(
      m.entries.filter((e) => e.kind === 'information').map((e) => e.docs!.map((d) => d.title)),
      [['Ilse Marrow'], ['Quendal']],
    );
    assert.deepEqual(m.entries.filter((e) => e.kind === 'feedback').length, 1);
    assert.equal(m.answer, 'Quendal');
  });

  it('the dialect can be forced (read options) and comes from a run’s config (rollout.dialect)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sas-dialect-'));
    try {
      // A tool-call response whose only call was cut off: detection sees no tool tag; the run config says toolcall.
      const response = '<think>a</think>\n<answer> x </answer>';
      mkdirSync(join(dir, 'rollouts'));
      writeFileSync(
        join(dir, 'run.json'),
        JSON.stringify({
          v: 1,
          id: 'r',
          status: 'finished',
          created: 'now',
          config: { rollout: { dialect: 'toolcall' } },
        }),
      );
      writeFileSync(
        join(dir, 'rollouts', 'step-000001.jsonl'),
        `${JSON.stringify({ v: 1, id: 'a', prompt: 'p', response })}\n${JSON.stringify({ v: 1, id: 'b', prompt: 'p', response, dialect: 'searchr1' })}\n`,
      );
      assert.deepEqual(
        (await all(dir)).map((r) => r.dialect),
        ['toolcall', 'searchr1'],
        'the record’s own dialect wins over the run config',
      );
      assert.deepEqual(
        (await all(dir, { dialect: 'llama-json' })).map((r) => r.dialect),
        ['llama-json', 'llama-json'],
        'a forced dialect wins',
      );
      const store = await RolloutStore.open(dir);
      assert.deepEqual(
        (await store.rows(0, 2)).map((r) => r.record!.dialect),
        ['toolcall', 'searchr1'],
      );
      await store.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('is total in every dialect: random tool-call soup never throws and always tiles', () => {
    const pieces = [
      '<tool_call>',
      '</tool_call>',
      '<tool_response>',
      '</tool_response>',
      '{"name": "search", "arguments": {"query": "q"}}',
      '{"name": "x"',
      '{',
      '}',
      '"',
      '\\',
      '<think>',
      '</think>',
      '<answer>',
      '</answer>',
      '<search>',
      '</information>',
      '<|im_start|>user\n',
      '<|im_start|>tool\n',
      '<|im_start|>assistant\n',
      '<|im_start|>system\n',
      '<|im_end|>',
      'user\n',
      'assistant\n',
      '\n',
      ' ',
      'a',
      'Error: x',
      '{"error": 1}',
      '<|start_header_id|>ipython<|end_header_id|>',
      '<|start_header_id|>assistant<|end_header_id|>\n\n',
      '<|eot_id|>',
      '<|python_tag|>',
      'Doc 1(Title: t) d\n',
      '<|',
      '😀',
      '\ud800',
    ];
    soup(pieces, 4242, 3000, (text, trial) => {
      for (const dialect of ['toolcall', 'llama-json', 'auto'] as (Dialect | 'auto')[]) {
        const p = parseTrajectory(text, { dialect, openThink: trial % 7 === 0, offset: trial % 3 });
        assertTiles(p, trial % 3);
        const turns = turnsOf(p);
        invalidActionCount(p, turns);
        finalAnswer(p);
        searchQueries(p);
        formatValidResponse(text, { dialect: p.dialect });
        for (const s of p.segments) if (s.kind === 'information') documentsOf(p, s);
      }
    });
    new TrajectoryDocument(TRAJ.replace(/<\/tool_response>/g, '')).outline(TRAJ.replace(/<\/tool_response>/g, ''));
  });
});
