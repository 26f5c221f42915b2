/**
 * Training from the palette in real VS Code (code-server): start a (shortened) demo run, the status bar shows its
 * progress, the dashboard's charts receive points while it runs, Stop Training stops it (checkpointed), the Runs
 * view shows it stopped; no trainer or env server is left running. The same for a TRL run (engine "trl") written by
 * New Training Run…. A run out of GPU memory (a stand-in: no GPU here) goes on and says so. An untrusted workspace
 * starts nothing.
 */
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { scratchDir } from '../support/scratch';
import { CodeServerSession, ROOT, until } from './harness';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * A workspace with a shortened demo config (tiny model, a short warm start, slow steps so a test can watch), changed
 * by `edit` when given.
 */
function workspace(edit?: (demo: Record<string, any>) => void): string {
  const dir = scratchDir('sas-train-ws-');
  const demo = JSON.parse(readFileSync(join(ROOT, 'examples/demo.run.json'), 'utf8'));
  demo.data = {
    ...demo.data,
    train: join(ROOT, 'examples/demo/train.jsonl'),
    eval: join(ROOT, 'examples/demo/eval.jsonl'),
    eval_size: 8,
  };
  demo.model.tiny = {
    layers: 1,
    d_model: 32,
    heads: 2,
    max_len: 1024,
    vocab: [join(ROOT, 'examples/demo/corpus.jsonl')],
  };
  demo.rollout = { ...demo.rollout, batch_size: 2, n: 2 };
  demo.optim = { ...demo.optim, mini_batch_size: 4, micro_batch_size: 4 };
  demo.train = { steps: 200, eval_every: 2, checkpoint_every: 0, supervised_warmup: { steps: 5, batch_size: 4 } };
  demo.test = { step_delay_s: 0.5 };
  edit?.(demo);
  writeFileSync(join(dir, 'demo.run.json'), JSON.stringify(demo, null, 2));
  return dir;
}

const python = join(ROOT, '.venv', 'bin', 'python');

describe('training from the palette (code-server)', function () {
  let s: CodeServerSession;
  // A session for each attempt: a retry (.mocharc.json) in the session the failed attempt left — its run, the copy,
  // the dashboard in front — failed for that, not for what it tests (c1b2f65, stop 58). The failed attempt's session
  // stays live until the next attempt starts, so the root hook saves its screenshot and logs.
  beforeEach(async function () {
    assert.ok(existsSync(python), `the project's .venv is needed (${python}); run scripts/setup.sh`);
    await s?.stop();
    s = await CodeServerSession.start({ workspace: workspace(), settings: { 'searchAgent.pythonPath': python } });
  });
  after(async () => {
    await s?.stop();
  });

  it('starts the demo run, shows progress and live charts, stops it, and the Runs view shows it stopped', async () => {
    await s.openFile('demo.run.json');
    await s.runCommand('Search Agent: Start Training');
    const status = s.page.locator('.statusbar-item', { hasText: /demo-\d{8}-\d{6}/ });
    const text = await until(
      'the status bar to show a step',
      async () => {
        const t = (await status.first().textContent({ timeout: 1000 }))?.trim();
        return t && /: \d+\/200 · reward/.test(t) ? t : undefined;
      },
      120_000,
    );
    assert.match(
      text,
      /demo-\d{8}-\d{6}: \d+\/200 · reward (\d\.\d{3}|–) \(last step\)/,
      'the status bar says whose reward it is',
    );
    const runDir = join(s.workspace, 'runs', text.match(/demo-\d{8}-\d{6}/)![0]);
    const pid = JSON.parse(readFileSync(join(runDir, 'run.json'), 'utf8')).pid as number;
    assert.ok(alive(pid), 'the trainer runs');

    // Clicking the status bar item opens the dashboard; its charts fill while the run writes.
    await status.first().click();
    const dash = await s.webviewFrame('dashboard', 30_000);
    const points = async () => Number(await dash.evaluate(() => document.body.dataset.points ?? '0'));
    const first = await until(
      'points in the charts',
      async () => ((await points()) > 0 ? points() : undefined),
      60_000,
    );
    await until('more points as the run writes (live update)', async () => (await points()) > first + 5, 60_000);
    await until(
      'eight steps on the charts',
      async () => Number(await dash.evaluate(() => document.body.dataset.steps ?? '0')) >= 8,
      90_000,
    );
    const charts = await dash.evaluate(() =>
      [...document.querySelectorAll('.chart:not([hidden]) h3')].map((e) => e.textContent),
    );
    for (const title of [
      'Reward and exact match',
      'Searches per trajectory',
      'Response length (tokens)',
      'Valid-action ratio and format (is_valid_sequence)',
      'Groups with zero reward variance',
      'Entropy',
      'Gradient norm',
      'Tokens per second',
    ])
      assert.ok(charts.includes(title), `chart "${title}" shows (${charts.join(', ')})`);
    assert.equal(await dash.evaluate(() => document.querySelectorAll('canvas').length > 0), true);
    // The legend shows values under the cursor (hover).
    const over = dash.locator('.chart[data-chart="reward"] .u-over');
    const box = await over.boundingBox();
    assert.ok(box);
    await s.page.mouse.move(box.x + box.width * 0.9, box.y + box.height / 2);
    await until(
      'a hovered value in the legend',
      async () => {
        const v = await dash.evaluate(() =>
          [...document.querySelectorAll('.chart[data-chart="reward"] .u-legend .u-value')].map((e) => e.textContent),
        );
        return v.some((x) => x && /^\d/.test(x));
      },
      10_000,
    );
    // (The dashboard's screenshot, docs/images/dashboard.png, is taken on a finished run in firsthour.e2e.ts.)

    // Theme change: the charts are rebuilt with the new theme's colours.
    const themeBefore = await dash.evaluate(() => document.body.dataset.theme);
    await s.setColorTheme('Light Modern');
    await until(
      'the dashboard to follow the theme',
      async () => (await dash.evaluate(() => document.body.dataset.theme)) !== themeBefore,
      15_000,
    );
    assert.ok((await points()) > 0, 'data survives the rebuild');
    await s.setColorTheme('Dark Modern');

    // The trainer's channel has a line per step (the trainer's own log has none: its steps are events).
    await until(
      'per-step lines in the trainer channel',
      async () =>
        (s.channelLog('Search Agent: Trainer').match(/step \d+\/200 · reward \d\.\d{3} · EM \d\.\d{3} .*· \d+\.\d s$/gm)
          ?.length ?? 0) >= 2,
      30_000,
    );
    await s.runCommand('Search Agent: Stop Training');
    // "stopping…" at once, while the trainer finishes its step and checkpoints.
    await until(
      'the status bar to say stopping…',
      async () => /: stopping… at step \d+\/200/.test((await status.first().textContent({ timeout: 1000 })) ?? ''),
      5_000,
    );
    await s.waitForNotification(/stopped at step \d+ \(checkpointed\)/, 90_000);
    assert.match(
      s.channelLog('Search Agent: Trainer'),
      /stopping demo-\d{8}-\d{6}: the trainer finishes step \d+, then checkpoints and stops/,
    );
    const run = JSON.parse(readFileSync(join(runDir, 'run.json'), 'utf8'));
    assert.equal(run.status, 'stopped');
    assert.ok(
      readdirSync(join(runDir, 'checkpoints')).some((d) => d === `step-${String(run.step).padStart(6, '0')}`),
      'a checkpoint where it stopped',
    );
    await until('the trainer process to be gone', async () => !alive(pid), 15_000);
    // The dashboard's header follows: stopped, not "running · step 9/200".
    const runId = text.match(/demo-\d{8}-\d{6}/)![0];
    await until(
      'the dashboard header to say stopped',
      async () =>
        /^ stopped · step \d+\/200$/.test(
          (await dash.locator(`.run[data-run="${runId}"] [data-testid="run-status"]`).textContent({ timeout: 1000 })) ??
            '',
        ),
      15_000,
    );

    await s.runCommand('Search Agent: Focus on Runs View');
    const row = s.page.locator('.monaco-list-row', { hasText: /demo-\d{8}-\d{6}/ });
    await until(
      'the Runs view to show the run stopped',
      async () => /stopped · step \d+\/200/.test((await row.first().textContent({ timeout: 1000 })) ?? ''),
      30_000,
    );

    // Overlay: a second run (a copy of this one, as if trained again) joins the charts in its own colour.
    const copy = join(s.workspace, 'runs', 'demo-copy');
    cpSync(runDir, copy, { recursive: true });
    const rj = JSON.parse(readFileSync(join(copy, 'run.json'), 'utf8'));
    writeFileSync(join(copy, 'run.json'), JSON.stringify({ ...rj, id: 'demo-copy', created: '2000-01-01T00:00:00Z' }));
    const dash2 = await s.webviewFrame('dashboard', 30_000);
    await dash2.locator('[data-testid="add-run"]').click();
    const pick = s.page.locator('.quick-input-list .monaco-list-row', { hasText: 'demo-copy' });
    await pick.first().waitFor({ timeout: 15_000 });
    await pick.first().click();
    await until(
      'two runs in the dashboard',
      async () => (await dash2.evaluate(() => document.body.dataset.runs)) === '2',
      15_000,
    );
    assert.equal(await dash2.locator('.run').count(), 2);

    // Clicking a point opens that step's rollouts.
    const over2 = dash2.locator('.chart[data-chart="length"] .u-over');
    await over2.scrollIntoViewIfNeeded(); // the charts above it (by hops, with its legend) can push it below the fold
    const b2 = await over2.boundingBox();
    assert.ok(b2);
    // The run recorded the token store (train.record.format "store", the default): the inspector opens on the step's
    // directory (a tab "Rollouts: step-NNNNNN"; a JSONL step would open its step-NNNNNN.jsonl), showing that step's rows.
    // Clicked again if no tab came, as in basics.e2e.ts: under load a click can land while the chart redraws (stop
    // 58's CI rehearsal: no tab in 15 s, and the retry, in the same session, failed elsewhere).
    const tab = s.page.locator('.tabs-container .tab', { hasText: /step-0000\d\d/ });
    await until(
      'the step’s rollouts opened by a click on a point',
      async () => {
        await s.page.mouse.click(b2.x + b2.width * 0.5, b2.y + b2.height / 2);
        return tab
          .first()
          .waitFor({ timeout: 15_000 })
          .then(() => true)
          .catch(() => false);
      },
      60_000,
    );
    const step = Number(/step-(\d{6})/.exec((await tab.first().textContent()) ?? '')![1]);
    const insp = await s.webviewFrame('rollouts', 30_000);
    await until(
      'the step’s rows',
      async () =>
        Number(await insp.evaluate(() => document.body.dataset.total ?? '0')) > 0 &&
        (await insp.locator('.rows .row[data-index]').count()) > 0,
      30_000,
    );
    assert.deepEqual(
      [...new Set(await insp.locator('.rows .row[data-index] .cell.step').allTextContents())],
      [String(step)],
    );
  });
});

describe('a run out of GPU memory (code-server)', function () {
  let s: CodeServerSession;
  before(async function () {
    // the stand-in for a GPU's memory limit (no GPU here): the policy's forward refuses a batch of more than two
    // sequences from the first RL step on, as CUDA's allocator would (test.device_memory_rows); no warm start
    s = await CodeServerSession.start({
      workspace: workspace((demo) => {
        delete demo.train.supervised_warmup;
        demo.train.eval_every = 0;
        demo.test = { step_delay_s: 0.5, device_memory_rows: 2 };
      }),
      settings: { 'searchAgent.pythonPath': python },
    });
  });
  after(async () => {
    await s?.stop();
  });

  it('goes on with a smaller size and says so in a notification', async () => {
    await s.openFile('demo.run.json');
    await s.runCommand('Search Agent: Start Training');
    await s.waitForNotification(
      /ran out of GPU memory and goes on with (rollout\.max_batch_tokens \d+|micro-batches of \d+) \(slower\)/,
      120_000,
    );
    await s.runCommand('Search Agent: Stop Training');
    await s.waitForNotification(/stopped at step \d+ \(checkpointed\)/, 120_000);
  });
});

describe('a TRL run from New Training Run… (code-server)', function () {
  let s: CodeServerSession;
  before(async function () {
    assert.ok(existsSync(python), `the project's .venv is needed (${python}); run scripts/setup.sh`);
    s = await CodeServerSession.start({
      workspace: scratchDir('sas-trl-ws-'),
      settings: { 'searchAgent.pythonPath': python },
    });
  });
  after(async () => {
    await s?.stop();
  });

  it('asks for the engine, writes the trl-tiny config, starts it, charts it, stops it; the Runs view shows it stopped', async function () {
    this.timeout(900_000);
    // An empty workspace: the palette lists the extension's commands once the extension host has scanned it.
    await until(
      'the extension’s commands in the palette',
      async () =>
        (await s.paletteEntries('Search Agent: New Training Run')).includes('Search Agent: New Training Run…'),
      60_000,
    );
    await s.runCommand('Search Agent: New Training Run…');
    await s.pickQuickItem('TRL (Hugging Face)');
    await s.pickQuickItem('Tiny random Qwen2-style model');
    await s.pickQuickItem('The demo task');
    await s.pickQuickItem('BM25 over the demo corpus');
    await s.answerInputBox(); // the name: trl-tiny
    const file = join(s.workspace, 'trl-tiny.run.json');
    await until(
      'the config written and opened',
      async () =>
        existsSync(file) &&
        (await s.page.locator('.tabs-container .tab[data-resource-name="trl-tiny.run.json"]').count()) > 0,
      30_000,
    );
    const config = JSON.parse(readFileSync(file, 'utf8'));
    assert.deepEqual([config.engine, config.model.random_init, config.algorithm.name], ['trl', true, 'grpo']);
    // The model ships with the extension under a stable built-in name (no path into the versioned extension folder);
    // the host and the trainer resolve it, which the run below needs.
    assert.equal(config.model.path, 'builtin:trl-tiny/model');
    // Longer and slower than the example, so the test can watch it run and stop it.
    writeFileSync(
      file,
      JSON.stringify(
        { ...config, train: { steps: 200, eval_every: 0, checkpoint_every: 0 }, test: { step_delay_s: 1 } },
        null,
        2,
      ),
    );

    await s.runCommand('Search Agent: Start Training');
    const status = s.page.locator('.statusbar-item', { hasText: /trl-tiny-\d{8}-\d{6}/ });
    const text = await until(
      'the status bar to show a step',
      async () => {
        const t = (await status.first().textContent({ timeout: 1000 }))?.trim();
        return t && /: [1-9]\d*\/200 · reward/.test(t) ? t : undefined;
      },
      400_000,
    );
    const runDir = join(s.workspace, 'runs', text.match(/trl-tiny-\d{8}-\d{6}/)![0]);
    assert.equal(JSON.parse(readFileSync(join(runDir, 'run.json'), 'utf8')).engine, 'trl');

    await status.first().click();
    const dash = await s.webviewFrame('dashboard', 30_000);
    const steps = async () => Number(await dash.evaluate(() => document.body.dataset.steps ?? '0'));
    await until('two steps on the charts', async () => (await steps()) >= 2, 300_000);
    const charts = await dash.evaluate(() =>
      [...document.querySelectorAll('.chart:not([hidden]) h3')].map((e) => e.textContent),
    );
    for (const title of [
      'Reward and exact match',
      'Searches per trajectory',
      'Response length (tokens)',
      'Entropy',
      'Gradient norm',
    ])
      assert.ok(charts.includes(title), `chart "${title}" shows (${charts.join(', ')})`);

    await s.runCommand('Search Agent: Stop Training');
    await s.waitForNotification(/stopped at step \d+ \(checkpointed\)/, 120_000);
    const run = JSON.parse(readFileSync(join(runDir, 'run.json'), 'utf8'));
    assert.deepEqual([run.status, run.engine], ['stopped', 'trl']);
    assert.ok(
      existsSync(join(runDir, 'checkpoints', `step-${String(run.step).padStart(6, '0')}`, 'trainer_state.json')),
      'TRL checkpointed where it stopped',
    );
    await until('the trainer process to be gone', async () => !alive(run.pid), 30_000);

    await s.runCommand('Search Agent: Focus on Runs View');
    const row = s.page.locator('.monaco-list-row', { hasText: /trl-tiny-\d{8}-\d{6}/ });
    await until(
      'the Runs view to show the run stopped',
      async () => /stopped · step \d+\/200/.test((await row.first().textContent({ timeout: 1000 })) ?? ''),
      30_000,
    );
  });
});

/** The parent pid of a process, from /proc/<pid>/stat (the field after the command name in parentheses). */
function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** Processes under `pid` (from /proc), with their command lines. */
function descendants(pid: number): { pid: number; cmd: string }[] {
  const parent = new Map<number, number>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      parent.set(Number(d), parentOf(Number(d)));
    } catch {
      /* gone */
    }
  }
  const out: { pid: number; cmd: string }[] = [];
  const walk = (p: number) => {
    for (const [c, pp] of parent) {
      if (pp !== p) continue;
      let cmd = '';
      try {
        cmd = readFileSync(`/proc/${c}/cmdline`, 'utf8').replace(/\0/g, ' ');
      } catch {
        /* gone */
      }
      out.push({ pid: c, cmd });
      walk(c);
    }
  };
  walk(pid);
  return out;
}

describe('a run across a window reload and an extension host crash (code-server)', function () {
  let s: CodeServerSession;
  before(async function () {
    assert.ok(existsSync(python), `the project's .venv is needed (${python}); run scripts/setup.sh`);
    // The Python in the workspace's settings as well as the user's: in CI, and in one of two full local runs, the
    // window after the reload read no searchAgent.pythonPath from the user settings (code-server; alone, the test
    // never lost it) and Resume found no Python. The extension logs the setting's scopes at every search.
    const ws = workspace();
    mkdirSync(join(ws, '.vscode'));
    writeFileSync(join(ws, '.vscode', 'settings.json'), JSON.stringify({ 'searchAgent.pythonPath': python }, null, 2));
    s = await CodeServerSession.start({ workspace: ws, settings: { 'searchAgent.pythonPath': python } });
  });
  after(async () => {
    await s?.stop();
  });

  const status = () => s.page.locator('.statusbar-item', { hasText: /demo-\d{8}-\d{6}/ });
  const stepShown = (min: number, timeoutMs = 120_000) =>
    until(
      `the status bar to show step ≥ ${min}`,
      async () => {
        const t = (
          await status()
            .first()
            .textContent({ timeout: 1000 })
            .catch(() => undefined)
        )?.trim();
        const m = t && /(demo-\d{8}-\d{6}): (\d+)\/200/.exec(t);
        return m && Number(m[2]) >= min ? { id: m[1]!, step: Number(m[2]) } : undefined;
      },
      timeoutMs,
    );

  it('a reload stops the trainer (checkpointed, host-gone) and the new window offers Resume, which continues it', async () => {
    await s.openFile('demo.run.json');
    await s.runCommand('Search Agent: Start Training');
    const { id } = await stepShown(2);
    const runDir = join(s.workspace, 'runs', id);
    const pid = JSON.parse(readFileSync(join(runDir, 'run.json'), 'utf8')).pid as number;
    const exthost = parentOf(pid);
    const ours = descendants(exthost).filter((p) => /search_agent_trainer|dist\/server\.js/.test(p.cmd));
    assert.ok(
      ours.some((p) => p.pid === pid) && ours.length >= 2,
      `the trainer and the env server run under the extension host: ${JSON.stringify(ours)}`,
    );

    await s.reloadWindow();
    await until('the old trainer and env server to be gone', async () => ours.every((p) => !alive(p.pid)), 90_000);
    const run = JSON.parse(readFileSync(join(runDir, 'run.json'), 'utf8'));
    assert.equal(run.status, 'stopped');
    assert.equal(run.stop_reason, 'host-gone', "a reload is not a user's Stop");
    assert.ok(
      readdirSync(join(runDir, 'checkpoints')).includes(`step-${String(run.step).padStart(6, '0')}`),
      'checkpointed where it stopped',
    );

    // The new window offers to resume it (once); Resume continues from the checkpoint in this window.
    await s.waitForNotification(
      new RegExp(`run ${id} stopped when its window went away \\(checkpointed\\) at step ${run.step}`),
      60_000,
    );
    // Whether the new window saw it still running (re-attached, status shown) or already stopped, it offers once.
    await s.waitForLog('extension', new RegExp(`offering to resume ${id} \\(stopped, host-gone`), 10_000);
    const toast = s.page.locator('.notifications-toasts .notification-list-item', { hasText: id });
    const resume = toast.locator('.monaco-button', { hasText: 'Resume' }).first();
    await resume.click();
    // The click launches the resumed trainer (our log names its env server and pid: a second launch of this run),
    // which then steps on. CI lost this once without a trace: a click that started nothing is reported with what the
    // window showed, and clicked again while the toast is still there.
    const launched = new RegExp(`run ${id}: env server .* trainer pid`);
    const launches = () =>
      s
        .logs()
        .extension.split('\n')
        .filter((l) => launched.test(l)).length;
    try {
      await until('the resumed trainer to start', async () => launches() >= 2, 30_000);
    } catch (e) {
      console.log(`      the click on Resume started no trainer in 30 s; the window:\n${await s.digest()}`);
      if (!(await resume.isVisible())) throw e;
      await resume.click();
      await until('the resumed trainer to start after a second click', async () => launches() >= 2, 60_000);
    }
    await stepShown(run.step + 1);
    const resumed = JSON.parse(readFileSync(join(runDir, 'run.json'), 'utf8'));
    assert.equal(resumed.status, 'running');
    assert.notEqual(resumed.pid, pid, 'a new trainer process');
  });

  it('a crash of the extension host leaves no orphan: the trainer checkpoints and stops, the env server closes', async () => {
    // The run resumed by the test above; if that one failed, a run of its own (a failure there is not one here).
    let shown = await stepShown(1, 10_000).catch(() => undefined);
    if (!shown) {
      await s.openFile('demo.run.json');
      await s.runCommand('Search Agent: Start Training');
      shown = await stepShown(1);
    }
    const { id } = shown;
    const runDir = join(s.workspace, 'runs', id);
    const pid = JSON.parse(readFileSync(join(runDir, 'run.json'), 'utf8')).pid as number;
    const exthost = parentOf(pid);
    const ours = descendants(exthost).filter((p) => /search_agent_trainer|dist\/server\.js/.test(p.cmd));
    assert.ok(ours.length >= 2, `the trainer and the env server: ${JSON.stringify(ours)}`);
    process.kill(exthost, 'SIGKILL'); // no deactivate: only the watchdogs can stop them
    await until('the trainer and env server to notice and exit', async () => ours.every((p) => !alive(p.pid)), 90_000);
    const run = JSON.parse(readFileSync(join(runDir, 'run.json'), 'utf8'));
    assert.equal(run.status, 'stopped');
    assert.equal(run.stop_reason, 'host-gone');
    assert.ok(readdirSync(join(runDir, 'checkpoints')).includes(`step-${String(run.step).padStart(6, '0')}`));
  });
});

describe('training in restricted mode (code-server)', function () {
  let s: CodeServerSession;
  before(async () => {
    s = await CodeServerSession.start({
      trusted: false,
      workspace: workspace(),
      settings: { 'searchAgent.pythonPath': python },
    });
  });
  after(async () => {
    await s?.stop();
  });

  it('Start Training and Start Retriever spawn nothing and say why', async () => {
    await s.waitForLog('extension', /activated .*workspace untrusted/, 60_000);
    await s.runCommand('Search Agent: Start Training');
    await s.waitForNotification(/Start Training is disabled in an untrusted workspace/);
    await s.runCommand('Search Agent: Start Retriever');
    await s.waitForNotification(/Start Retriever is disabled in an untrusted workspace/);
    assert.equal(existsSync(join(s.workspace, 'runs')), false, 'no run directory was made');
  });
});
