/**
 * A user's first hour, in real VS Code (code-server) on a real (short) training run made by the CLI: the walkthrough;
 * a run in its warm start (status bar, the Search Agent item, the dashboard) and its header after it stops; the Runs
 * view's inline "Open Training Dashboard" opening that run; the dashboard's series in distinct colours with markers on
 * the sparse held-out EM and the nearest value on hover; the inspector's split column, fitted and resizable columns;
 * the Reward Lab's "Score against…" picker; reward-module types in a workspace outside the repository; *.run.json
 * validation without $schema; and, with no usable Python, the error offering "Set Up Trainer Environment", which then
 * makes a venv (real Python and pip, a FAKE torch from a fake requirements file) and selects it, and the Doctor report.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import type { Frame } from 'playwright-core';
import { fakeTorchWheel } from '../support/fakeTorch';
import { scratchDir } from '../support/scratch';
import { boxOf, CodeServerSession, ROOT, until } from './harness';

const python = join(ROOT, '.venv', 'bin', 'python');
const shots = process.env.SAS_SCREENSHOTS_DIR ?? join(ROOT, '.e2e-artifacts', 'screenshots');

/** A short real run (the tiny policy; its data named builtin:demo/…), trained by the CLI into <ws>/runs. */
async function trainRun(ws: string): Promise<string> {
  const config = {
    name: 'tiny',
    seed: 3,
    data: {
      train: 'builtin:demo/train',
      eval: 'builtin:demo/eval',
      eval_size: 4,
      prompt_template: 'Question: {question}\n',
    },
    model: { kind: 'tiny', tiny: { layers: 1, d_model: 48, heads: 2, max_len: 512 } },
    retriever: { kind: 'demo', topk: 2 },
    reward: { module: 'builtin:em' },
    // A response cap the policy reaches now and then: the audit's length-capped alarm, in the dashboard's alarm lane.
    rollout: { batch_size: 2, n: 4, max_turns: 2, max_turn_tokens: 12, max_response_length: 120, max_obs_length: 96 },
    algorithm: { name: 'grpo', kl_coef: 0.001 },
    optim: { lr: 1e-3, mini_batch_size: 8, micro_batch_size: 8 },
    // A short warm start on the format, so the run searches and its charts move.
    train: {
      steps: 24,
      eval_every: 8,
      checkpoint_every: 0,
      supervised_warmup: { steps: 60, batch_size: 8, lr: 0.003 },
    },
  };
  writeFileSync(join(ws, 'tiny.run.json'), JSON.stringify(config, null, 2));
  const r = await execa(
    process.execPath,
    [join(ROOT, 'dist', 'cli.js'), 'train', 'tiny.run.json', '--python', python, '--quiet'],
    { cwd: ws, reject: false, timeout: 600_000 },
  );
  assert.equal(r.exitCode, 0, `${r.stdout}\n${r.stderr}`);
  return readdirSync(join(ws, 'runs')).find((d) => /^tiny-\d{8}-\d{6}$/.test(d))!;
}

describe("a user's first hour (code-server)", function () {
  let s: CodeServerSession;
  let runId: string;
  let sleeper: ResultPromise | undefined;
  let wheels: string;

  before(async function () {
    this.timeout(900_000);
    assert.ok(
      readdirSync(join(ROOT, '.venv', 'bin')).includes('python'),
      "the project's .venv is needed; run scripts/setup.sh",
    );
    const ws = scratchDir('sas-first-hour-');
    cpSync(join(ROOT, 'test', 'e2e', 'fixtures', 'workspace'), ws, { recursive: true });
    runId = await trainRun(ws);
    // The same run again, newer (so "the newest run" is not the one the Runs view's inline action names).
    const newer = join(ws, 'runs', 'tiny-newer');
    cpSync(join(ws, 'runs', runId), newer, { recursive: true });
    const rj = JSON.parse(readFileSync(join(newer, 'run.json'), 'utf8'));
    writeFileSync(
      join(newer, 'run.json'),
      JSON.stringify({ ...rj, id: 'tiny-newer', created: '2099-01-01T00:00:00Z' }),
    );
    // A run in its supervised warm start, as the trainer writes it (run.json running with a live pid, progress events).
    sleeper = execa('sleep', ['900'], { reject: false });
    const warming = join(ws, 'runs', 'warming');
    mkdirSync(join(warming, 'rollouts'), { recursive: true });
    writeFileSync(
      join(warming, 'run.json'),
      JSON.stringify({
        v: 1,
        id: 'warming',
        status: 'running',
        created: '2000-01-01T00:00:00Z',
        config: {},
        step: 0,
        total_steps: 120,
        pid: sleeper.pid,
      }),
    );
    const ev = (e: Record<string, unknown>) => JSON.stringify({ time: '2026-01-01T00:00:00Z', ...e });
    writeFileSync(
      join(warming, 'events.jsonl'),
      `${[ev({ event: 'started', total: 120 }), ev({ event: 'progress', step: 0, total: 120, phase: 'warmup', warmup_step: 125, warmup_steps: 300, loss: 2.9 }), ev({ event: 'progress', step: 0, total: 120, phase: 'warmup', warmup_step: 150, warmup_steps: 300, loss: 2.314 })].join('\n')}\n`,
    );
    // Things the Reward Lab must not offer: a dataset and a corpus.
    mkdirSync(join(ws, 'data'));
    writeFileSync(
      join(ws, 'data', 'questions.jsonl'),
      `${JSON.stringify({ id: 'q1', question: 'who?', golden: ['x'] })}\n`,
    );
    writeFileSync(join(ws, 'data', 'corpus.jsonl'), `${JSON.stringify({ id: 'd1', contents: 'T\ntext' })}\n`);
    // A shipped reward module copied in, one with a mistake, and a run config with a bogus key (no $schema).
    cpSync(join(ROOT, 'examples', 'rewards', 'em-format.reward.ts'), join(ws, 'rewards', 'em-format.reward.ts'));
    writeFileSync(
      join(ws, 'rewards', 'mistake.reward.ts'),
      "import { defineReward } from 'search-agent-studio/reward';\n\nexport default defineReward({\n  name: 'mistake',\n  score(traj) {\n    return traj.searches > 1 ? 1 : 0;\n  },\n});\n",
    );
    writeFileSync(
      join(ws, 'bogus.run.json'),
      `${JSON.stringify({ name: 'bogus', data: { train: 'builtin:demo/train' }, model: { kind: 'tiny' }, bogus_key: 1 }, null, 2)}\n`,
    );
    // The Set Up command's downloads, replaced by a FAKE torch wheel and a fake requirements file (named as such).
    wheels = scratchDir('sas-fake-wheels-');
    await fakeTorchWheel(wheels, '2.3.0');
    writeFileSync(
      join(wheels, 'fake-requirements.txt'),
      '# FAKE requirements for the e2e test (the real file is trainer/requirements.txt)\ntorch==2.3.0\n',
    );
    mkdirSync(shots, { recursive: true });
    s = await CodeServerSession.start({
      workspace: ws,
      // No usable Python: the named one does not exist, and python3 on PATH has no torch. The alarm lane marks the steps
      // where three quarters of the rollouts or more hit the length cap (a per-alarm threshold: the screenshot shows the lane).
      settings: {
        'searchAgent.pythonPath': '/nonexistent/python3',
        'searchAgent.dashboard.alarmThresholds': { '*': 0, 'search-repeat': 0.25, 'length-capped': 0.75 },
      },
      env: {
        SAS_TRAINER_REQUIREMENTS: join(wheels, 'fake-requirements.txt'),
        SAS_TRAINER_PIP_ARGS: JSON.stringify(['--no-index', '--find-links', wheels]),
      },
    });
    await s.waitForLog('extension', /activated/, 60_000);
  });
  after(async () => {
    sleeper?.kill();
    await s?.stop();
  });

  const data = (f: Frame, key: string) => f.evaluate((k) => document.body.dataset[k] ?? '', key);
  const problems = async () => {
    await s.runCommand('Problems: Focus on Problems View');
    return (await s.page.locator('.markers-panel').first().textContent()) ?? '';
  };

  it('Get Started opens the walkthrough: its steps, each with its picture', async () => {
    await s.runCommand('Search Agent: Get Started');
    const page = s.page.locator('.gettingStartedContainer');
    await page.locator('text=Get Started with Search Agent Studio').first().waitFor({ timeout: 30_000 });
    for (const step of [
      "Set up the trainer's Python",
      'Open the demo',
      'Train it',
      'Inspect a rollout',
      'Replay it',
      'Edit the reward',
    ]) {
      await page.locator('.getting-started-step', { hasText: step }).first().waitFor({ timeout: 10_000 });
    }
    await page.locator('.getting-started-step', { hasText: 'Train it' }).first().click();
    await until(
      "the step's picture",
      async () =>
        page
          .locator('.getting-started-media img[srcset*="dashboard.png"]')
          .first()
          .evaluate((img) => (img as HTMLImageElement).complete && (img as HTMLImageElement).naturalWidth > 0),
      15_000,
    );
    // The side bar hidden for the picture (Ctrl+B toggles it).
    await s.page.keyboard.press('Control+B');
    await s.page.waitForTimeout(800);
    await s.page.screenshot({ path: join(shots, 'walkthrough.png') });
    await s.page.keyboard.press('Control+B');
    // "Edit the reward": readable text — the module's code and what the Lab shows — and the Lab's panel as a picture of
    // its own (the whole window scaled into the walkthrough's column was too small to read).
    await page.locator('.getting-started-step', { hasText: 'Edit the reward' }).first().click();
    const media = await until(
      'the step’s page',
      async () => {
        for (const f of s.page.frames()) {
          const found = await f
            .evaluate(() => {
              // biome-ignore lint/performance/useDomNodeTextContent: innerText is the text as rendered, what the user reads
              const text = document.body?.innerText ?? '';
              return text.includes('Score against rollouts') &&
                document.querySelector('img[src*="walkthrough-reward.png"]')
                ? true
                : undefined;
            })
            .catch(() => undefined);
          if (found) return f;
        }
        return undefined;
      },
      20_000,
    );
    // biome-ignore lint/performance/useDomNodeTextContent: innerText is the text as rendered, what the user reads
    assert.match(await media.evaluate(() => document.body.innerText), /defineReward\(\{/);
    const img = await until(
      'its picture, at its own size',
      async () =>
        media.evaluate(() => {
          const i = document.querySelector<HTMLImageElement>('img[src*="walkthrough-reward.png"]')!;
          return i.complete && i.naturalWidth > 0
            ? { natural: i.naturalWidth, shown: i.getBoundingClientRect().width }
            : undefined;
        }),
      15_000,
    );
    // (The whole window, 1400 px, was shown at about 0.3 of its size; the Lab's panel is shown at 0.7 or more.)
    assert.ok(img.shown >= 0.7 * img.natural, `shown ${img.shown}px of ${img.natural}px: readable`);
  });

  it('a run in its warm start: the status bar and the Search Agent item say so, the dashboard shows its step and loss', async () => {
    const item = s.page.locator('.statusbar-item', { hasText: /warming: warm-up 150\/300 · loss 2\.314/ });
    await item.first().waitFor({ timeout: 30_000 });
    // The Search Agent item (its tooltip is its accessible label) says a run is training, not "no training run".
    const label = await s.page
      .locator('[id="search-agent-studio.search-agent-studio.searchAgent.status"]')
      .getAttribute('aria-label');
    assert.match(label ?? '', /Search Agent Studio: training warming — warm-up 150\/300 · loss 2\.314/);
    await s.runCommand('Search Agent: Open Training Dashboard');
    const dash = await s.webviewFrame('dashboard');
    await until(
      'the warm-up in the header',
      async () =>
        (
          (await dash.locator('.run[data-run="warming"] [data-testid="run-status"]').textContent({ timeout: 1000 })) ??
          ''
        ).trim() === 'running · warm-up 150/300 · loss 2.314',
      15_000,
    );
    assert.match(
      (await dash.locator('[data-testid="empty"]').textContent()) ?? '',
      /Warm start .*: step 150 of 300, loss 2\.314\./,
    );
    // It stops (here: its process ends and run.json says so): the header follows without a new metrics line.
    sleeper?.kill();
    const rj = join(s.workspace, 'runs', 'warming', 'run.json');
    writeFileSync(
      rj,
      JSON.stringify({ ...JSON.parse(readFileSync(rj, 'utf8')), status: 'stopped', stop_reason: 'signal' }),
    );
    await until(
      'the header to say stopped',
      async () =>
        (
          (await dash.locator('.run[data-run="warming"] [data-testid="run-status"]').textContent({ timeout: 1000 })) ??
          ''
        ).trim() === 'stopped · step 0/120',
      20_000,
    );
    // …and the status bar lets it go; the Search Agent item says no run trains.
    await until('the status bar to drop the stopped run', async () => (await item.count()) === 0, 20_000);
    assert.match(
      (await s.page
        .locator('[id="search-agent-studio.search-agent-studio.searchAgent.status"]')
        .getAttribute('aria-label')) ?? '',
      /no training run/,
    );
  });

  it("the Runs view's inline Open Training Dashboard opens that run (not the newest); several series in distinct colours, markers on held-out EM, the nearest value on hover", async () => {
    await s.runCommand('Search Agent: Focus on Runs View');
    const row = s.page.locator('.monaco-list-row', { hasText: runId });
    await row.first().waitFor({ timeout: 30_000 });
    assert.match(
      (await row.first().textContent()) ?? '',
      /finished · step 24\/24 · held-out EM \d\.\d{3} · reward \d\.\d{3} \(mean of last 10 steps\)/,
    );
    // A refresh of the whole tree makes VS Code forget every row until it has the children again, and a click on an
    // inline action then reaches the command without its row (it opens the newest run). The view refreshes only the rows
    // that changed (the previous test's run just stopped), and the whole tree only when runs come or go: click again then.
    let dash!: Awaited<ReturnType<typeof s.webviewFrame>>;
    for (let attempt = 1; ; attempt++) {
      await row.first().hover();
      await row.first().locator('.action-label[aria-label="Open Training Dashboard"]').click();
      dash = await s.webviewFrame('dashboard');
      try {
        await until(
          `the dashboard on ${runId}`,
          async () =>
            JSON.stringify(
              await dash.evaluate(() =>
                [...document.querySelectorAll('.run')].map((e) => (e as HTMLElement).dataset.run),
              ),
            ) === JSON.stringify([runId]),
          7_500,
        );
        break;
      } catch (e) {
        if (attempt >= 3) throw e;
      }
    }
    await until('points', async () => Number(await data(dash, 'points')) > 50, 15_000);
    // The legend: one entry per series, each with its own colour.
    const reward = await dash.evaluate(() => {
      const legend = [
        ...document.querySelectorAll(
          '.chart[data-chart="reward"] .u-legend .u-series:not(.raw-series):not(.alarm-series)',
        ),
      ].slice(1);
      return legend.map((e) => ({
        label: e.querySelector('.u-label')?.textContent,
        marker: getComputedStyle(e.querySelector('.u-marker')!).borderColor,
      }));
    });
    assert.deepEqual(
      reward.map((r) => r.label),
      ['reward', 'EM (train)', 'EM (held-out)'],
    );
    assert.equal(new Set(reward.map((r) => r.marker)).size, 3, `distinct colours: ${JSON.stringify(reward)}`);
    const kl = await dash.evaluate(() =>
      [...document.querySelectorAll('.chart[data-chart="kl"] .u-legend .u-series:not(.raw-series):not(.alarm-series)')]
        .slice(1)
        .map((e) => getComputedStyle(e.querySelector('.u-marker')!).borderColor),
    );
    assert.equal(new Set(kl).size, kl.length, `KL series in distinct colours: ${JSON.stringify(kl)}`);
    // Held-out EM and searches by hops (the demo questions' meta.hops; 4 held-out questions: 1- and 2-hop), and for the
    // two-hop ones whether a later search named the bridge entity (meta.bridge).
    const hops = await dash.evaluate(() => {
      const c = document.querySelector<HTMLElement>('.chart[data-chart="hops"]')!;
      return {
        hidden: c.hidden,
        labels: [...c.querySelectorAll('.u-legend .u-series:not(.raw-series):not(.alarm-series)')]
          .slice(1)
          .map((e) => e.querySelector('.u-label')?.textContent),
      };
    });
    assert.deepEqual(hops, {
      hidden: false,
      labels: [
        'EM 1-hop',
        'searches 1-hop',
        'answer retrieved 1-hop',
        'EM 2-hop',
        'searches 2-hop',
        'bridge entity searched 2-hop',
        'answer retrieved 2-hop',
      ],
    });
    // By question kind (the demo questions' meta.kind): one series per kind the run's metrics name, each its own colour.
    const metricsFile = readFileSync(join(s.workspace, 'runs', runId, 'metrics.jsonl'), 'utf8');
    const runKinds = [...new Set([...metricsFile.matchAll(/"val\/em_by_kind\/([^"]+)"/g)].map((m) => m[1]!))].sort();
    assert.ok(runKinds.length >= 2, `the run's held-out questions are of several kinds: ${runKinds.join(', ')}`);
    for (const chart of ['kinds-em', 'kinds-retrieved']) {
      const kinds = await dash.evaluate((key) => {
        const c = document.querySelector<HTMLElement>(`.chart[data-chart="${key}"]`);
        return (
          c && {
            hidden: c.hidden,
            series: [...c.querySelectorAll('.u-legend .u-series:not(.raw-series):not(.alarm-series)')]
              .slice(1)
              .map((e) => ({
                label: e.querySelector('.u-label')?.textContent,
                marker: getComputedStyle(e.querySelector('.u-marker')!).borderColor,
              })),
          }
        );
      }, chart);
      assert.deepEqual(
        { hidden: kinds?.hidden, labels: kinds?.series.map((k) => k.label) },
        { hidden: false, labels: runKinds },
        chart,
      );
      assert.equal(
        new Set(kinds!.series.map((k) => k.marker)).size,
        runKinds.length,
        `${chart}: distinct colours ${JSON.stringify(kinds!.series)}`,
      );
    }
    const markers = await dash.evaluate(() => document.body.dataset.markers ?? '');
    assert.match(markers, /reward: EM \(held-out\)/, 'held-out EM (every 8 steps) is drawn with markers');
    assert.doesNotMatch(markers, /reward: reward\b/, 'the per-step reward is a line');
    // Between two evaluations, the legend shows the nearest recorded held-out EM and its step (not "–").
    const over = dash.locator('.chart[data-chart="reward"] .u-over');
    const box = await boxOf(over);
    await s.page.mouse.move(box.x + box.width * 0.45, box.y + box.height / 2);
    await until(
      'the nearest held-out EM in the legend',
      async () => {
        const v = await dash.evaluate(
          () =>
            [
              ...document.querySelectorAll(
                '.chart[data-chart="reward"] .u-legend .u-series:not(.raw-series):not(.alarm-series)',
              ),
            ]
              .find((e) => e.querySelector('.u-label')?.textContent === 'EM (held-out)')
              ?.querySelector('.u-value')?.textContent,
        );
        return /^\d\.\d{3} \(step (8|16)\)$/.test(v ?? '');
      },
      10_000,
    );
    // The alarm lane: above the plots, ticks only where the length cap took three quarters of the rollouts or more (the setting).
    const lane = await until(
      'the alarm lane',
      async () => {
        const t = await dash
          .locator('.chart[data-chart="reward"] .lane-tick')
          .evaluateAll((els) => els.map((e) => e.getAttribute('title') ?? ''));
        return t.length ? t : undefined;
      },
      15_000,
    );
    for (const t of lane) {
      assert.match(t, /^step \d+: /);
      for (const m of t.matchAll(/length-capped \d+ of \d+ rollouts \((\d+)%\)( — under)?/g))
        assert.ok(m[2] || Number(m[1]) >= 75, `marked only at three quarters or more: ${t}`);
    }
    await s.page.screenshot({ path: join(shots, 'dashboard.png') });
  });

  it('the inspector on the run: a split column to filter on, columns fitted to their headers, resizable', async () => {
    await s.runCommand('Search Agent: Focus on Runs View');
    const row = s.page.locator('.monaco-list-row', { hasText: runId });
    await row.first().hover();
    await row.first().locator('.action-label[aria-label="Open Rollout Inspector"]').click();
    const insp = await s.webviewFrame('rollouts', 30_000);
    await until(
      'all rows',
      async () => (await data(insp, 'total')) === '208' && (await data(insp, 'view')) === '208',
      30_000,
    );
    const truncated = await insp.evaluate(() =>
      [...document.querySelectorAll('.row.head .cell')]
        .filter((c) => c.scrollWidth > c.clientWidth + 1)
        .map((c) => (c as HTMLElement).dataset.column),
    );
    assert.deepEqual(truncated, [], 'no header is cut');
    const widths = () =>
      insp.evaluate(() => JSON.parse(document.body.dataset.columnWidths ?? '{}') as Record<string, number>);
    const before = await widths();
    const handle = insp.locator('.row.head [data-resize="reward"]');
    const hb = await boxOf(handle);
    await s.page.mouse.move(hb.x + hb.width / 2, hb.y + hb.height / 2);
    await s.page.mouse.down();
    await s.page.mouse.move(hb.x + hb.width / 2 + 40, hb.y + hb.height / 2, { steps: 4 });
    await s.page.mouse.move(hb.x + hb.width / 2 + 80, hb.y + hb.height / 2, { steps: 4 });
    await s.page.mouse.up();
    const after = await widths();
    assert.ok(Math.abs(after.reward! - before.reward! - 80) <= 2, `reward ${before.reward} → ${after.reward}`);
    assert.equal(after.answer, before.answer, 'the other columns keep their widths');
    const input = insp.locator('[data-testid="filter"]');
    await input.fill('split == "val"');
    await input.press('Enter');
    // The count is set before the rows are drawn: wait for the rows themselves (a loaded machine drew none yet).
    await until(
      'the held-out rows',
      async () =>
        (await data(insp, 'view')) === '16' &&
        (await data(insp, 'busy')) === 'false' &&
        (await insp.locator('.rows .row[data-index]').count()) > 0,
      15_000,
    );
    assert.deepEqual([...new Set(await insp.locator('.rows .row[data-index] .cell.split').allTextContents())], ['val']);
    await input.fill('split == "val" && group.size > 1');
    await input.press('Enter');
    await until(
      'no held-out row in a training group',
      async () => (await data(insp, 'view')) === '0' && (await data(insp, 'busy')) === 'false',
      15_000,
    );
  });

  it("the Reward Lab's Score against… offers the run and its rollout files, not metrics, events, datasets or corpora", async () => {
    await s.openFile('em-format.reward.ts');
    await s.runCommand('Search Agent: Choose Rollouts for Reward Module…');
    await s.page.locator('.quick-input-list .monaco-list-row').first().waitFor({ timeout: 15_000 });
    await s.page.waitForTimeout(300);
    const labels = await s.page
      .locator('.quick-input-list .monaco-list-row .label-name')
      .evaluateAll((els) => els.map((e) => (e.textContent ?? '').trim()));
    await s.page.keyboard.press('Escape');
    assert.ok(labels.includes(`runs/${runId}`), labels.join('\n'));
    // the run recorded its rollouts in the token store (train.record.format "store", the default): a step is its directory
    assert.ok(labels.includes(`runs/${runId}/rollouts/step-000001`), labels.join('\n'));
    assert.ok(labels.includes(`runs/${runId}/rollouts/val-step-000000`), labels.join('\n'));
    assert.deepEqual(
      labels.filter((l) => /metrics\.jsonl|events\.jsonl|questions\.jsonl|corpus\.jsonl/.test(l)),
      [],
    );
  });

  it('reward modules get the API types in a workspace outside the repository; *.run.json is validated without $schema', async () => {
    await s.openFile('em-format.reward.ts');
    await s.openFile('mistake.reward.ts');
    await s.openFile('bogus.run.json');
    await until(
      'the diagnostics',
      async () => {
        const text = await problems();
        return (
          /Operator '>' cannot be applied to types 'string\[\]' and 'number'/.test(text) &&
          /Property bogus_key is not allowed/.test(text)
        );
      },
      120_000,
    );
    const text = await problems();
    assert.doesNotMatch(text, /Cannot find module 'search-agent-studio\/reward'/);
    assert.doesNotMatch(text, /em-format\.reward\.ts/, 'the shipped example has no problem');
  });

  it('with no usable Python, Start Training offers Set Up Trainer Environment, which makes a venv, selects it, and the Doctor reports it', async function () {
    this.timeout(300_000);
    await s.runCommand('Search Agent: Open Demo');
    await s.page.locator('.tabs-container .tab[data-resource-name="demo.run.json"]').waitFor({ timeout: 15_000 });
    await s.runCommand('Search Agent: Start Training');
    const toast = s.page.locator('.notifications-toasts .notification-list-item', {
      hasText: 'No usable Python for the trainer',
    });
    await toast.first().waitFor({ timeout: 60_000 });
    assert.match((await toast.first().textContent()) ?? '', /\/nonexistent\/python3: not found/);
    await toast.first().locator('.monaco-button', { hasText: 'Set Up Trainer Environment' }).click();
    const pick = (label: string) => s.page.locator('.quick-input-list .monaco-list-row', { hasText: label }).first();
    await pick('In this workspace (.venv)').waitFor({ timeout: 15_000 });
    await pick('In this workspace (.venv)').click();
    await pick('CPU-only torch').waitFor({ timeout: 15_000 });
    await pick('CPU-only torch').click();
    await s.waitForNotification(
      /trainer environment ready — Python 3\.\d+\.\d+, torch 2\.3\.0 \(CPU\); selected .*\.venv\/bin\/python/,
      180_000,
    );
    const settings = JSON.parse(readFileSync(join(s.workspace, '.vscode', 'settings.json'), 'utf8'));
    assert.equal(settings['searchAgent.pythonPath'], join(s.workspace, '.venv', 'bin', 'python'));
    await s.runCommand('Search Agent: Check Trainer Environment (Doctor)');
    await s.page
      .locator('.tabs-container .tab', { hasText: 'Trainer Environment.md' })
      .first()
      .waitFor({ timeout: 60_000 });
    await until(
      'the report',
      async () => {
        const text = await s.page.locator('.editor-instance .view-lines').first().textContent();
        return /✓ .*\.venv\/bin\/python: Python 3\.\d+\.\d+, torch 2\.3\.0, CPU only/.test(
          (text ?? '').replace(/\u00a0/g, ' '),
        );
      },
      30_000,
    );
  });
});
