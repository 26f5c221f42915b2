/**
 * Counterfactual replay in real VS Code (code-server, docs/fork.md): a tiny run trained by the test (2 steps, the real
 * trainer) with one scripted held-out rollout whose first turn searched (test/e2e/fork_fixture.py); the rollout is
 * opened from the inspector in the replay panel, forked at turn 2 with a document the user wrote, and the continuation
 * shows beside the recorded one — the reward, answer and divergence the CLI twin (`fork --json`, the same policy
 * server code) computes for the same fork, the written document as `retrieved` tokens with mask 0. The policy server
 * (its pid read from the extension's log) is gone after the panel closes, and after a window reload.
 */
import assert from 'node:assert/strict';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import type { Frame } from 'playwright-core';
import { type EnvServerProcess, isAlive, startEnvServerProcess } from '../../src/core/host/processes';
import { RunHost } from '../../src/core/host/runHost';
import { scratchDir } from '../support/scratch';
import { CodeServerSession, ROOT, until } from './harness';

const python = join(ROOT, '.venv', 'bin', 'python');
const launcher = {
  node: process.execPath,
  args: ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/server/main.ts')],
};
const DOCUMENT = 'Ossel\nOssel is a novel written by Ilse Marrow in 1931.';
const fmt = (v: number | null | undefined) =>
  v === null || v === undefined ? '–' : Number.isInteger(v) ? String(v) : v.toFixed(3);

describe('counterfactual replay: Fork here in the replay panel (code-server)', function () {
  this.timeout(600_000);
  let s: CodeServerSession;
  let env: EnvServerProcess;
  let runDir: string;
  let id: string;
  let expected: { response: string; answer: string | null; reward: number | null; diverges_at: number | null };

  before(async () => {
    const ws = scratchDir('sas-fork-ws-');
    cpSync(join(ROOT, 'test', 'e2e', 'fixtures', 'workspace'), ws, { recursive: true });
    const host = await RunHost.start({
      python,
      config: join(ROOT, 'test/fixtures/runs/tiny.run.json'),
      runDir: join(ws, 'runs', 'fork-tiny'),
      serverLauncher: launcher,
    });
    const outcome = await host.done;
    assert.equal(outcome.status, 'finished', outcome.error?.message);
    runDir = outcome.runDir;
    env = await startEnvServerProcess(
      ['--port', '0', '--topk', '2', '--corpus', join(ROOT, 'examples/demo/corpus.jsonl'), '--reward', 'builtin:em'],
      { launcher },
    );
    const trainer = join(ROOT, 'trainer');
    const fixture = await execa(python, [join(ROOT, 'test/e2e/fork_fixture.py'), runDir, '2', env.url], {
      env: { PYTHONPATH: trainer },
      reject: false,
    });
    assert.equal(fixture.exitCode, 0, fixture.stderr);
    id = fixture.stdout.trim();
    // The CLI twin of the fork the test makes in the panel (greedy: the same continuation).
    const docs = join(ws, 'documents.json');
    writeFileSync(docs, JSON.stringify([DOCUMENT]));
    const cli = await execa(
      process.execPath,
      [
        '-r',
        join(ROOT, 'test/register.cjs'),
        join(ROOT, 'src/cli/main.ts'),
        'fork',
        runDir,
        id,
        '--turn',
        '2',
        '--documents',
        docs,
        '--json',
        '--env-url',
        env.url,
        '--python',
        python,
      ],
      { reject: false },
    );
    assert.equal(cli.exitCode, 0, cli.stderr);
    expected = JSON.parse(cli.stdout).continuations[0];
    assert.notEqual(expected.diverges_at, null, 'the edited document changes the continuation');
    s = await CodeServerSession.start({ workspace: ws, settings: { 'searchAgent.pythonPath': python } });
  });
  after(async () => {
    await s?.stop();
    await env?.child.stop(3_000);
  });

  const data = (f: Frame, key: string) => f.evaluate((k) => document.body.dataset[k] ?? '', key);
  /** The policy server pids the extension logged for its forks, in order. */
  const loggedPids = () =>
    [...s.logs().extension.matchAll(/fork: .* \(policy server pids (\d+)\)/g)].map((m) => Number(m[1]));

  async function openReplay(): Promise<Frame> {
    // A fresh inspector each time: one left open from an earlier test is re-rendered when the replay that hid it
    // closes, and a frame found before that re-render is detached under the test (CI, stop 25).
    await s.runCommand('View: Close All Editors');
    await until(
      'no webview left',
      async () => !(await s.hasWebview('rollouts')) && !(await s.hasWebview('replay')),
      15_000,
    );
    const insp = await s.openRunInInspector('fork-tiny');
    await until(
      'the rows analysed',
      async () => Number(await data(insp, 'total')) > 0 && (await data(insp, 'busy')) === 'false',
      30_000,
    );
    const filter = insp.locator('[data-testid="filter"]');
    await filter.fill('group ~ /:99$/');
    await filter.press('Enter');
    await until(
      'the scripted rollout alone',
      async () => (await data(insp, 'view')) === '1' && (await insp.locator('.rows .row[data-index]').count()) === 1,
      15_000,
    );
    await insp.locator('.rows .row[data-index]').first().dblclick();
    const r = await s.webviewFrame('replay', 30_000);
    await until(
      'the replay of the scripted rollout',
      async () => (await r.locator('[data-testid="header"] h2').textContent()) === id,
      15_000,
    );
    await until(
      'the fork form',
      async () => (await r.locator('[data-testid="fork-turn"] option').count()) >= 2,
      30_000,
    );
    return r;
  }

  it('forks at turn 2 with a written document: the continuation beside the recorded one, the document as retrieved tokens', async () => {
    await s.waitForLog('extension', /activated/, 60_000);
    const r = await openReplay();
    await r.locator('[data-testid="fork-turn"]').selectOption('2');
    await r.locator('[data-testid="fork-edit"]').selectOption('documents');
    await r.locator('[data-testid="fork-documents"]').fill(DOCUMENT);
    await r.locator('[data-testid="fork-run"]').click();
    const cont = r.locator('[data-testid="fork-continuation"]');
    await until('the continuation', async () => (await cont.count()) === 1, 300_000).catch(async (e) => {
      throw new Error(
        `${(e as Error).message}; status: ${await r.locator('[data-testid="fork-status"]').textContent()}`,
      );
    });
    assert.equal(await r.locator('[data-testid="fork-recorded"]').count(), 1, 'the recorded rollout beside it');
    assert.match(
      (await cont.locator('.col-head').textContent()) ?? '',
      new RegExp(
        `reward ${fmt(expected.reward)} · answer ${(expected.answer ?? '∅').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`,
      ),
    );
    assert.equal(
      await cont.locator('[data-testid="fork-where"]').textContent(),
      `diverges at token #${expected.diverges_at}`,
    );
    const retrieved = await cont
      .locator('.chip[data-role="retrieved"]')
      .evaluateAll((els) => els.map((e) => ({ text: e.textContent ?? '', mask: e.getAttribute('data-mask') })));
    assert.ok(
      retrieved.every((t) => t.mask === '0'),
      'retrieved tokens are masked out of the loss',
    );
    const text = retrieved.map((t) => t.text).join('');
    for (const line of DOCUMENT.split('\n'))
      assert.ok(
        text.includes(line),
        `the written document's ${JSON.stringify(line)} is among the retrieved tokens: ${JSON.stringify(text.slice(0, 400))}`,
      );
    assert.match(
      (await r.locator('[data-testid="fork-recorded"] [data-testid="fork-where"]').textContent()) ?? '',
      new RegExp(`tokens from #${expected.diverges_at}$`),
    );
  });

  it('the policy server is gone after the panel closes, and after a window reload (by process id)', async () => {
    const [pid] = loggedPids();
    assert.ok(pid && isAlive(pid), `the policy server runs (${pid})`);
    const tab = s.page.locator('.tabs-container .tab', { hasText: 'Replay' }).first();
    await tab.hover();
    await tab.locator('.tab-actions .action-label').first().click();
    await until('the policy server gone after the panel closed', async () => !isAlive(pid), 30_000);
    await s.waitForLog('extension', new RegExp(`fork: policy servers stopped \\(pids ${pid}\\)`), 10_000);

    const r = await openReplay();
    await r.locator('[data-testid="fork-run"]').click(); // turn 1, nothing edited
    await until(
      'a second fork',
      async () => (await r.locator('[data-testid="fork-continuation"]').count()) === 1,
      300_000,
    );
    const second = loggedPids()[1];
    assert.ok(second && second !== pid && isAlive(second), `a new policy server runs (${second})`);
    await s.reloadWindow();
    await until('the policy server gone after the window reloaded', async () => !isAlive(second), 30_000);
  });
});
