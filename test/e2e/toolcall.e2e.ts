/**
 * Tool-call trajectories in real VS Code (code-server): a transcript of three chat-template conversations with tool
 * turns (test/fixtures/toolcall) is three trajectories in the outline, each with its searches, and a tool call
 * hovers with the documents of its own response; a tool-call rollout of a run whose config says
 * `rollout.dialect: "toolcall"` shows its dialect in the inspector and replays with a search card per call and
 * document cards per tool response, the response's tokens retrieved.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Frame } from 'playwright-core';
import { scratchDir } from '../support/scratch';
import { CodeServerSession, ROOT, tokenPieces, until } from './harness';

type Role = 'prompt' | 'generated' | 'retrieved';

/** A Qwen2.5-layout tool-call rollout with parallel calls; token arrays split from (text, role) pieces. */
function toolCallRecord(): string {
  const call = (q: string) => `<tool_call>\n{"name": "search", "arguments": {"query": "${q}"}}\n</tool_call>`;
  const pieces: [string, Role][] = [
    [
      '<|im_start|>system\n# Tools\n\n<tools>\n{"type": "function", "function": {"name": "search"}}\n</tools><|im_end|>\n<|im_start|>user\nQuestion: where was the founder of the varnholt observatory born?<|im_end|>\n<|im_start|>assistant\n',
      'prompt',
    ],
    [
      `<think> Two searches at once. </think>\n${call('varnholt observatory founder')}\n${call('ilse marrow birthplace')}<|im_end|>`,
      'generated',
    ],
    ['\n<|im_start|>user\n<tool_response>\n', 'prompt'],
    ['Doc 1(Title: Varnholt Observatory) Founded by Ilse Marrow in 1871.', 'retrieved'],
    ['\n</tool_response>\n<tool_response>\n', 'prompt'],
    ['Doc 1(Title: Ilse Marrow) Ilse Marrow was born in Quendal.', 'retrieved'],
    ['\n</tool_response><|im_end|>\n<|im_start|>assistant\n', 'prompt'],
    ['<think> Quendal. </think>\n<answer> Quendal </answer><|im_end|>', 'generated'],
  ];
  const { text, role } = tokenPieces(pieces);
  const prompt = pieces[0]![0];
  const response = pieces
    .slice(1)
    .map((p) => p[0])
    .join('');
  return JSON.stringify({
    v: 1,
    id: 'tc-0',
    step: 1,
    group: 'g0',
    sample: 0,
    question: 'where was the founder of the varnholt observatory born?',
    golden: ['Quendal'],
    prompt,
    response,
    reward: 1,
    tokens: { text, ids: text.map((_, i) => 100 + i), role, loss_mask: role.map((r) => (r === 'generated' ? 1 : 0)) },
  });
}

function workspace(): string {
  const dir = scratchDir('sas-toolcall-ws-');
  cpSync(join(ROOT, 'test', 'e2e', 'fixtures', 'workspace'), dir, { recursive: true });
  cpSync(join(ROOT, 'test', 'fixtures', 'toolcall', 'conversations.traj'), join(dir, 'toolcall.traj'));
  const run = join(dir, 'runs', 'toolcall-run');
  mkdirSync(join(run, 'rollouts'), { recursive: true });
  writeFileSync(
    join(run, 'run.json'),
    JSON.stringify({
      v: 1,
      id: 'toolcall-run',
      status: 'finished',
      created: '2026-11-01T00:00:00Z',
      config: { rollout: { dialect: 'toolcall' } },
      step: 1,
      total_steps: 1,
    }),
  );
  writeFileSync(join(run, 'rollouts', 'step-000001.jsonl'), `${toolCallRecord()}\n`);
  return dir;
}

describe('tool-call trajectories (code-server)', function () {
  let s: CodeServerSession;
  before(async () => {
    s = await CodeServerSession.start({ workspace: workspace() });
  });
  after(async () => {
    await s?.stop();
  });
  const data = (f: Frame, key: string) => f.evaluate((k) => document.body.dataset[k] ?? '', key);

  it('a transcript of tool-call conversations: one trajectory each in the outline, with its searches', async () => {
    await s.openFile('toolcall.traj');
    await s.runCommand('Explorer: Focus on Outline View');
    const rows = s.page.locator('.outline-pane .monaco-list-row');
    const top = await until(
      'the trajectories',
      async () => {
        const l = await s.outlineLabels();
        return l.some((x) => x.startsWith('Trajectory 3')) ? l : undefined;
      },
      30_000,
    );
    assert.deepEqual(
      top,
      [
        'Trajectory 1: who founded the varnholt observatory?',
        'Trajectory 2: in which town was the founder of the varnholt observatory born, and what river runs through it?',
        'Trajectory 3: what river runs through quendal?',
      ],
      'three conversations, not one per tool reply',
    );
    await rows.nth(1).click();
    await s.page.keyboard.press('ArrowRight');
    const labels = await until('its turns', async () => {
      const l = await s.outlineLabels();
      return l.some((x) => x.startsWith('Turn 3')) ? l : undefined;
    });
    assert.ok(
      labels.includes('Turn 1: 2 searches “varnholt observatory founder birthplace”, “quendal river”'),
      JSON.stringify(labels),
    );
    assert.ok(labels.includes('Turn 2: invalid action'), JSON.stringify(labels));
    assert.ok(labels.includes('Turn 3: answer “Quendal”'), JSON.stringify(labels));
  });

  it('hovers a tool call with its query and the documents of its response; an invalid call is a problem', async () => {
    await s.openFile('toolcall.traj');
    await s.hoverEditorText('varnholt observatory founder"');
    const hover = await until('the hover', async () => {
      const all = await s.page
        .locator('.monaco-hover')
        .evaluateAll((els) => els.map((e) => (e.textContent ?? '').replace(/\u00a0/g, ' ')));
      return all.find((t) => t.includes('Turn 1'));
    });
    assert.match(hover, /search \(tool call\): “varnholt observatory founder”/);
    assert.match(hover, /Doc 1 · "Varnholt Observatory"/);
    assert.match(hover, /<tool_call>/, 'the decoy call in the document is shown literally, as document text');
    await s.runCommand('Problems: Focus on Problems View');
    const problems = await until('the tool-call problems', async () => {
      const t = await s.page.locator('.markers-panel').first().textContent();
      return t?.includes('unknown tool "lookup"') && t.includes('not valid JSON') ? t : undefined;
    });
    assert.match(problems, /search-trajectory/);
  });

  it('a tool-call rollout: its dialect in the inspector; the replay shows a search card per call and document cards per response', async () => {
    await s.waitForLog('extension', /activated/, 60_000);
    const insp = await s.openRunInInspector('toolcall-run');
    await until(
      'the row analysed',
      async () =>
        (await data(insp, 'total')) === '1' && (await insp.locator('.rows .row[data-index="0"]').count()) === 1,
      30_000,
    );
    const cells = insp.locator('.rows .row[data-index="0"]');
    assert.equal(await cells.locator('.cell.dialect').textContent(), 'toolcall');
    assert.equal(await cells.locator('.cell.searches').textContent(), '2');
    assert.equal(await cells.locator('.cell.leaks').textContent(), '0');
    await cells.dblclick();
    const r = await s.webviewFrame('replay', 30_000);
    await until(
      'the replay',
      async () =>
        (await r.locator('[data-testid="header"] h2').textContent()) === 'tc-0' && (await data(r, 'level')) === 'token',
      15_000,
    );
    assert.deepEqual(await r.locator('.entry.kind-search .query').allTextContents(), [
      'varnholt observatory founder',
      'ilse marrow birthplace',
    ]);
    assert.deepEqual(await r.locator('.entry.kind-search .tool').allTextContents(), [
      'tool call · search',
      'tool call · search',
    ]);
    assert.deepEqual(await r.locator('.entry.kind-information .doc-title').allTextContents(), [
      'Doc 1 · Varnholt Observatory',
      'Doc 1 · Ilse Marrow',
    ]);
    // Stepping onto a tool response: its tag is the chat template's (the record's token roles say the environment
    // wrote it as `prompt`: a template entry, not trained on, docs/rewards.md "Who wrote what"), its text is
    // retrieved, not trained on.
    await r.locator('body').press('Home');
    await until(
      'a tool response entry',
      async () => {
        if ((await data(r, 'entryKind')) === 'information') return true;
        await r.locator('body').press('ArrowDown');
        return undefined;
      },
      15_000,
    );
    assert.match(await data(r, 'tokenText'), /^Doc/, 'the tool response entry starts at its document');
    await until(
      'its <tool_response> tag',
      async () => {
        if ((await data(r, 'tokenText')).includes('<tool_response>')) return true;
        await r.locator('body').press('ArrowLeft');
        return undefined;
      },
      15_000,
    );
    assert.equal(await data(r, 'tokenRole'), 'prompt', 'the <tool_response> tag is the template’s');
    assert.equal(await data(r, 'entryKind'), 'template', 'the <tool_response> tag is the template’s');
    await until(
      'the response text',
      async () => {
        if ((await data(r, 'tokenRole')) === 'retrieved') return true;
        await r.locator('body').press('ArrowRight');
        return undefined;
      },
      15_000,
    );
    assert.equal(await data(r, 'entryKind'), 'information');
    assert.match((await r.locator('[data-testid="header"]').textContent()) ?? '', /mask audit: no leaks/);
    assert.doesNotMatch(s.logs().extension, /\[webview (rollouts|replay)\] (CSP blocked|uncaught|unhandled)/);
  });
});
