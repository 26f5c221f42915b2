import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TrajectoryDocument } from '../../src/core/tags/document';

const CASES = readFileSync(join(__dirname, '..', 'grammar', 'cases.traj'), 'utf8');
const INFER = readFileSync(join(__dirname, '..', 'fixtures', 'transcripts', 'searchr1-infer.txt'), 'utf8');

describe('trajectory documents', () => {
  it('finds the conversations and their diagnostics at absolute offsets', () => {
    const doc = new TrajectoryDocument(CASES);
    assert.equal(doc.conversations.length, 3);
    assert.equal(doc.conversations[0]!.label, '1 (step 3, reward 1)');
    const diags = doc.diagnostics();
    assert.deepEqual(
      diags.map((d) => d.code),
      ['nested-tag', 'text-between-tags', 'text-between-tags', 'unopened-close', 'missing-answer'],
    );
    const stray = diags.find((d) => d.code === 'unopened-close')!;
    assert.equal(CASES.slice(stray.start, stray.end), '</answer>');
    const nested = diags[0]!;
    assert.equal(CASES.slice(nested.start, nested.end), '<search>');
  });

  it('re-parses only the conversations an edit touched', () => {
    const doc = new TrajectoryDocument(INFER);
    assert.equal(doc.parsedLastUpdate, 3);
    const edited = INFER.replace('<answer> Quendal </answer>', '<answer> Quendal, Ossel </answer>');
    doc.update(edited);
    assert.equal(doc.parsedLastUpdate, 1);
    assert.equal(doc.conversations.length, 3);
    // Offsets of the later conversations follow the edit.
    const third = doc.conversations[2]!;
    assert.ok(edited.slice(third.start).startsWith('<|begin_of_text|>'));
    doc.update(edited);
    assert.equal(doc.parsedLastUpdate, 0);
  });

  it('outlines trajectories → prompt and turns → blocks, named by query and answer', () => {
    const doc = new TrajectoryDocument(INFER);
    const outline = doc.outline(INFER);
    assert.equal(outline.length, 3);
    assert.equal(outline[1]!.name, 'Trajectory 2: in which town was the founder of the varnholt observatory born?');
    assert.deepEqual(
      outline[1]!.children.map((c) => c.name),
      [
        'prompt',
        'Turn 1: search “Varnholt Observatory founder”',
        'Turn 2: invalid action',
        'Turn 3: search “Ilse Marrow birthplace”',
        'Turn 4: answer “Quendal”',
      ],
    );
    const turn1 = outline[1]!.children[1]!;
    assert.deepEqual(
      turn1.children.map((c) => c.kind),
      ['think', 'search', 'information'],
    );
    assert.equal(INFER.slice(turn1.selectionStart, turn1.selectionEnd), ' Varnholt Observatory founder ');
    assert.equal(turn1.detail, '1 documents');
    assert.equal(outline[2]!.children.at(-1)!.children.at(-1)!.detail, 'unclosed');
  });

  it('folds conversations, prompts and blocks', () => {
    const doc = new TrajectoryDocument(CASES);
    const spans = doc.foldingSpans();
    const info = spans.find((s) => s.kind === 'comment')!;
    assert.ok(CASES.slice(info.start, info.end).startsWith('<information>'));
    assert.ok(CASES.slice(info.start, info.end).endsWith('</information>'));
    const prompt = spans.filter((s) => s.kind === 'region' && CASES.slice(s.start).startsWith('<|im_start|>user'));
    assert.equal(prompt.length, 2, 'the conversation and its prompt');
    assert.ok(CASES.slice(prompt[1]!.start, prompt[1]!.end).endsWith('<|im_start|>assistant\n'));
  });

  it('gives a search its turn and the documents that came back', () => {
    const doc = new TrajectoryDocument(INFER);
    const at = INFER.indexOf('Ilse Marrow birthplace');
    const s = doc.searchAt(INFER, at)!;
    assert.equal(s.turn, 3);
    assert.equal(s.query, 'Ilse Marrow birthplace');
    assert.deepEqual(
      s.docs.map((d) => [d.index, d.title]),
      [[1, '"Ilse Marrow"']],
    );
    assert.equal(INFER.slice(s.docs[0]!.start, s.docs[0]!.start + 5), 'Doc 1');
    assert.equal(doc.searchAt(INFER, INFER.indexOf('First find the founder')), undefined);
  });

  it('caps diagnostics on huge files', () => {
    const bad = Array.from({ length: 50 }, (_, i) => `### trajectory ${i}\n${'</think> '.repeat(30)}`).join('\n');
    const d = new TrajectoryDocument(bad).diagnostics(100);
    assert.equal(d.length, 101);
    assert.match(d[100]!.message, /more problems not shown/);
  });
});
