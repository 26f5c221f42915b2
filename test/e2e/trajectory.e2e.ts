/** The trajectory language in real VS Code: colours, diagnostics, outline, hover. */
import assert from 'node:assert/strict';
import { type CodeServerSession, until } from './harness';
import { session } from './hooks';

describe('trajectory language (code-server)', function () {
  let s: CodeServerSession;
  before(async () => {
    s = await session();
    await s.openFile('demo.traj');
  });

  it('opens .traj files as Search Trajectory', async () => {
    const mode = await until('the language status', async () => {
      const t = await s.page.locator('.statusbar-item[id="status.editor.mode"]').textContent();
      return t?.includes('Search Trajectory') ? t : undefined;
    });
    assert.match(mode, /Search Trajectory/);
  });

  it('colours a search query and an information block differently', async () => {
    const spans = await until('tokenised spans', async () => {
      const all = await s.editorSpans();
      const q = all.find((x) => x.text.includes('varnholt observatory founder'));
      const d = all.find((x) => x.text.includes('founded in 1871'));
      // Tokenisation is asynchronous: wait until the query is coloured at all.
      return q && d && q.color !== all.find((x) => x.text.includes('Question: who founded'))?.color ? all : undefined;
    });
    const query = spans.find((x) => x.text.includes('varnholt observatory founder'))!;
    const doc = spans.find((x) => x.text.includes('founded in 1871'))!;
    const think = spans.find((x) => x.text.includes('I need to find who founded'))!;
    const plain = spans.find((x) => x.text.includes('Question: who founded'))!;
    assert.notEqual(query.color, doc.color, 'search query vs document text');
    assert.notEqual(query.color, plain.color, 'the query is coloured, not plain text');
    assert.notEqual(doc.color, plain.color, 'information is dimmed, not plain text');
    assert.equal(think.fontStyle, 'italic');
    // An <answer> inside a document is document text: same colour as the document around it.
    const docAnswer = spans.find(
      (x) =>
        x.text.includes('<answer>Quendal</answer>') || (x.text.includes('Quendal') && x.text.includes('page says')),
    );
    assert.ok(docAnswer, JSON.stringify(spans.filter((x) => x.text.includes('Quendal'))));
    assert.equal(docAnswer.color, doc.color);
  });

  it('reports an unclosed tag in the Problems panel', async () => {
    await s.runCommand('Problems: Focus on Problems View');
    const text = await until('the unclosed-tag problem', async () => {
      const t = await s.page.locator('.markers-panel').first().textContent();
      return t?.includes('is not closed before <information>') ? t : undefined;
    });
    assert.match(text, /search-trajectory/);
    assert.match(text, /<think> is not closed before <information>/);
    // Squiggles in the editor too.
    assert.ok((await s.page.locator('.editor-instance .squiggly-error').count()) > 0);
  });

  it('shows the turns in the outline, named by query and answer', async () => {
    await s.runCommand('Explorer: Focus on Outline View');
    const rows = s.page.locator('.outline-pane .monaco-list-row');
    const top = await until('the trajectories', async () => {
      const l = await s.outlineLabels();
      return l.some((x) => x.startsWith('Trajectory 2')) ? l : undefined;
    });
    assert.deepEqual(top, [
      'Trajectory 1 (step 12, reward 1.0): who founded the varnholt observatory?',
      'Trajectory 2 (step 12, reward 0.0)',
    ]);
    // Expand the first trajectory (items start collapsed in the test settings).
    await rows.first().click();
    await s.page.keyboard.press('ArrowRight');
    const labels = await until('its turns', async () => {
      const l = await s.outlineLabels();
      return l.some((x) => x.startsWith('Turn 2')) ? l : undefined;
    });
    assert.ok(labels.includes('Turn 1: search “varnholt observatory founder”'), JSON.stringify(labels));
    assert.ok(labels.includes('Turn 2: answer “Ilse Marrow”'), JSON.stringify(labels));
  });

  it('hovers a search with its turn and the documents that came back', async () => {
    await s.openFile('demo.traj');
    await s.hoverEditorText('varnholt observatory founder');
    const hover = await until('the hover', async () => {
      const all = await s.page
        .locator('.monaco-hover')
        .evaluateAll((els) => els.map((e) => (e.textContent ?? '').replace(/\u00a0/g, ' ')));
      return all.find((t) => t.includes('Turn 1'));
    });
    assert.match(hover, /search: “varnholt observatory founder”/);
    assert.match(hover, /Doc 1 · "Varnholt Observatory"/);
    assert.match(hover, /One page says <answer>Quendal<\/answer>/, 'document text shown literally');
  });
});
