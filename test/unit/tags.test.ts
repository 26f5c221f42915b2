import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { trajectoryFacts } from '../../src/core/audit/summary';
import { replayModel } from '../../src/core/inspect/replay';
import { makeTrajectory } from '../../src/core/rewards/api';
import { TrajectoryDocument } from '../../src/core/tags/document';
import {
  INVALID_ACTION_MESSAGE,
  type ParsedTrajectory,
  parseTrajectory,
  templateMarkerLength,
} from '../../src/core/tags/parser';
import {
  extractAnswer,
  finalAnswer,
  parseDocuments,
  pythonStrip,
  searchR1Action,
  searchR1ExtractSolution,
  searchR1Observation,
  strictAction,
  turnsOf,
} from '../../src/core/tags/searchr1';
import {
  detectTemplate,
  extractQuestion,
  parseTranscript,
  splitConversations,
  splitTranscript,
} from '../../src/core/tags/transcript';

import { assertTiles, soup } from './tiles';

const FIXTURES = join(__dirname, '..', 'fixtures');

function kinds(p: ParsedTrajectory): string[] {
  return p.segments.filter((s) => s.kind !== 'text' || p.text.slice(s.start, s.end).trim()).map((s) => s.kind);
}
function codes(p: ParsedTrajectory): string[] {
  return p.diagnostics.map((d) => d.code);
}
const VALID =
  '<think>Who founded it?</think>\n<search> Varnholt founder </search>\n\n' +
  '<information>Doc 1(Title: "Varnholt") Founded by Ilse Marrow. See <answer>nope</answer> and <search>x</search>.\n</information>\n\n' +
  '<think>Ilse Marrow.</think>\n<answer> Ilse Marrow </answer>';

describe('tag parser', () => {
  it('parses a valid trajectory into tiling segments with turns and no diagnostics', () => {
    const p = parseTrajectory(VALID);
    assertTiles(p);
    assert.deepEqual(kinds(p), ['think', 'search', 'information', 'think', 'answer']);
    assert.deepEqual(p.diagnostics, []);
    const blocks = p.segments.filter((s) => s.kind !== 'text');
    assert.deepEqual(
      blocks.map((s) => s.turn),
      [0, 0, 0, 1, 1],
    );
    const search = blocks[1]!;
    assert.equal(VALID.slice(search.contentStart, search.contentEnd), ' Varnholt founder ');
    assert.ok(blocks.every((s) => s.opened && s.closed));
  });

  it('treats tags inside <information> as document text, not actions', () => {
    const p = parseTrajectory(VALID);
    assert.equal(p.segments.filter((s) => s.kind === 'answer').length, 1);
    assert.equal(finalAnswer(p), 'Ilse Marrow');
    const info = p.segments.find((s) => s.kind === 'information')!;
    assert.match(VALID.slice(info.contentStart, info.contentEnd), /<answer>nope<\/answer>/);
  });

  it('reports an unclosed tag at its opening, and the block runs to the end', () => {
    const text = '<think>ok</think>\n<answer> Quendal';
    const p = parseTrajectory(text);
    assertTiles(p);
    const d = p.diagnostics.find((x) => x.code === 'unclosed-tag')!;
    assert.equal(text.slice(d.start, d.end), '<answer>');
    const last = p.segments.at(-1)!;
    assert.equal(last.kind, 'answer');
    assert.equal(last.closed, false);
    assert.equal(finalAnswer(p), undefined, 'an unclosed answer is not a final answer');
  });

  it('reports a closing tag without an opening one', () => {
    const text = '<think>a</think> </search>\n<answer>b</answer>';
    const p = parseTrajectory(text);
    assertTiles(p);
    const d = p.diagnostics.find((x) => x.code === 'unopened-close')!;
    assert.equal(text.slice(d.start, d.end), '</search>');
  });

  it('reports nested tags and keeps segments flat, resuming the outer block', () => {
    const text = '<think>I will <search>q</search> then think</think>\n<answer>x</answer>';
    const p = parseTrajectory(text);
    assertTiles(p);
    assert.deepEqual(codes(p), ['nested-tag']);
    assert.deepEqual(kinds(p), ['think', 'search', 'think', 'answer']);
    const [t1, , t2] = p.segments;
    assert.equal(t1!.opened, true);
    assert.equal(t1!.closed, false);
    assert.equal(t2!.opened, false);
    assert.equal(t2!.closed, true);
    // Search-R1 reads the nested search as the turn's action.
    assert.deepEqual(searchR1Action(text), { action: 'search', content: 'q' });
  });

  it('closing an outer block closes (and reports) the inner ones', () => {
    const text = '<think>a <search>q </think>\n<answer>x</answer>';
    const p = parseTrajectory(text);
    assertTiles(p);
    assert.deepEqual(codes(p), ['nested-tag', 'unclosed-tag']);
  });

  it('reports text between blocks, missing and multiple answers, empty searches', () => {
    const p = parseTrajectory(
      '<think>a</think>\nSo the answer:\n<search>   </search>\n\n<information>d</information>\n<answer>1</answer><answer>2</answer>',
    );
    assertTiles(p);
    assert.deepEqual(codes(p), ['text-between-tags', 'empty-search', 'multiple-answers']);
    assert.equal(finalAnswer(p), '2', 'the final answer is the last');
    assert.deepEqual(codes(parseTrajectory('<think>a</think>')), ['missing-answer']);
    assert.deepEqual(codes(parseTrajectory('<think>a</think>', { expectAnswer: false })), []);
    assert.deepEqual(codes(parseTrajectory('hello <answer>x</answer>', { strictText: false })), []);
  });

  it('recognises Search-R1’s invalid-action feedback as an observation, not as actions', () => {
    const text = `<think>hmm</think>\nI guess.\n\n${INVALID_ACTION_MESSAGE}\n<think>ok</think>\n<answer>y</answer>`;
    const p = parseTrajectory(text);
    assertTiles(p);
    assert.deepEqual(kinds(p), ['think', 'text', 'feedback', 'think', 'answer']);
    assert.equal(p.segments.filter((s) => s.kind === 'search').length, 0);
    const fb = p.segments.find((s) => s.kind === 'feedback')!;
    assert.equal(text.slice(fb.start, fb.end), INVALID_ACTION_MESSAGE);
    assert.equal(p.segments.find((s) => s.kind === 'answer')!.turn, 1);
    const turns = turnsOf(p);
    assert.equal(turns.length, 2);
    assert.equal(turns[0]!.action, null, 'the first turn was an invalid action');
    assert.equal(turns[1]!.action, 'answer');
    // An unclosed block before the feedback is ended there.
    const q = parseTrajectory(`<think>never closed\n${INVALID_ACTION_MESSAGE}\n<answer>z</answer>`);
    assertTiles(q);
    assert.deepEqual(codes(q), ['unclosed-tag']);
  });

  it('marks chat-template markers, also inside a block, without changing what is open', () => {
    const text = '<|im_start|>assistant\n<think>a</think>\n<answer>b <|im_end|> c</answer><|eot_id|>';
    const p = parseTrajectory(text);
    assertTiles(p);
    assert.deepEqual(kinds(p), ['template', 'think', 'answer', 'template', 'answer', 'template']);
    assert.deepEqual(p.diagnostics, []);
    assert.equal(text.slice(p.segments[0]!.start, p.segments[0]!.end), '<|im_start|>assistant');
    assert.equal(
      templateMarkerLength('<|start_header_id|>assistant<|end_header_id|>\n', 0),
      '<|start_header_id|>assistant<|end_header_id|>'.length,
    );
    assert.equal(templateMarkerLength('<|not a marker|>', 0), 0);
    assert.equal(templateMarkerLength('<|', 0), 0);
  });

  it('shifts positions by an offset', () => {
    const p = parseTrajectory('<answer>x</answer>', { offset: 100 });
    assertTiles(p, 100);
    assert.equal(finalAnswer(p), 'x');
  });

  it('is total: random tag soup never throws and always tiles', () => {
    const pieces = [
      '<think>',
      '</think>',
      '<search>',
      '</search>',
      '<information>',
      '</information>',
      '<answer>',
      '</answer>',
      '<|im_start|>assistant',
      '<|im_end|>',
      '<|',
      '|>',
      '<',
      '>',
      '/',
      'a',
      ' ',
      '\n',
      'é',
      '😀',
      INVALID_ACTION_MESSAGE.slice(0, 20),
      INVALID_ACTION_MESSAGE,
      '\ud800',
    ];
    soup(pieces, 12345, 3000, (text) => {
      const p = parseTrajectory(text);
      assertTiles(p);
      turnsOf(p);
      finalAnswer(p);
    });
    for (const odd of [undefined, null, 42, {}] as unknown as string[]) assertTiles(parseTrajectory(odd));
  });

  it('memory is per segment: segments hold offsets, not copies', () => {
    const p = parseTrajectory(VALID);
    for (const s of p.segments) for (const v of Object.values(s)) assert.ok(typeof v !== 'string' || v === s.kind);
  });
});

describe('Search-R1 semantics', () => {
  it('takes the first search/answer of a turn, DOTALL, stripped', () => {
    assert.deepEqual(searchR1Action('<think>x</think><search>\n multi\nline \n</search><answer>a</answer>'), {
      action: 'search',
      content: 'multi\nline',
    });
    assert.deepEqual(searchR1Action('<answer>a</answer><search>q</search>'), { action: 'answer', content: 'a' });
    assert.deepEqual(searchR1Action('<search>q</answer>'), { action: null, content: '' }, 'the closing tag must match');
    assert.deepEqual(searchR1Action('no action'), { action: null, content: '' });
  });

  it('reads every turn of the shared fixture as the trainer does, in both readings (test/fixtures/tags/strict-actions.json)', () => {
    const { cases } = JSON.parse(readFileSync(join(FIXTURES, 'tags', 'strict-actions.json'), 'utf8')) as {
      cases: { why: string; text: string; searchr1: [string | null, string]; strict: [string | null, string] }[];
    };
    assert.ok(cases.length >= 10);
    for (const c of cases) {
      assert.deepEqual(searchR1Action(c.text), { action: c.searchr1[0], content: c.searchr1[1] }, `searchr1: ${c.why}`);
      assert.deepEqual(strictAction(c.text), { action: c.strict[0], content: c.strict[1] }, `strict: ${c.why}`);
    }
  });

  it('strict actions: a reward reads no answer from inside an unclosed <search>, and a later valid answer still counts', () => {
    const obs = '\n\n<information>Doc 1(Title: "Bryran Printing House") Founded by Broubrar.</information>\n\n';
    const hack =
      '<think> let me search </think> <search> Bryran </search>' +
      obs +
      '<think> let me search again </think> <search> Broubrar <answer> Broubrar </answer>';
    assert.equal(makeTrajectory('', hack).answer, 'Broubrar', 'Search-R1 reads the answer');
    const strict = makeTrajectory('', hack, { strictActions: true });
    assert.equal(strict.answer, null);
    assert.deepEqual(
      strict.turns.map((t) => t.action),
      ['search', null],
    );
    const fb =
      '\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n';
    const recovered = hack + fb + '<answer> Doubrebyst </answer>';
    assert.equal(makeTrajectory('', recovered, { strictActions: true }).answer, 'Doubrebyst');
    assert.equal(
      makeTrajectory('', recovered, { strictActions: true }).invalidActions,
      1,
      'the feedback answered an invalid turn',
    );
    assert.equal(makeTrajectory('', recovered).answer, 'Doubrebyst');
    // the inspector's summary and replay read a record as its run did
    const record = { v: 2 as const, id: 'r', prompt: '', response: hack, golden: ['Broubrar'] };
    assert.equal(trajectoryFacts(record).answer, 'Broubrar');
    assert.deepEqual(
      [
        trajectoryFacts({ ...record, strict_actions: true }).answer,
        trajectoryFacts({ ...record, strict_actions: true }).em,
      ],
      [null, 0],
    );
    assert.equal(replayModel({ ...record, strict_actions: true }, { index: 0, file: 'x.jsonl', line: 1 }).answer, null);
    assert.equal(replayModel(record, { index: 0, file: 'x.jsonl', line: 1 }).answer, 'Broubrar');
    const toolcall = makeTrajectory('', '<tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call>', {
      dialect: 'toolcall',
      strictActions: true,
    });
    assert.equal(toolcall.turns[0]!.action, 'search', 'strict actions read Search-R1 tags only');
  });

  it('extract_solution needs two or more answers in prompt + response (the quirk)', () => {
    const prompt = 'For example, <answer> Beijing </answer>. Question: q?\n';
    assert.equal(searchR1ExtractSolution(prompt + '<answer> Paris </answer>'), 'Paris');
    assert.equal(searchR1ExtractSolution('<answer> Paris </answer>'), null, 'one match is read as the prompt example');
    assert.equal(searchR1ExtractSolution(prompt), null);
    // An answer inside retrieved documents counts for Search-R1.
    assert.equal(searchR1ExtractSolution(prompt + '<information><answer>doc</answer></information>'), 'doc');
  });

  it('extractAnswer: the last answer by default; the quirk only when asked, with a diagnostic', () => {
    const prompt = 'For example, <answer> Beijing </answer>. Question: q?\n';
    assert.deepEqual(extractAnswer('<answer> Paris </answer>'), { answer: 'Paris', diagnostics: [] });
    assert.equal(extractAnswer('<information><answer>doc</answer></information>').answer, null);
    const quirk = extractAnswer('<answer> Paris </answer>', { mode: 'searchr1-quirk', prompt });
    assert.equal(quirk.answer, 'Paris');
    assert.equal(quirk.diagnostics[0]!.code, 'searchr1-answer-quirk');
    assert.equal(quirk.diagnostics[0]!.severity, 'info');
    const noExample = extractAnswer('<answer> Paris </answer>', { mode: 'searchr1-quirk', prompt: 'Question: q?\n' });
    assert.equal(noExample.answer, null);
    assert.equal(noExample.diagnostics[0]!.severity, 'warning');
    assert.match(noExample.diagnostics[0]!.message, /scores as having none/);
  });

  it('strips like Python', () => {
    assert.equal(pythonStrip('\u3000\u00a0 x \x1c\u2029'), 'x');
    assert.equal(pythonStrip('\u200b x'), '\u200b x', 'ZERO WIDTH SPACE is not whitespace in Python');
  });

  it('formats observations and parses documents back', () => {
    const obs = searchR1Observation(['"Varnholt Observatory"\nFounded in 1871.\nBy Ilse.', '"Quendal"\nA town.']);
    assert.equal(
      obs,
      '\n\n<information>Doc 1(Title: "Varnholt Observatory") Founded in 1871.\nBy Ilse.\nDoc 2(Title: "Quendal") A town.</information>\n\n',
    );
    const p = parseTrajectory(obs, { expectAnswer: false });
    const info = p.segments.find((s) => s.kind === 'information')!;
    const docs = parseDocuments(obs.slice(info.contentStart, info.contentEnd), info.contentStart);
    assert.deepEqual(
      docs.map((d) => [d.index, d.title, d.text]),
      [
        [1, '"Varnholt Observatory"', 'Founded in 1871.\nBy Ilse.'],
        [2, '"Quendal"', 'A town.'],
      ],
    );
    assert.equal(obs.slice(docs[1]!.start, docs[1]!.start + 5), 'Doc 2');
    assert.deepEqual(
      parseDocuments('  free text  ').map((d) => d.text),
      ['free text'],
    );
    assert.deepEqual(parseDocuments(''), []);
  });
});

describe('transcripts', () => {
  const infer = readFileSync(join(FIXTURES, 'transcripts', 'searchr1-infer.txt'), 'utf8');

  it('splits a file of infer.py conversations', () => {
    const spans = splitConversations(infer);
    assert.equal(spans.length, 3);
    assert.ok(infer.slice(spans[0]!.start).startsWith('<|im_start|>system'));
    assert.ok(infer.slice(spans[2]!.start).startsWith('<|begin_of_text|>'));
    assert.ok(infer.slice(spans[0]!.start, spans[0]!.end).endsWith('<answer> Ilse Marrow </answer>'));
  });

  it('splits conversations without headers at chat-template starts, and at ### trajectory lines', () => {
    const one =
      '<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQuestion: a?\n<|im_end|>\n<|im_start|>assistant\n<answer>1</answer>';
    const two = '<|im_start|>user\nQuestion: b?\n<|im_end|>\n<|im_start|>assistant\n<answer>2</answer>';
    const spans = splitConversations(`${one}\n\n${two}\n`);
    assert.equal(spans.length, 2);
    const traj = '### trajectory 7 (step 3)\n<answer>a</answer>\n### trajectory\n<answer>b</answer>';
    const t = splitConversations(traj);
    assert.deepEqual(
      t.map((s) => [traj.slice(s.start, s.end), s.label]),
      [
        ['<answer>a</answer>', '7 (step 3)'],
        ['<answer>b</answer>', ''],
      ],
    );
    assert.equal(splitConversations('<think>x</think><answer>y</answer>').length, 1);
  });

  it('a question ends at a chat-template marker on its line (Llama-3: <|eot_id|><|start_header_id|>assistant…)', () => {
    const llama =
      '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nAnswer the given question. Question: who founded the varnholt observatory?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<think>x</think><answer> Ilse Marrow </answer><|eot_id|>';
    const t = parseTranscript(llama);
    assert.equal(t.question, 'who founded the varnholt observatory?');
    assert.equal(
      extractQuestion('Question: what river runs through quendal?<|im_end|>\n<|im_start|>assistant\n'),
      'what river runs through quendal?',
    );
    assert.equal(extractQuestion('[INST] Question: where is Ossel? [/INST]'), 'where is Ossel?');
    assert.equal(extractQuestion('Question: <|eot_id|>'), undefined);
    // The outline names the trajectory by its clean question.
    assert.equal(
      new TrajectoryDocument(llama).outline(llama)[0]!.name,
      'Trajectory 1: who founded the varnholt observatory?',
    );
  });

  it('splits prompt from response for ChatML, Llama-3 and plain prompts', () => {
    const spans = splitConversations(infer);
    const chatml = infer.slice(spans[0]!.start, spans[0]!.end);
    const s1 = splitTranscript(chatml);
    assert.equal(s1.template, 'chatml');
    assert.ok(chatml.slice(s1.responseStart).startsWith('<think>I need to find'));
    assert.ok(chatml.slice(0, s1.promptEnd).endsWith('<|im_start|>assistant\n'));

    const llama = infer.slice(spans[2]!.start, spans[2]!.end);
    const s3 = splitTranscript(llama);
    assert.equal(s3.template, 'llama3');
    assert.ok(llama.slice(s3.responseStart).startsWith('<think>I should search'));

    const plain =
      'Answer the given question. For example, <answer> Beijing </answer>. Question: who?\n<think>t</think>\n<answer>me</answer>';
    const s4 = splitTranscript(plain);
    assert.equal(s4.template, 'plain');
    assert.equal(s4.by, 'question-line');
    assert.equal(plain.slice(s4.responseStart), '<think>t</think>\n<answer>me</answer>');
    const s5 = splitTranscript('PROMPT<answer>x</answer>', { prompt: 'PROMPT' });
    assert.deepEqual([s5.responseStart, s5.by], [6, 'prompt']);
    assert.equal(splitTranscript('<answer>x</answer>').by, 'none');
    assert.equal(detectTemplate('x'), 'plain');
  });

  it('parses only the response: the prompt’s example tags are not actions', () => {
    const spans = splitConversations(infer);
    const t = parseTranscript(infer.slice(spans[0]!.start, spans[0]!.end));
    assert.equal(t.question, 'who founded the varnholt observatory?');
    assert.deepEqual(t.parsed.diagnostics, []);
    assert.equal(finalAnswer(t.parsed), 'Ilse Marrow');
    const second = parseTranscript(infer.slice(spans[1]!.start, spans[1]!.end));
    assert.deepEqual(
      second.parsed.diagnostics.map((d) => d.code),
      ['text-between-tags'],
    );
    assert.deepEqual(
      turnsOf(second.parsed).map((x) => x.action),
      ['search', null, 'search', 'answer'],
    );
    const third = parseTranscript(infer.slice(spans[2]!.start, spans[2]!.end));
    // <think> left open when the observation came (reported at <think>), <search> nested in it, answer unclosed.
    assert.deepEqual(
      third.parsed.diagnostics.map((d) => d.code),
      ['unclosed-tag', 'nested-tag', 'unclosed-tag'],
    );
    assert.match(third.parsed.diagnostics[0]!.message, /not closed before <information>/);
    assert.equal(extractQuestion('x Question: where?\n'), 'where?');
  });
});
