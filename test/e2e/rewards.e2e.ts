/**
 * The reward editor in real VS Code: the CodeLens, the Reward Lab's numbers, re-scoring on save, the same rollouts
 * before and after an edit on a growing file, a looping reward counted as it times out and cancelled, failure marks
 * leaving edited lines, trust.
 */
import assert from 'node:assert/strict';
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { boxOf, CodeServerSession, ROOT, until } from './harness';
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
    await until(
      'the first run to finish',
      async () => ((await lab.evaluate(() => document.body.dataset.status)) === 'done' ? true : undefined),
      60_000,
    );
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
        const line = Number.isFinite(parseFloat(cs.lineHeight))
          ? parseFloat(cs.lineHeight)
          : 1.4 * parseFloat(cs.fontSize);
        return {
          text: th.textContent,
          cut: th.scrollWidth > th.clientWidth + 1,
          tall: th.getBoundingClientRect().height > 1.8 * line + 6,
        };
      }),
    );
    // Numbers (a reward such as 0.430) stay on one line too (issue 44.8: "0.43/3" wrapped).
    const numbers = await lab
      .locator('[data-testid="changed"] td.num, [data-testid="by-source"] td.num, .card .value')
      .evaluateAll((els) =>
        els.map((el) => {
          const cs = getComputedStyle(el);
          const line = Number.isFinite(parseFloat(cs.lineHeight))
            ? parseFloat(cs.lineHeight)
            : 1.4 * parseFloat(cs.fontSize);
          // The text's own height (a cell is as tall as its row, which a long path beside it may wrap).
          const range = document.createRange();
          range.selectNodeContents(el);
          return { text: el.textContent, tall: range.getBoundingClientRect().height > 1.8 * line + 6 };
        }),
      );
    await lab.evaluate(() => (document.body.style.width = ''));
    assert.deepEqual(
      heads.filter((h) => h.cut || h.tall),
      [],
      JSON.stringify(heads),
    );
    assert.ok(numbers.length >= 8, JSON.stringify(numbers));
    assert.deepEqual(
      numbers.filter((n) => n.tall),
      [],
      JSON.stringify(numbers),
    );
    // Chromium's benign "ResizeObserver loop" error event is logged as information, not as an uncaught error.
    await lab.evaluate(() =>
      window.dispatchEvent(
        new ErrorEvent('error', { message: 'ResizeObserver loop completed with undelivered notifications.' }),
      ),
    );
    await s.waitForLog('extension', /\[webview reward-lab\] benign: ResizeObserver loop/, 15_000);
    assert.doesNotMatch(s.logs().extension, /\[error\] \[webview reward-lab\] .*ResizeObserver/);
    // The lens shows the result inline.
    await until(
      'the result lens',
      async () =>
        (await s.page
          .locator('.contentWidgets .codelens-decoration', { hasText: 'agrees with recorded 83.3%' })
          .count()) > 0,
    );
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
    await until(
      'a new run to finish',
      async () => {
        const [run, status] = await labAfter.evaluate(() => [
          Number(document.body.dataset.run),
          document.body.dataset.status,
        ]);
        return run > runBefore && status === 'done' ? true : undefined;
      },
      60_000,
    );
    assert.equal(await labAfter.textContent('[data-testid="mean"]').then((t) => t?.trim()), '0.250');
    assert.match((await labAfter.textContent('.cards')) ?? '', /before the edit 0\.500/);
    assert.equal(
      await labAfter.textContent('[data-testid="zero-variance"]').then((t) => t?.trim()),
      '100.0%',
      'a constant reward gives GRPO no signal',
    );
    // The walkthrough's "Edit the reward" picture: the Lab's panel alone, its top (readable at the walkthrough's width).
    const out = process.env.SAS_SCREENSHOTS_DIR ?? join(ROOT, '.e2e-artifacts', 'screenshots');
    mkdirSync(out, { recursive: true });
    const group = s.page.locator('.editor-group-container', { has: s.page.locator('.tab', { hasText: 'Reward Lab' }) });
    const box = await boxOf(group.first());
    await s.page.screenshot({
      path: join(out, 'walkthrough-reward.png'),
      clip: { x: box.x, y: box.y, width: Math.min(box.width, 620), height: Math.min(box.height, 560) },
    });
  });

  /** Replaces line `line` of em.reward.ts (its indentation kept) with `text`, and saves. */
  async function editLine(line: number, text: string): Promise<void> {
    // Back to the first editor group: the Lab beside it may hold the keyboard (after a click on Cancel), and Quick Open
    // would then open the module in the Lab's group.
    await s.page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
    await s.page.locator('.editor-group-container').first().locator('.monaco-editor .view-lines').first().click();
    await s.openFile('em.reward.ts');
    await s.page.keyboard.press('Control+G');
    await s.page.keyboard.type(String(line));
    await s.page.keyboard.press('Enter');
    await s.page.keyboard.press('End');
    await s.page.keyboard.press('Shift+Home');
    // As one input (no auto-closed brackets, no suggestion accepted by a typed character).
    await s.page.keyboard.insertText(text);
    await s.page.keyboard.press('Escape');
    await s.page.keyboard.press('Control+S');
    await s.page.keyboard.press('Control+Home');
  }
  const runOf = (lab: Awaited<ReturnType<CodeServerSession['webviewFrame']>>) =>
    lab.evaluate(() => [Number(document.body.dataset.run), document.body.dataset.status] as const);
  async function nextRun(after: number, status = 'done', timeout = 90_000) {
    return until(
      `run ${after + 1} to be ${status}`,
      async () => {
        const lab = await s.webviewFrame('reward-lab');
        const [run, st] = await runOf(lab);
        return run > after && st === status ? lab : undefined;
      },
      timeout,
    );
  }

  it('compares the same rollouts before and after an edit while the rollout file grows (a live run)', async () => {
    // 120 rollouts, chosen in the Lab; then 40 more arrive, as on a live run.
    const live = join(s.workspace, 'rollouts', 'live-rollouts.jsonl');
    const rec = (i: number) =>
      `${JSON.stringify({ v: 1, id: `l${i}`, step: 1, group: i >> 1, sample: i & 1, data_source: 'live', question: `q${i}?`, golden: ['Paris'], prompt: 'p', response: '<think>t</think>\n<answer> Paris </answer>', reward: 1, meta: { i } })}\n`;
    writeFileSync(live, Array.from({ length: 120 }, (_, i) => rec(i)).join(''));
    let lab = await s.webviewFrame('reward-lab');
    const [before] = await runOf(lab);
    await lab.locator('vscode-button', { hasText: 'Choose rollouts…' }).click();
    await s.pickQuickItem('live-rollouts.jsonl');
    lab = await nextRun(before);
    assert.equal(await lab.textContent('[data-testid="mean"]').then((t) => t?.trim()), '0.250');
    assert.match((await lab.textContent('[data-testid="target"]')) ?? '', /the same 120 rollouts each time/);
    appendFileSync(live, Array.from({ length: 40 }, (_, i) => rec(120 + i)).join(''));
    const [second] = await runOf(lab);
    await editLine(7, 'return 0.5;');
    lab = await nextRun(second);
    const cards = (await lab.textContent('.cards')) ?? '';
    assert.match(cards, /120 of 120 rollouts scored/, 'the 40 new rollouts are not in the comparison');
    assert.match(cards, /before the edit 0\.250/);
    assert.equal(await lab.textContent('[data-testid="mean"]').then((t) => t?.trim()), '0.500');
  });

  it('a reward that loops: the Lab counts timeouts as they happen, dims the last numbers, and Cancel kills the scoring process', async () => {
    let lab = await s.webviewFrame('reward-lab');
    const [before] = await runOf(lab);
    // Loops on three rollouts of four (no long streak of timeouts stops the run by itself): minutes of work.
    await editLine(7, 'if (example.golden.length && (example.meta?.i as number) % 4) for (;;) {} return 1;');
    lab = await nextRun(before, 'running', 60_000);
    const timeouts = await until(
      'timeouts counted while scoring',
      async () => {
        const l = await s.webviewFrame('reward-lab');
        const n = Number(await l.getAttribute('[data-testid="live-failures"]', 'data-timeouts'));
        return n >= 2 ? n : undefined;
      },
      60_000,
    );
    assert.ok(timeouts >= 2);
    lab = await s.webviewFrame('reward-lab');
    assert.match((await lab.textContent('[data-testid="status"]')) ?? '', /Scoring… \d+ \/ 120 · \d+ timeouts/);
    const dim = await lab
      .locator('[data-testid="report"]')
      .evaluate((el) => [el.getAttribute('data-stale'), Number(getComputedStyle(el).opacity)] as const);
    assert.deepEqual([dim[0], dim[1] < 1], ['true', true], 'the last run’s numbers are dimmed while re-scoring');
    const out = process.env.SAS_SCREENSHOTS_DIR ?? join(ROOT, '.e2e-artifacts', 'screenshots');
    mkdirSync(out, { recursive: true });
    await s.page.screenshot({ path: join(out, 'reward-lab.png') });
    await lab.locator('[data-testid="cancel"]').click();
    lab = await until(
      'the run to be cancelled',
      async () => {
        const l = await s.webviewFrame('reward-lab');
        return (await l.evaluate(() => document.body.dataset.status)) === 'cancelled' ? l : undefined;
      },
      30_000,
    );
    assert.match(
      (await lab.textContent('[data-testid="status"]')) ?? '',
      /Cancelled after \d+ of 120 rollouts \(\d+ timeouts?\)/,
    );
    const pid = Number(
      /cancelled scoring .*em\.reward\.ts \(process (\d+) killed\)/.exec(
        await s.waitForLog('extension', /cancelled scoring .* \(process \d+ killed\)/),
      )![1],
    );
    await until(
      `the scoring process ${pid} to be gone`,
      async () => {
        try {
          process.kill(pid, 0);
          return undefined;
        } catch {
          return true;
        }
      },
      15_000,
    );
  });

  it('a failure mark leaves a line as soon as the line is edited', async () => {
    let lab = await s.webviewFrame('reward-lab');
    const [before] = await runOf(lab);
    await editLine(7, "throw new Error('boom');");
    lab = await nextRun(before);
    assert.equal(await lab.textContent('[data-testid="errors"]').then((t) => t?.trim()), '120');
    const marks = () =>
      s.page.evaluate(() =>
        [...document.querySelectorAll('.editor-instance .monaco-editor .view-line span')]
          .map((el) => getComputedStyle(el, '::after').content)
          .filter((c) => c.includes('✗')),
      );
    const shown = await until(
      'the failure mark on line 7',
      async () => ((await marks()).length ? await marks() : undefined),
      30_000,
    );
    assert.match(shown[0]!, /✗ 120 rollouts: Error: boom/);
    // Edit the line (not saved): its mark goes at once.
    await s.page.keyboard.press('Control+G');
    await s.page.keyboard.type('7');
    await s.page.keyboard.press('Enter');
    await s.page.keyboard.press('End');
    await s.page.keyboard.insertText(' // fixing');
    await until(
      'the mark to leave the edited line',
      async () => ((await marks()).length === 0 ? true : undefined),
      15_000,
    );
    await s.page.keyboard.press('Control+Z');
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
