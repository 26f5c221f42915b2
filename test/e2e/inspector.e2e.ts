/**
 * The rollout inspector and the replay panel in real VS Code (code-server): a fixture run directory (two step files
 * with token arrays, a planted mask leak, malformed rows, a hostile row) opened from the Runs view; filter (and a
 * filter error shown inline), open a rollout in the replay panel, step with the keyboard and check the highlighted
 * token and the entry, toggle an overlay, find the leak with the audit, restore after hiding, compare two rows of a
 * group; the hostile row executes nothing, shows literally and keeps the layout. And a run recorded in the token store
 * (Parquet steps), whose facts the inspector builds on its facts threads (dist/inspector-facts-worker.js) beside its
 * engine's: every row, a malformed one in place, filters over them.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import type { Frame } from 'playwright-core';
import type { Rollout } from '../../src/core/run/format';
import { writeStoreStep } from '../../src/core/store/tokenStore';
import { scratchDir } from '../support/scratch';
import { CodeServerSession, ROOT, tokenPieces, until } from './harness';

type Role = 'prompt' | 'generated' | 'retrieved' | 'feedback';

/** A rollout record whose token arrays come from splitting each (text, role) piece into word-ish tokens. */
function record(
  id: string,
  step: number,
  group: string,
  sample: number,
  pieces: [string, Role][],
  extra: Record<string, unknown> = {},
  leakAt?: number,
): string {
  const { text, role } = tokenPieces(pieces);
  const loss_mask = role.map((r, i) => (r === 'generated' || i === leakAt ? 1 : 0));
  const prompt = pieces
    .filter((p) => p[1] === 'prompt')
    .map((p) => p[0])
    .join('');
  const response = pieces
    .filter((p) => p[1] !== 'prompt')
    .map((p) => p[0])
    .join('');
  return JSON.stringify({
    v: 1,
    id,
    step,
    group,
    sample,
    split: 'train',
    question: 'Who wrote Ossel?',
    golden: ['Ilse Marrow'],
    data_source: 'demo',
    prompt,
    response,
    finish: 'answer',
    turns: 2,
    searches: 1,
    tokens: {
      text,
      ids: text.map((_, i) => 100 + i),
      role,
      loss_mask,
      logprob: text.map((_, i) => -0.1 * (i % 7)),
      ref_logprob: text.map((_, i) => -0.1 * (i % 5)),
      advantage: role.map((r, i) => (r === 'generated' ? (sample ? -0.5 : 0.5) + 0.01 * i : 0)),
    },
    ...extra,
  });
}

const PROMPT: [string, Role] = [
  '<|im_start|>user\nQuestion: Who wrote Ossel?<|im_end|>\n<|im_start|>assistant\n',
  'prompt',
];
const trajectory = (answer: string): [string, Role][] => [
  PROMPT,
  ['<think> I should look this up. </think>\n<search> Ossel author </search>', 'generated'],
  [
    '\n\n<information>Doc 1(Title: Ossel) Ossel is a novel written by Ilse Marrow in 1931.\nDoc 2(Title: Marrow) Ilse Marrow was a writer.</information>\n\n',
    'retrieved',
  ],
  [`<think> The first document says it. </think>\n<answer> ${answer} </answer>`, 'generated'],
];

const HOSTILE_LONG = 'X'.repeat(30_000);
const hostile: [string, Role][] = [
  ['<|im_start|>user\nQuestion: <script>window.__pwned="prompt"</script><|im_end|>\n', 'prompt'],
  [
    '<think><img src=x onerror="window.__pwned=\'think\'"></think>\n<search><script>window.__pwned="search"</script></search>',
    'generated',
  ],
  [
    `\n\n<information>Doc 1(Title: <a href="javascript:window.__pwned='link'">click me</a>) <img src=x onerror=window.__pwned='doc'> ${HOSTILE_LONG}</information>\n\n`,
    'retrieved',
  ],
  ["<answer><img src=x onerror=window.__pwned='answer'></answer>", 'generated'],
];

function workspace(): string {
  const dir = scratchDir('sas-insp-ws-');
  cpSync(join(ROOT, 'test', 'e2e', 'fixtures', 'workspace'), dir, { recursive: true });
  const run = join(dir, 'runs', 'fixture-run');
  mkdirSync(join(run, 'rollouts'), { recursive: true });
  writeFileSync(
    join(run, 'run.json'),
    JSON.stringify({
      v: 1,
      id: 'fixture-run',
      status: 'finished',
      created: '2026-11-01T00:00:00Z',
      config: {},
      step: 2,
      total_steps: 2,
    }),
  );
  const step1 = [
    record('s1-g0-0', 1, 'g0', 0, trajectory('Ilse Marrow'), { reward: 1, reward_parts: { em: 1 } }),
    record('s1-g0-1', 1, 'g0', 1, trajectory('Ilse Marrow'), { reward: 1, reward_parts: { em: 1 } }),
    record('s1-g1-0', 1, 'g1', 0, trajectory('Ilse Marrow'), { reward: 1 }),
    record('s1-g1-1', 1, 'g1', 1, trajectory('Quendal'), { reward: 0 }),
    '{"v": 1, "id": "broken", "prompt": ',
  ];
  const step2 = [
    record('s2-leak', 2, 'g2', 0, trajectory('Ilse Marrow'), { reward: 1 }, 30),
    JSON.stringify({ v: 1, id: 's2-nofields', step: 2 }),
    JSON.stringify({
      ...JSON.parse(record('s2-mismatch', 2, 'g3', 0, trajectory('x'), { reward: 0 })),
      tokens: { text: ['a', 'b'], ids: [1], role: ['generated', 'generated'], loss_mask: [1, 1] },
    }),
    record('s2-hostile', 2, 'g4', 0, hostile, {
      reward: 0,
      question: '<img src=x onerror=window.__pwned="question">',
      golden: ['<script>window.__pwned="golden"</script>'],
    }),
    record('s2-noleak', 2, 'g2', 1, trajectory('Quendal'), { reward: 0 }),
    // Imported (no token arrays): replayed by segment, or split with a tokenizer.json.
    JSON.stringify(
      (({ tokens, ...rest }) => rest)(
        JSON.parse(record('s2-imported', 2, 'g5', 0, trajectory('Ilse Marrow'), { reward: 1 })),
      ),
    ),
  ];
  writeFileSync(join(run, 'rollouts', 'step-000001.jsonl'), `${step1.join('\n')}\n`);
  writeFileSync(join(run, 'rollouts', 'step-000002.jsonl'), `${step2.join('\n')}\n`);
  mkdirSync(join(dir, 'models', 'tiny-e5'), { recursive: true });
  cpSync(join(ROOT, 'test', 'fixtures', 'tiny-e5', 'tokenizer.json'), join(dir, 'models', 'tiny-e5', 'tokenizer.json'));
  return dir;
}

/** The inspector page's `data-*` value `key` (the webview publishes its state there for tests). */
const data = (f: Frame, key: string) => f.evaluate((k) => document.body.dataset[k] ?? '', key);

/** Types `expr` into the inspector's filter and waits until the engine has applied it (a new query, not busy). */
async function applyFilter(insp: Frame, expr: string): Promise<void> {
  const input = insp.locator('[data-testid="filter"]');
  const before = await data(insp, 'seq');
  await input.fill(expr);
  await input.press('Enter');
  await until(
    `the filter ${expr} applied`,
    async () => {
      const seq = await data(insp, 'seq');
      return seq !== before && (await data(insp, 'appliedSeq')) === seq && (await data(insp, 'busy')) === 'false';
    },
    15_000,
  );
}

describe('rollout inspector and replay panel (code-server)', function () {
  let s: CodeServerSession;
  let insp: Frame;
  const shots = process.env.SAS_SCREENSHOTS_DIR ?? join(ROOT, '.e2e-artifacts', 'screenshots');

  before(async () => {
    s = await CodeServerSession.start({ workspace: workspace() });
    mkdirSync(shots, { recursive: true });
  });
  after(async () => {
    await s?.stop();
  });

  const filter = (expr: string) => applyFilter(insp, expr);
  const replayFrame = () => s.webviewFrame('replay', 30_000);

  it('opens a run directory from the Runs view: every row, malformed ones in place with their line numbers', async () => {
    await s.waitForLog('extension', /activated/, 60_000);
    insp = await s.openRunInInspector('fixture-run');
    await until(
      'all rows analysed',
      async () => (await data(insp, 'total')) === '11' && (await data(insp, 'view')) === '11',
      30_000,
    );
    await until('rows on screen', async () => (await insp.locator('.rows .row[data-index]').count()) === 11, 15_000);
    const errors = await insp.locator('.rows .row.malformed').allTextContents();
    assert.equal(errors.length, 3);
    assert.match(errors.join('\n'), /step-000001\.jsonl:5: invalid JSON/);
    assert.match(errors.join('\n'), /step-000002\.jsonl:2: prompt: is required/);
    assert.match(errors.join('\n'), /step-000002\.jsonl:3: tokens\.ids: has 1 entries but tokens\.text has 2/);
    assert.match(
      (await insp.locator('[data-testid="status"]').textContent()) ?? '',
      /11 rows in 2 files · 3 malformed/,
    );
  });

  it('filters with the expression language (errors inline), sorts, and searches text', async () => {
    await filter('rewrd == 1');
    assert.match(
      (await insp.locator('[data-testid="filter-error"]').textContent()) ?? '',
      /unknown field rewrd; did you mean reward\?.*rewrd == 1/,
    );
    assert.equal(await insp.locator('[data-testid="filter-error"] mark').textContent(), 'rewrd');
    await filter('group.zero_variance');
    assert.equal(await data(insp, 'view'), '2', 'group g0 of step 1 (both rewarded 1)');
    await filter('reward == 0 && answer ~ golden');
    assert.equal(await data(insp, 'view'), '0');
    await filter('mask.leaks > 0');
    assert.equal(await data(insp, 'view'), '1');
    assert.equal(await insp.locator('.rows .row[data-index]').first().getAttribute('data-index'), '5');
    await filter('');
    await insp.locator('.row.head [data-column="reward"]').click();
    await insp.locator('.row.head [data-column="reward"]').click(); // descending
    await until(
      'sorted by reward, descending',
      async () =>
        (await insp.locator('.row.head [data-column="reward"]').getAttribute('aria-sort')) === 'descending' &&
        (await data(insp, 'busy')) === 'false',
      10_000,
    );
    await until(
      'rewards descending',
      async () => {
        const rewards = (await insp.locator('.rows .row[data-index] .cell.reward').allTextContents()).filter(
          (t) => t !== '',
        );
        return (
          rewards.length >= 5 && rewards.slice(0, 4).every((r) => r === '1') && rewards[rewards.length - 1] === '0'
        );
      },
      10_000,
    );
    await insp.locator('.row.head [data-column="reward"]').click(); // off
    await insp.locator('[data-testid="search"]').fill('Quendal');
    await until(
      'the text search',
      async () => (await data(insp, 'view')) === '2' && (await data(insp, 'busy')) === 'false',
      15_000,
    );
    await insp.locator('[data-testid="search"]').fill('');
    await until('no search', async () => (await data(insp, 'view')) === '11', 15_000);
    await s.page.screenshot({ path: join(shots, 'inspector.png') });
  });

  it('replays a rollout: keyboard stepping moves the highlighted token and the entry; overlays; the audit finds the planted leak', async () => {
    await filter('mask.leaks > 0');
    await insp.locator('.rows .row[data-index="5"]').dblclick();
    const r = await replayFrame();
    await until(
      'the replay of s2-leak',
      async () => (await r.locator('[data-testid="header"] h2').textContent()) === 's2-leak',
      15_000,
    );
    assert.equal(await data(r, 'level'), 'token');
    assert.equal(await data(r, 'leaks'), '1');
    // It opens at its top: the question, golden answer and reward in view.
    assert.equal(await r.evaluate(() => window.scrollY), 0);
    for (const fact of ['question', 'golden', 'reward']) {
      const dt = r.locator('dl.facts dt', { hasText: new RegExp(`^${fact}$`) });
      assert.ok(
        await dt.evaluate(
          (el) => el.getBoundingClientRect().bottom <= window.innerHeight && el.getBoundingClientRect().top >= 0,
        ),
        `${fact} is in view`,
      );
    }
    assert.match((await r.locator('[data-testid="header"]').textContent()) ?? '', /1 mask leak/);
    await r.locator('[data-testid="tokens"]').click({ position: { x: 2, y: 2 } });
    await r.locator('body').press('Home');
    assert.equal(await data(r, 'entryKind'), 'prompt');
    await r.locator('body').press('ArrowDown');
    assert.equal(await data(r, 'entryKind'), 'think');
    assert.equal(await data(r, 'tokenText'), '<think>');
    assert.equal(await r.locator('.chip.current').textContent(), '<think>');
    await r.locator('body').press('ArrowRight');
    assert.equal(await data(r, 'tokenText'), ' I');
    await r.locator('body').press('ArrowDown');
    assert.equal(await data(r, 'entryKind'), 'search');
    await r.locator('body').press('ArrowDown');
    assert.equal(await data(r, 'entryKind'), 'information');
    assert.equal(await data(r, 'tokenRole'), 'retrieved');
    assert.equal(await r.locator('.entry.current .doc').count(), 2, 'the documents as cards');
    assert.equal(
      await r.locator('[data-testid="textview"] mark').textContent(),
      await data(r, 'tokenText'),
      'the text view marks the current token',
    );
    // The audit: n jumps to the planted leak (token 30: a retrieved token with mask 1).
    await r.locator('body').press('n');
    assert.equal(await data(r, 'token'), '30');
    assert.equal(await data(r, 'tokenRole'), 'retrieved');
    assert.ok(await r.locator('.chip.current.leak').count(), 'the current chip is outlined as a leak');
    await r.locator('.chip.current').hover();
    assert.match(
      (await r.locator('[data-testid="hovercard"]').textContent()) ?? '',
      /loss mask1.*LEAK: retrieved token trained on/s,
    );
    // Overlays.
    await r.locator('[data-testid="overlay"]').selectOption('advantage');
    await until('the advantage overlay', async () => (await data(r, 'overlay')) === 'advantage', 5_000);
    assert.match((await r.locator('[data-testid="legend"]').textContent()) ?? '', /advantage:/);
    assert.ok((await r.locator('.chip.ov').count()) > 10);
    // The overlay's colour wins over the role's (the hatch of masked tokens stays).
    const bg = (sel: string) => r.evaluate((q) => getComputedStyle(document.querySelector(q)!).backgroundColor, sel);
    assert.equal(await bg('.chip.role-generated.ov-d8'), await bg('.swatch.ov-d8'));
    await r.locator('[data-testid="overlay"]').selectOption('kl');
    assert.match((await r.locator('[data-testid="legend"]').textContent()) ?? '', /KL/);
    // The prompt was never scored (this older record says 0 there): "not recorded", not a certain 0.
    assert.ok((await r.locator('.chip.role-prompt.ov-none').count()) > 0);
    await r.locator('.chip.role-prompt').first().hover();
    assert.match(
      (await r.locator('[data-testid="hovercard"]').textContent()) ?? '',
      /KL \(log π − log π_ref\)not recorded/,
    );
    assert.equal(await r.evaluate(() => window.scrollY), 0, 'stepping never scrolled the page');
    await s.page.screenshot({ path: join(shots, 'replay.png') });
  });

  it('keeps roles, the mask and leaks distinguishable in light, dark and high-contrast themes', async () => {
    let r = await replayFrame();
    await r.locator('[data-testid="overlay"]').selectOption('none');
    for (const theme of ['Light Modern', 'Dark High Contrast', 'Light High Contrast', 'Dark Modern']) {
      await s.setColorTheme(theme);
      r = await replayFrame();
      await until(
        `chips restyled for ${theme}`,
        async () => {
          const look = await r.evaluate(() => {
            const style = (sel: string) => {
              const el = document.querySelector(sel);
              if (!el) return null;
              const cs = getComputedStyle(el);
              return {
                bg: cs.backgroundColor,
                image: cs.backgroundImage,
                border: cs.borderTopColor,
                borderWidth: cs.borderTopWidth,
              };
            };
            return {
              gen: style('.chip.role-generated:not(.masked)'),
              ret: style('.chip.role-retrieved.masked:not(.leak)'),
              prompt: style('.chip.role-prompt'),
              leak: style('.chip.leak'),
            };
          });
          if (!look.gen || !look.ret || !look.prompt || !look.leak) return false;
          const transparent = (c: string) => c === 'rgba(0, 0, 0, 0)' || c === 'transparent';
          return (
            !transparent(look.gen.bg) &&
            !transparent(look.ret.bg) &&
            look.gen.bg !== look.ret.bg &&
            look.gen.bg !== look.prompt.bg &&
            look.ret.image.includes('repeating-linear-gradient') &&
            look.gen.image === 'none' &&
            look.leak.borderWidth === '2px'
          );
        },
        15_000,
      );
    }
  });

  it('restores the position after the panel is hidden (no retainContextWhenHidden)', async () => {
    let r = await replayFrame();
    await r.locator('[data-testid="overlay"]').selectOption('kl');
    const token = await data(r, 'token');
    assert.equal(token, '30');
    await new Promise((res) => setTimeout(res, 400)); // the position is reported to the host after 150 ms
    // Another editor in the replay's group hides it; showing it again re-creates the webview.
    await s.page.locator('.tabs-container .tab', { hasText: 'Replay' }).first().waitFor();
    await s.openFile('sample.traj');
    await until(
      'the replay webview to be gone',
      async () => !(await s.webviewFrame('replay', 500).catch(() => undefined)),
      10_000,
    );
    await s.page.locator('.tabs-container .tab', { hasText: 'Replay' }).first().click();
    r = await replayFrame();
    await until(
      'the restored position',
      async () => (await data(r, 'token')) === token && (await data(r, 'overlay')) === 'kl',
      15_000,
    );
  });

  it('compares two rows of a group side by side', async () => {
    await filter('group == "g1"');
    await insp.locator('.rows .row[data-index="2"]').click();
    await insp.locator('.rows .row[data-index="3"]').click({ modifiers: ['Control'] });
    await insp.locator('[data-testid="compare"]:not([disabled])').click();
    const r = await replayFrame();
    await until('two columns', async () => (await data(r, 'columns')) === '2', 15_000);
    assert.match(
      (await r.locator('[data-testid="timeline-1"] .col-head').textContent()) ?? '',
      /reward 0 · answer Quendal/,
    );
    // Both rollouts' headers and tokens, not only the first's.
    assert.equal(await r.locator('[data-testid="header-0"] h2').textContent(), 's1-g1-0');
    assert.equal(await r.locator('[data-testid="header-1"] h2').textContent(), 's1-g1-1');
    assert.match((await r.locator('[data-testid="header-1"]').textContent()) ?? '', /answerQuendal/);
    assert.ok((await r.locator('[data-testid="tokens-1"] .chip').count()) > 10, "the second rollout's tokens");
    await r.locator('body').press('ArrowDown');
    assert.ok((await r.locator('[data-testid="tokens-1"] .chip.in-entry').count()) > 0, 'its current entry marked');
  });

  it('replays an imported rollout without tokens by segment, then split with a chosen tokenizer.json', async () => {
    await filter('!tokens && !error');
    assert.equal(await data(insp, 'view'), '1');
    await insp.locator('.rows .row[data-index="10"]').dblclick();
    const r = await replayFrame();
    await until(
      'the segment-level replay',
      async () =>
        (await r.locator('[data-testid="header"] h2').textContent()) === 's2-imported' &&
        (await data(r, 'level')) === 'segment',
      15_000,
    );
    const segments = await r.locator('.chip[data-i]').count();
    assert.equal(segments, await r.locator('.entry').count(), 'one chip per timeline entry');
    assert.equal(await r.locator('.chip.masked').count(), 0, 'no mask recorded, none shown');
    await r.locator('[data-testid="tokenizer"]').click();
    // code-server's file dialog is a quick input taking a path: once it shows its starting folder, type the file's
    // path; once it lists that file's folder, accept.
    const input = s.page.locator('.quick-input-widget input');
    await until(
      'the file dialog',
      async () => ((await input.inputValue({ timeout: 1000 }).catch(() => '')).endsWith('/') ? true : undefined),
      15_000,
    );
    await input.fill(join(s.workspace, 'models', 'tiny-e5', 'tokenizer.json'));
    await s.page
      .locator('.quick-input-list .monaco-list-row', { hasText: 'tokenizer.json' })
      .first()
      .waitFor({ timeout: 15_000 });
    await input.press('Enter');
    await until('the tokenised replay', async () => (await data(r, 'level')) === 'tokenizer', 20_000);
    assert.match(
      (await r.locator('[data-testid="header"]').textContent()) ?? '',
      /tokenised with tiny-e5\/tokenizer\.json/,
    );
    assert.ok((await r.locator('.chip[data-i]').count()) > segments * 3, 'many tokens per segment');
    await r.locator('body').press('Home');
    await r.locator('body').press('ArrowDown');
    await r.locator('body').press('ArrowDown');
    await r.locator('body').press('ArrowDown');
    assert.equal(await data(r, 'entryKind'), 'information');
    assert.equal(await data(r, 'tokenRole'), 'retrieved');
  });

  it('shows hostile rollout text literally and executes none of it', async () => {
    await filter('id == "s2-hostile"');
    await insp.locator('.rows .row[data-index="8"]').dblclick();
    const r = await replayFrame();
    await until(
      'the hostile replay',
      async () => (await r.locator('[data-testid="header"] h2').textContent()) === 's2-hostile',
      15_000,
    );
    await r.locator('body').press('End');
    await new Promise((res) => setTimeout(res, 500)); // give any onerror a chance to fire
    for (const f of [r, insp]) {
      assert.equal(
        await f.evaluate(() => (window as unknown as { __pwned?: unknown }).__pwned),
        undefined,
        'nothing executed',
      );
      assert.equal(
        await f.evaluate(() => document.querySelectorAll('img, a[href^="javascript"], iframe').length),
        0,
        'no markup from the rollout',
      );
      assert.equal(
        await f.evaluate(() => [...document.scripts].filter((sc) => (sc.textContent ?? '').includes('pwned')).length),
        0,
        'no script from the rollout',
      );
    }
    assert.equal(await s.page.evaluate(() => (window as unknown as { __pwned?: unknown }).__pwned), undefined);
    const text = (await r.locator('[data-testid="textview"]').textContent()) ?? '';
    assert.ok(
      text.includes('<img src=x onerror="window.__pwned=\'think\'">') &&
        text.includes('<script>window.__pwned="search"</script>'),
      'shown literally',
    );
    assert.match(
      (await r.locator('.entry.kind-information .doc-title').first().textContent()) ?? '',
      /<a href="javascript:window.__pwned='link'">click me<\/a>/,
    );
    assert.match(
      (await r.locator('[data-testid="header"]').textContent()) ?? '',
      /<script>window.__pwned="golden"<\/script>/,
    );
    // Layout holds: the 30,000-character line wraps instead of widening the page.
    assert.ok(
      await r.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 2),
      'no horizontal overflow',
    );
    const hostileRow = insp.locator('.rows .row[data-index="8"]');
    const box = await hostileRow.boundingBox();
    assert.ok(box && box.height <= 30, 'the inspector row stays one line');
    // Neither webview reported a CSP violation or an uncaught error to the host's log.
    assert.doesNotMatch(s.logs().extension, /\[webview (rollouts|replay)\] (CSP blocked|uncaught|unhandled)/);
  });
});

describe('rollout inspector over a token-store run (code-server)', function () {
  let s: CodeServerSession;
  // 4,200 rows: over THREADS_FROM, so the facts threads take part wherever there are two cores or more
  const STEP_ROWS = 2100;

  before(async () => {
    const dir = workspace();
    const run = join(dir, 'runs', 'store-run');
    mkdirSync(join(run, 'rollouts'), { recursive: true });
    writeFileSync(
      join(run, 'run.json'),
      JSON.stringify({ v: 1, id: 'store-run', status: 'finished', created: '2026-11-01T00:00:00Z', config: {} }),
    );
    // two steps as the trainer records them: a planted leak every 50th rollout, Quendal answered by every 4th
    for (const step of [1, 2]) {
      const recs = Array.from({ length: STEP_ROWS }, (_, i) => {
        const answer = i % 4 === 3 ? 'Quendal' : 'Ilse Marrow';
        const leak = i % 50 === 7 ? 30 : undefined;
        return JSON.parse(
          record(
            `st${step}-${i}`,
            step,
            `g${Math.floor(i / 4)}`,
            i % 4,
            trajectory(answer),
            { reward: answer === 'Quendal' ? 0 : 1 },
            leak,
          ),
        ) as Rollout;
      });
      // a malformed one: its reward is not a number
      (recs[5] as unknown as Record<string, unknown>).reward = 'high';
      await writeStoreStep(join(run, 'rollouts'), `step-00000${step}`, recs);
    }
    s = await CodeServerSession.start({ workspace: dir });
  });
  after(async () => {
    await s?.stop();
  });

  it("analyses every row of the store's steps and filters over them", async () => {
    await s.waitForLog('extension', /activated/, 60_000);
    const insp = await s.openRunInInspector('store-run');
    const total = String(2 * STEP_ROWS);
    // every row analysed: the status line no longer says "analysed N%", and nothing is under way
    const statusText = async () => (await insp.locator('[data-testid="status"]').textContent()) ?? '';
    await until(
      'all rows analysed',
      async () =>
        (await data(insp, 'total')) === total &&
        (await data(insp, 'busy')) === 'false' &&
        !/analysed|indexing/.test(await statusText()),
      60_000,
    );
    assert.match(await statusText(), /^4,?200 rows in 2 files · 2 malformed · following$/);
    if (availableParallelism() > 1)
      assert.ok(
        Number(await data(insp, 'threadRows')) > 0,
        'the facts threads (dist/inspector-facts-worker.js) built rows',
      );
    for (const [expr, want] of [
      ['mask.leaks > 0', String(2 * 42)],
      ['step == 2 && reward == 0 && answer ~ "Quendal"', String(STEP_ROWS / 4)],
      ['error', '2'],
    ] as const) {
      await applyFilter(insp, expr);
      assert.equal(await data(insp, 'view'), want, expr);
    }
    assert.match((await insp.locator('.rows .row.malformed').first().textContent()) ?? '', /step-000001:6: reward: /);
    assert.doesNotMatch(s.logs().extension, /facts worker|inspector-facts-worker/);
  });
});
