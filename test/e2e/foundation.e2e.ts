/** The foundation in real VS Code: activation, palette commands, a webview (the dashboard), theme colours, CSP. */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CodeServerSession, EXTENSION_ID, ROOT } from './harness';
import { session } from './hooks';

const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
// The commands the palette always shows (some appear only when a reward module is open).
const hidden = new Set(
  (pkg.contributes.menus?.commandPalette ?? [])
    .filter((m: { when?: string }) => m.when)
    .map((m: { command: string }) => m.command),
);
const TITLES: string[] = pkg.contributes.commands
  .filter((c: { command: string }) => !hidden.has(c.command))
  .map((c: { category: string; title: string }) => `${c.category}: ${c.title}`);

/** `rgb(…)` for any CSS colour, as the main page computes it. */
async function cssColor(s: CodeServerSession, value: string): Promise<string> {
  return s.page.evaluate((v) => {
    const el = document.createElement('div');
    el.style.color = v;
    document.body.appendChild(el);
    const c = getComputedStyle(el).color;
    el.remove();
    return c;
  }, value);
}

/** The workbench's value of a theme colour variable, as rgb. */
async function workbenchColor(s: CodeServerSession, variable: string): Promise<string> {
  const raw = await s.page.evaluate(
    (v) => getComputedStyle(document.querySelector('.monaco-workbench')!).getPropertyValue(v).trim(),
    variable,
  );
  assert.ok(raw, `${variable} is set in the workbench`);
  return cssColor(s, raw);
}

describe('foundation (code-server)', function () {
  let s: CodeServerSession;
  before(async () => {
    s = await session();
  });

  it('activates the extension in a workspace with trajectory files', async () => {
    const line = await s.waitForLog('extension', /Search Agent Studio \d+\.\d+\.\d+ activated/);
    assert.match(line, /workspace trusted/);
    const activation = await s.waitForLog(
      'exthost',
      new RegExp(`ExtensionService#_doActivateExtension ${EXTENSION_ID.replace(/\./g, '\\.')}`),
    );
    assert.match(activation, /workspaceContains/);
    await s.page.locator('.statusbar-item', { hasText: 'Search Agent' }).first().waitFor({ timeout: 15_000 });
  });

  it('lists its commands in the palette under "Search Agent"', async () => {
    const entries = await s.paletteEntries('Search Agent:');
    for (const t of TITLES) assert.ok(entries.includes(t), `"${t}" in ${JSON.stringify(entries)}`);
  });

  it('opens a webview (the dashboard), rendering a vscode-elements button in the theme’s colours', async () => {
    await s.runCommand('Search Agent: Open Training Dashboard');
    const frame = await s.webviewFrame('dashboard');
    // The page got its state from the host through the typed protocol (a request answered by the extension).
    await frame.waitForSelector('vscode-button[data-testid="add-run"]', { timeout: 15_000 });
    assert.match((await frame.textContent('[data-testid="empty"]')) ?? '', /No metrics yet/);
    // Every stylesheet (ours, the shared one, the codicons) was allowed by the CSP and applied.
    const sheets = await frame.evaluate(() =>
      [...document.querySelectorAll('link[rel="stylesheet"]')].map((l) => {
        const sheet = (l as HTMLLinkElement).sheet;
        return { href: (l as HTMLLinkElement).href.split('/').pop(), rules: sheet ? sheet.cssRules.length : -1 };
      }),
    );
    assert.ok(sheets.length >= 2, JSON.stringify(sheets));
    for (const sheet of sheets)
      assert.ok(sheet.rules > 0, `stylesheet ${sheet.href} did not load: ${JSON.stringify(sheets)}`);

    // Not hovered (a hovered button takes the hover background; the palette leaves the mouse over it).
    const buttonColor = async () => {
      await s.page.mouse.move(700, 880);
      return frame.evaluate(() => {
        const button = document.querySelector('vscode-button')!;
        const base = button.shadowRoot?.querySelector('.base') as HTMLElement | null;
        if (!base) throw new Error('vscode-button did not render its shadow DOM');
        return getComputedStyle(base).backgroundColor;
      });
    };
    const dark = await workbenchColor(s, '--vscode-button-secondaryBackground');
    assert.equal(await buttonColor(), dark, "a secondary button's background = the workbench theme’s");

    // Switch the theme: the webview follows, still matching the workbench.
    await s.setColorTheme('Light Modern');
    const light = await waitUntil(async () => {
      const c = await workbenchColor(s, '--vscode-button-secondaryBackground').catch(() => undefined);
      return c && c !== dark ? c : undefined;
    });
    await waitUntil(async () => ((await buttonColor()) === light ? true : undefined));
    await s.setColorTheme('Dark Modern');
    await waitUntil(async () => ((await buttonColor()) === dark ? true : undefined));
  });

  it('runs a host handler from the webview through the protocol', async () => {
    const frame = await s.webviewFrame('dashboard');
    // "Overlay Run…" asks the host for the workspace's runs; with none, the host says so.
    await frame.click('vscode-button[data-testid="add-run"]');
    await s.waitForNotification(/no other run to overlay/, 15_000);
  });

  it('blocks inline scripts with its CSP, and the page itself raised no CSP violation', async () => {
    const frame = await s.webviewFrame('dashboard');
    const csp = await frame.evaluate(
      () => document.querySelector('meta[http-equiv="Content-Security-Policy"]')?.getAttribute('content') ?? '',
    );
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'nonce-[A-Za-z0-9+/=]+'/);
    const result = await frame.evaluate(async () => {
      const w = window as unknown as { __sasInlineRan?: boolean };
      w.__sasInlineRan = false;
      const violations: string[] = [];
      document.addEventListener('securitypolicyviolation', (e) => violations.push(e.effectiveDirective));
      const script = document.createElement('script');
      script.textContent = 'window.__sasInlineRan = true;';
      document.body.appendChild(script);
      const img = document.createElement('img');
      img.setAttribute('onerror', 'window.__sasInlineRan = true;');
      img.setAttribute('src', 'data:image/png;base64,not-an-image');
      document.body.appendChild(img);
      await new Promise((r) => setTimeout(r, 500));
      script.remove();
      img.remove();
      return { ran: w.__sasInlineRan, violations };
    });
    assert.equal(result.ran, false, 'an inline script ran despite the CSP');
    assert.ok(result.violations.includes('script-src-elem'), JSON.stringify(result.violations));
    // Our own document loads with no violation: the bridge logs any to the extension's log.
    await s.waitForLog('extension', /\[webview dashboard\] CSP blocked script-src-elem/);
    const blocked = s
      .logs()
      .extension.split('\n')
      .filter((l) => /\[webview dashboard\] CSP blocked/.test(l));
    assert.ok(
      blocked.every((l) => /script-src-elem: inline/.test(l) || /script-src-attr/.test(l)),
      blocked.join('\n'),
    );
  });
});

describe('restricted mode (untrusted workspace, code-server)', function () {
  let s: CodeServerSession;
  before(async () => {
    s = await CodeServerSession.start({ trusted: false });
  });
  after(() => s?.stop());

  it('activates; the walkthrough opens; setting up the trainer environment (it runs pip) asks for trust first', async () => {
    await s.waitForLog('extension', /activated .*workspace untrusted/);
    await s.runCommand('Search Agent: Get Started');
    await s.page
      .locator('.gettingStartedContainer', { hasText: 'Get Started with Search Agent Studio' })
      .first()
      .waitFor({ timeout: 30_000 });
    await s.runCommand('Search Agent: Set Up Trainer Environment');
    await s.waitForNotification(
      /setting up the trainer environment runs Python and pip; trust the workspace first/,
      15_000,
    );
  });
});

async function waitUntil<T>(fn: () => Promise<T | undefined>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline)
      throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
