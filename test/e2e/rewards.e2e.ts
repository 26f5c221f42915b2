/** The reward editor in real VS Code: the CodeLens, the Reward Lab's numbers, re-scoring on save, trust. */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { CodeServerSession, ROOT, until } from './harness';
import { session } from './hooks';

describe('reward editor (code-server)', function () {
  let s: CodeServerSession;
  before(async () => {
    s = await session();
  });

  it('scores a reward module from its CodeLens and shows the numbers in the Reward Lab', async () => {
    await s.openFile('em.reward.ts');
    const lens = s.page.locator('.contentWidgets .codelens-decoration a', { hasText: 'Score against rollouts' });
    await lens.first().waitFor({ timeout: 30_000 });
    await lens.first().click();
    const row = s.page.locator('.quick-input-list .monaco-list-row', { hasText: 'demo-rollouts.jsonl' });
    await row.first().waitFor({ timeout: 15_000 });
    await row.first().click();
    const lab = await s.webviewFrame('reward-lab', 30_000);
    const text = (id: string) => lab.textContent(`[data-testid="${id}"]`).then((t) => t?.trim());
    await until('the first run to finish', async () => ((await lab.evaluate(() => document.body.dataset.status)) === 'done' ? true : undefined), 60_000);
    assert.equal(await text('mean'), '0.500');
    assert.equal(await text('agreement'), '83.3%');
    assert.equal(await text('zero-variance'), '0.0%');
    assert.equal(await text('errors'), '0');
    const changedRows = await lab.locator('[data-testid="changed"] tbody tr').count();
    assert.equal(changedRows, 1, 'one rollout’s reward changed (recorded 1, now 0)');
    assert.match((await lab.textContent('[data-testid="by-source"]')) ?? '', /demo.*nq/s);
    // The changed-rewards table's headers stay whole (no wrapping mid-word), one line high — in a narrow panel too.
    await lab.evaluate(() => (document.body.style.width = '360px'));
    const heads = await lab.locator('[data-testid="changed"] th').evaluateAll((ths) =>
      ths.map((th) => {
        const cs = getComputedStyle(th);
        const line = Number.isFinite(parseFloat(cs.lineHeight)) ? parseFloat(cs.lineHeight) : 1.4 * parseFloat(cs.fontSize);
        return { text: th.textContent, cut: th.scrollWidth > th.clientWidth + 1, tall: th.getBoundingClientRect().height > 1.8 * line + 6 };
      }),
    );
    await lab.evaluate(() => (document.body.style.width = ''));
    assert.deepEqual(heads.filter((h) => h.cut || h.tall), [], JSON.stringify(heads));
    // Chromium's benign "ResizeObserver loop" error event is logged as information, not as an uncaught error.
    await lab.evaluate(() => window.dispatchEvent(new ErrorEvent('error', { message: 'ResizeObserver loop completed with undelivered notifications.' })));
    await s.waitForLog('extension', /\[webview reward-lab\] benign: ResizeObserver loop/, 15_000);
    assert.doesNotMatch(s.logs().extension, /\[error\] \[webview reward-lab\] .*ResizeObserver/);
    // The lens shows the result inline.
    await until('the result lens', async () => (await s.page.locator('.contentWidgets .codelens-decoration', { hasText: 'agrees with recorded 83.3%' }).count()) > 0);
  });

  it('re-scores when the module is edited and saved, and the numbers change', async () => {
    const lab = await s.webviewFrame('reward-lab');
    const runBefore = Number(await lab.evaluate(() => document.body.dataset.run));
    await s.openFile('em.reward.ts');
    // Replace the score line with `return 0.25;` (line 7 of the module) and save.
    await s.page.keyboard.press('Control+G');
    await s.page.keyboard.type('7');
    await s.page.keyboard.press('Enter');
    await s.page.keyboard.press('End');
    await s.page.keyboard.press('Shift+Home');
    await s.page.keyboard.type('return 0.25;');
    await s.page.keyboard.press('Control+S');
    const labAfter = await s.webviewFrame('reward-lab');
    await until('a new run to finish', async () => {
      const [run, status] = await labAfter.evaluate(() => [Number(document.body.dataset.run), document.body.dataset.status]);
      return run > runBefore && status === 'done' ? true : undefined;
    }, 60_000);
    assert.equal(await labAfter.textContent('[data-testid="mean"]').then((t) => t?.trim()), '0.250');
    assert.match((await labAfter.textContent('.cards')) ?? '', /before the edit 0\.500/);
    assert.equal(await labAfter.textContent('[data-testid="zero-variance"]').then((t) => t?.trim()), '100.0%', 'a constant reward gives GRPO no signal');
    const out = process.env.SAS_SCREENSHOTS_DIR ?? join(ROOT, '.e2e-artifacts', 'screenshots');
    mkdirSync(out, { recursive: true });
    await s.page.screenshot({ path: join(out, 'reward-lab.png') });
    // The walkthrough's "Edit the reward" picture: the Lab's panel alone, its top (readable at the walkthrough's width).
    const group = s.page.locator('.editor-group-container', { has: s.page.locator('.tab', { hasText: 'Reward Lab' }) });
    const box = (await group.first().boundingBox())!;
    await s.page.screenshot({ path: join(out, 'walkthrough-reward.png'), clip: { x: box.x, y: box.y, width: Math.min(box.width, 620), height: Math.min(box.height, 560) } });
  });
});

describe('reward editor in restricted mode (code-server)', function () {
  let s: CodeServerSession;
  before(async () => {
    s = await CodeServerSession.start({ trusted: false });
  });
  after(() => s?.stop());

  it('does not run reward modules, and the lens says why', async () => {
    await s.openFile('em.reward.ts');
    const lens = s.page.locator('.contentWidgets .codelens-decoration', { hasText: 'do not run in Restricted Mode' });
    await lens.first().waitFor({ timeout: 30_000 });
    assert.equal(await s.page.locator('.contentWidgets .codelens-decoration', { hasText: 'Score against' }).count(), 0);
  });
});
