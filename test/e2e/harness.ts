/**
 * End-to-end harness: real VS Code (code-server, installed by scripts/install-code-server.sh) with our VSIX
 * installed into a fresh extensions dir, a fresh user-data dir and a copy of a fixture workspace, served on
 * 127.0.0.1 and driven by playwright-core with Debian's Chromium. It stops everything it started, by process id.
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { type Browser, chromium, type Frame, type Locator, type Page } from 'playwright-core';

export const ROOT = join(__dirname, '..', '..');
const CODE_SERVER_ENTRY = join(
  ROOT,
  '.vscode-test',
  'code-server',
  'node_modules',
  'code-server',
  'out',
  'node',
  'entry.js',
);
export const ARTIFACTS = join(ROOT, '.e2e-artifacts');
export const EXTENSION_ID = 'search-agent-studio.search-agent-studio';

/** In the window's title once the workbench has read the session's user settings (boot waits for it). */
const SETTINGS_MARK = 'e2e-settings-read';

/** The Chromium flags this machine needs (closed network, no sandbox as root, no GPU). */
const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Token texts and roles from (text, role) pieces, each split into word-ish tokens (for fixture rollouts). */
export function tokenPieces<R extends string>(pieces: readonly [string, R][]): { text: string[]; role: R[] } {
  const text: string[] = [];
  const role: R[] = [];
  for (const [t, r] of pieces)
    for (const tok of t.match(/\s*[^\s]+|\s+/g) ?? []) {
      text.push(tok);
      role.push(r);
    }
  return { text, role };
}

export interface SessionOptions {
  /** Fixture folder copied to a fresh workspace (default test/e2e/fixtures/workspace). */
  workspace?: string;
  /** false: the workspace opens in restricted mode (untrusted). */
  trusted?: boolean;
  /** User settings merged over the defaults. */
  settings?: Record<string, unknown>;
  /** The VSIX to install (default: the path `npm run package` wrote to out/vsix-path.txt). */
  vsix?: string;
  /** Environment variables for code-server (and so the extension host). */
  env?: Record<string, string>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 30_000,
  everyMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== null && v !== false) return v;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`,
      );
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

function filesUnder(dir: string, name: (n: string) => boolean): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile() && name(d.name))
    .map((d) => join(d.parentPath, d.name));
}

/** Polls `fn` until it returns something other than undefined/false (errors count as "not yet"), or times out. */
export async function until<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Where an element is on the page, once it is laid out and visible: Playwright's `boundingBox()` answers null for an
 * element not visible *now* (a chart redrawing, a panel still laying out), and on a slow machine a test read that null
 * (stop 64: "Cannot read properties of null (reading 'x')", the retry passed).
 */
export async function boxOf(
  locator: Locator,
  timeoutMs = 10_000,
): Promise<{ x: number; y: number; width: number; height: number }> {
  return until(`${locator} laid out`, async () => (await locator.boundingBox()) ?? undefined, timeoutMs);
}

export class CodeServerSession {
  /** The sessions started and not yet stopped: the root hook saves each one's artifacts when a test fails. */
  static readonly live = new Set<CodeServerSession>();
  readonly dir: string;
  readonly userDataDir: string;
  readonly extensionsDir: string;
  readonly workspace: string;
  port = 0;
  page!: Page;
  private browser: Browser | undefined;
  private server: ResultPromise | undefined;
  private serverOutput: string[] = [];

  private constructor(private readonly options: SessionOptions) {
    // Outside the repository, so VS Code's git extension finds no parent repository to offer.
    this.dir = mkdtempSync(join(tmpdir(), 'sas-e2e-'));
    this.userDataDir = join(this.dir, 'user-data');
    this.extensionsDir = join(this.dir, 'extensions');
    this.workspace = join(this.dir, 'workspace');
  }

  static async start(options: SessionOptions = {}): Promise<CodeServerSession> {
    const s = new CodeServerSession(options);
    CodeServerSession.live.add(s);
    try {
      await s.boot();
    } catch (e) {
      await s.stop();
      throw e;
    }
    return s;
  }

  private async boot(): Promise<void> {
    if (!existsSync(CODE_SERVER_ENTRY)) {
      throw new Error(`code-server is not installed (${CODE_SERVER_ENTRY}); run \`bash scripts/setup.sh --test\``);
    }
    const vsix = this.options.vsix ?? readFileSync(join(ROOT, 'out', 'vsix-path.txt'), 'utf8').trim();
    cpSync(this.options.workspace ?? join(ROOT, 'test', 'e2e', 'fixtures', 'workspace'), this.workspace, {
      recursive: true,
    });
    mkdirSync(join(this.userDataDir, 'User'), { recursive: true });
    this.writeSettings({
      'workbench.startupEditor': 'none',
      'workbench.tips.enabled': false,
      'workbench.enableExperiments': false,
      'workbench.colorTheme': 'Default Dark Modern',
      'telemetry.telemetryLevel': 'off',
      'extensions.autoUpdate': false,
      'extensions.autoCheckUpdates': false,
      'update.mode': 'none',
      // Trust off = every workspace trusted; on (with no prompt) = this one opens in restricted mode.
      'security.workspace.trust.enabled': this.options.trusted === false,
      'security.workspace.trust.startupPrompt': 'never',
      'security.workspace.trust.banner': 'never',
      'window.commandCenter': false,
      'chat.commandCenter.enabled': false,
      'chat.disableAIFeatures': true,
      'git.openRepositoryInParentFolders': 'never',
      'outline.collapseItems': 'alwaysCollapse',
      'editor.hover.delay': 100,
      'editor.minimap.enabled': false,
      // A mark in the window's title: the workbench shows it once it has read these settings (see boot's last wait).
      'window.title': `\${activeEditorShort}\${separator}\${rootName}\${separator}${SETTINGS_MARK}`,
      ...this.options.settings,
    });

    // Install our VSIX into the fresh extensions dir with code-server's own installer.
    const base = ['--user-data-dir', this.userDataDir, '--extensions-dir', this.extensionsDir];
    const install = await execa(process.execPath, [CODE_SERVER_ENTRY, ...base, '--install-extension', vsix], {
      reject: false,
      timeout: 120_000,
    });
    if (install.exitCode !== 0 || !/successfully installed/i.test(install.stdout)) {
      throw new Error(`installing ${vsix} failed (exit ${install.exitCode}):\n${install.stdout}\n${install.stderr}`);
    }

    // code-server, its extension host and what they spawn (our trainer, env server) put their temp files (VS Code's
    // IPC sockets among them) in the session's own dir, removed by stop(), not in /tmp.
    const sessionTmp = join(this.dir, 'tmp');
    mkdirSync(sessionTmp);
    this.port = await freePort();
    this.server = execa(
      process.execPath,
      [
        CODE_SERVER_ENTRY,
        ...base,
        '--auth',
        'none',
        '--bind-addr',
        `127.0.0.1:${this.port}`,
        '--disable-telemetry',
        '--disable-update-check',
        '--disable-getting-started-override',
        this.workspace,
      ],
      {
        detached: true,
        reject: false,
        buffer: false,
        stdin: 'ignore',
        env: { ...process.env, SERVICE_URL: '', ITEM_URL: '', TMPDIR: sessionTmp, ...this.options.env },
      },
    );
    const collect = (d: Buffer) => this.serverOutput.push(d.toString());
    this.server.stdout?.on('data', collect);
    this.server.stderr?.on('data', collect);
    await waitFor(
      'code-server /healthz',
      async () => {
        if (this.server?.exitCode !== null && this.server?.exitCode !== undefined)
          throw new Error(`code-server exited: ${this.serverOutput.join('')}`);
        const r = await fetch(`http://127.0.0.1:${this.port}/healthz`).catch(() => undefined);
        return r?.ok;
      },
      60_000,
    );

    this.browser = await chromium.launch({
      executablePath: process.env.SAS_CHROMIUM ?? '/usr/bin/chromium',
      headless: true,
      args: CHROMIUM_ARGS,
    });
    const context = await this.browser.newContext({ viewport: { width: 1400, height: 900 } });
    this.page = await context.newPage();
    await this.page.goto(`http://127.0.0.1:${this.port}/?folder=${encodeURIComponent(this.workspace)}`);
    await this.page.waitForSelector('.monaco-workbench', { timeout: 60_000 });
    // The status bar is rendered once the workbench has restored.
    await this.page.waitForSelector('.statusbar', { timeout: 60_000 });
    // code-server's workbench reads the user settings from the server after it starts: a command run before then sees
    // none of them (a run started at once found no searchAgent.pythonPath). The title carries their mark once read.
    await waitFor(
      'the workbench to read the user settings (window.title)',
      async () => (await this.page.title()).includes(SETTINGS_MARK),
      60_000,
    );
  }

  writeSettings(settings: Record<string, unknown>): void {
    const file = join(this.userDataDir, 'User', 'settings.json');
    const current = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : {};
    writeFileSync(file, JSON.stringify({ ...current, ...settings }, null, 2));
  }

  /**
   * Runs a command by its palette title ("Search Agent: Show Welcome"). A page that takes focus as it loads (the
   * walkthrough) can close the palette between the typing and the click: the palette is opened again then (a click
   * that never happened, not one that did: Playwright fails it before clicking when the row is hidden).
   */
  async runCommand(title: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      await this.openPalette(title);
      const row = this.page.locator('.quick-input-list .monaco-list-row', {
        has: this.page.locator('.label-name', { hasText: title }),
      });
      await row.first().waitFor({ timeout: 15_000 });
      // Pick the exact title (the filter also shows fuzzy matches).
      const labels = await this.visiblePaletteLabels();
      const index = labels.indexOf(title);
      if (index < 0) throw new Error(`"${title}" not in the palette; it shows: ${labels.join(' | ')}`);
      try {
        await this.page
          .locator('.quick-input-list .monaco-list-row')
          .nth(index)
          .click({ timeout: attempt < 3 ? 5_000 : 30_000 });
        return;
      } catch (e) {
        if (attempt >= 3) throw e;
      }
    }
  }

  /** Picks the row of the open quick pick whose label contains `label` (a step of a multi-step command). */
  async pickQuickItem(label: string): Promise<void> {
    const row = this.page.locator('.quick-input-list .monaco-list-row', {
      has: this.page.locator('.label-name', { hasText: label }),
    });
    await row.first().waitFor({ timeout: 30_000 });
    await row.first().click();
  }

  /** Accepts the open input box's value (Enter), after `value` is typed when given. */
  async answerInputBox(value?: string): Promise<void> {
    const input = this.page.locator('.quick-input-widget input');
    await input.waitFor({ timeout: 15_000 });
    if (value !== undefined) await input.fill(value);
    await this.page.keyboard.press('Enter');
    await this.page.locator('.quick-input-widget').waitFor({ state: 'hidden', timeout: 10_000 });
  }

  /**
   * Switches the colour theme the way a user does ("Preferences: Color Theme", then the theme's label, e.g.
   * "Light Modern"); code-server does not pick up edits of settings.json made behind its back.
   */
  async setColorTheme(label: string): Promise<void> {
    await this.runCommand('Preferences: Color Theme');
    const input = this.page.locator('.quick-input-widget input');
    await input.waitFor({ timeout: 15_000 });
    await input.fill(label);
    const row = this.page.locator('.quick-input-list .monaco-list-row', {
      has: this.page.locator('.label-name', { hasText: new RegExp(`^${label}$`) }),
    });
    await row.first().waitFor({ timeout: 15_000 });
    await row.first().click();
    await this.page.locator('.quick-input-widget').waitFor({ state: 'hidden', timeout: 10_000 });
  }

  /** "Developer: Reload Window", then waits for the new workbench (a new extension host) to restore. */
  async reloadWindow(): Promise<void> {
    const loaded = this.page.waitForEvent('load', { timeout: 60_000 });
    await this.runCommand('Developer: Reload Window');
    await loaded;
    await this.page.waitForSelector('.monaco-workbench', { timeout: 60_000 });
    await this.page.waitForSelector('.statusbar', { timeout: 60_000 });
  }

  /** Opens a workspace file by name with Quick Open and waits for its editor. */
  async openFile(name: string): Promise<void> {
    // the palette's input without ">" is Quick Open's; opened as the palette is, again when a frame held the keyboard
    // (CI lost a retried test to a bare Control+P that a webview in front swallowed)
    await this.openQuickInput(name);
    const row = this.page.locator('.quick-input-list .monaco-list-row', {
      has: this.page.locator('.label-name', { hasText: name }),
    });
    await row.first().waitFor({ timeout: 15_000 });
    await this.page.keyboard.press('Enter');
    await this.page.locator(`.tabs-container .tab[data-resource-name="${name}"]`).waitFor({ timeout: 15_000 });
    await this.page.locator('.editor-instance .monaco-editor .view-lines').first().waitFor({ timeout: 15_000 });
  }

  /** The rendered spans of the active editor's visible lines, with their computed colours. */
  async editorSpans(): Promise<{ line: number; text: string; color: string; fontStyle: string }[]> {
    return this.page.evaluate(() => {
      const editor = document.querySelector('.editor-instance .monaco-editor')!;
      const lines = [...editor.querySelectorAll('.view-lines .view-line')] as HTMLElement[];
      return lines.flatMap((el) => {
        const top = Number.parseFloat(el.style.top || '0');
        return ([...el.querySelectorAll('span > span')] as HTMLElement[]).map((s) => ({
          line: top,
          text: (s.textContent ?? '').replace(/\u00a0/g, ' '),
          color: getComputedStyle(s).color,
          fontStyle: getComputedStyle(s).fontStyle,
        }));
      });
    });
  }

  /** Moves the mouse over the first rendered editor span whose text contains `text` (nbsp-normalised). */
  async hoverEditorText(text: string): Promise<void> {
    const box = await this.page.evaluate((t) => {
      const spans = [
        ...document.querySelectorAll('.editor-instance .monaco-editor .view-line span > span'),
      ] as HTMLElement[];
      const el = spans.find((s) => (s.textContent ?? '').replace(/\u00a0/g, ' ').includes(t));
      if (!el) return null;
      const r = el.getBoundingClientRect();
      return { x: r.left + r.width / 2, y: r.top + r.height / 2 };
    }, text);
    if (!box) throw new Error(`no editor text ${JSON.stringify(text)} on screen`);
    await this.page.mouse.move(box.x - 5, box.y);
    await this.page.mouse.move(box.x, box.y, { steps: 3 });
  }

  /** The palette's entries for a filter text, then closes it. */
  async paletteEntries(filter: string): Promise<string[]> {
    await this.openPalette(filter);
    await this.page.locator('.quick-input-list .monaco-list-row').first().waitFor({ timeout: 15_000 });
    await this.page.waitForTimeout(300); // let the list settle after filtering
    const labels = await this.visiblePaletteLabels();
    await this.page.keyboard.press('Escape');
    return labels;
  }

  private async openPalette(text: string): Promise<void> {
    await this.openQuickInput(`>${text}`);
  }

  /** Opens the quick input with `value` (">…": a command; a file's name: Quick Open), again if it did not open or
   * closed before the text was in: a page that takes focus as it finishes loading (the walkthrough) can close the
   * palette, or swallow the key that opens it (CI lost the restricted-mode test to each). F1 and Ctrl+Shift+P
   * alternate; four attempts. */
  private async openQuickInput(value: string): Promise<void> {
    const input = this.page.locator('.quick-input-widget input');
    for (let attempt = 1; ; attempt++) {
      await this.page
        .locator('.monaco-workbench')
        .click({ position: { x: 700, y: 10 }, force: true })
        .catch(() => {});
      // A retry first takes the keyboard back from a frame that holds it (a webview's iframe), so the key reaches the
      // workbench's own keybinding dispatcher.
      if (attempt > 1)
        await this.page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur()).catch(() => {});
      await this.page.keyboard.press(attempt % 2 === 1 ? 'F1' : 'Control+Shift+P');
      try {
        await input.waitFor({ timeout: 7_500 });
        await input.fill(value, { timeout: 5_000 });
        return;
      } catch (e) {
        if (attempt >= 4) throw e;
        await this.page.keyboard.press('Escape').catch(() => {});
      }
    }
  }

  private async visiblePaletteLabels(): Promise<string[]> {
    return this.page
      .locator('.quick-input-list .monaco-list-row .label-name')
      .evaluateAll((els) => els.map((e) => (e.textContent ?? '').trim()));
  }

  /**
   * The inner frame of our webview `name` (code-server nests it: iframe.webview → #active-frame), not one of `notAmong`,
   * and with `where`, one whose body's data attributes pass its test (what the webview shows, not only which it is).
   */
  async webviewFrame(
    name: string,
    timeoutMs = 30_000,
    notAmong?: ReadonlySet<Frame>,
    where?: { what: string; test: (dataset: Record<string, string | undefined>) => boolean },
  ): Promise<Frame> {
    return waitFor(
      `webview "${name}"${where ? ` ${where.what}` : ''}`,
      async () => {
        for (const frame of this.page.frames()) {
          if (frame === this.page.mainFrame() || frame.isDetached() || notAmong?.has(frame)) continue;
          const dataset = await frame
            .evaluate(() => (document.body ? { ...document.body.dataset } : null))
            .catch(() => null);
          if (dataset?.webview === name && (!where || where.test(dataset))) return frame;
        }
        return undefined;
      },
      timeoutMs,
    );
  }

  /** Whether a live (attached) webview of this name is now in the page. */
  async hasWebview(name: string): Promise<boolean> {
    for (const frame of this.page.frames()) {
      if (frame === this.page.mainFrame() || frame.isDetached()) continue;
      if ((await frame.evaluate(() => document.body?.dataset.webview ?? null).catch(() => null)) === name) return true;
    }
    return false;
  }

  /**
   * Opens a run of the Runs view in the rollout inspector (its row's inline action); returns the new inspector's
   * frame. Every open is a new panel: an inspector already open (a step's file a dashboard click opened) is not
   * taken for it — that one is hidden under the new panel and its frame detaches. Not taken either when it was still
   * loading as this began (not among the frames then): the frame is the one whose source is the run (`data-source`,
   * the path the inspector reads; a step's file is a path under it). On a slow machine a dashboard click's inspector
   * loaded after the click here, was taken, and detached under the test ("Frame was detached", stop 64).
   */
  async openRunInInspector(run: string): Promise<Frame> {
    const open = new Set(this.page.frames());
    await this.runCommand('Search Agent: Focus on Runs View');
    const row = this.page.locator('.monaco-list-row', { hasText: run });
    await row.first().waitFor({ timeout: 30_000 });
    await row.first().hover();
    await row.first().locator('.action-label[aria-label="Open Rollout Inspector"]').click();
    return this.webviewFrame('rollouts', 30_000, open, {
      what: `reading the run ${run}`,
      test: (d) => basename(d.source ?? '') === run,
    });
  }

  /** The labels of the Outline view's rows now showing (focus it first: `Explorer: Focus on Outline View`). */
  async outlineLabels(): Promise<string[]> {
    return this.page
      .locator('.outline-pane .monaco-list-row .label-name')
      .evaluateAll((els) => els.map((e) => (e.textContent ?? '').trim()));
  }

  /** Texts of the notification toasts now showing. */
  async notifications(): Promise<string[]> {
    return this.page
      .locator('.notifications-toasts .notification-list-item-message')
      .evaluateAll((els) => els.map((e) => (e.textContent ?? '').trim()));
  }

  /** Waits for a notification toast whose text matches. */
  async waitForNotification(match: RegExp, timeoutMs = 30_000): Promise<string> {
    return waitFor(
      `a notification matching ${match}`,
      async () => (await this.notifications()).find((t) => match.test(t)),
      timeoutMs,
    );
  }

  /** The extension host's log, and our output channel's log ("Search Agent Studio"). */
  logs(): { exthost: string; extension: string } {
    return {
      exthost: this.logText((n) => n === 'exthost.log' || n === 'remoteexthost.log'),
      extension: this.channelLog('Search Agent Studio'),
    };
  }

  /** An output channel's log over every extension host of the session (its file: the name without colons). */
  channelLog(name: string): string {
    return this.logText((n) => n === `${name.replace(/:/g, '')}.log`);
  }

  private logText(name: (n: string) => boolean): string {
    return filesUnder(join(this.userDataDir, 'logs'), name)
      .map((f) => readFileSync(f, 'utf8'))
      .join('\n');
  }

  /**
   * What a failing test's output should carry when its artifacts cannot be read (CI keeps only the output): the
   * toasts now showing, the last lines of our output channels (the extension, the trainer, the env server) and the
   * extension host's last errors and warnings.
   */
  async digest(lines = 25): Promise<string> {
    const toasts = await this.notifications().catch(() => [] as string[]);
    const channels = ['Search Agent Studio', 'Search Agent: Trainer', 'Search Agent: Env Server'].map((name) => {
      const text = this.channelLog(name).trimEnd();
      const tail = text
        ? text
            .split('\n')
            .slice(-lines)
            .map((l) => `        | ${l}`)
            .join('\n')
        : '        | (no log)';
      return `      ${name} (last ${lines} lines):\n${tail}`;
    });
    const errors = this.logs()
      .exthost.split('\n')
      .filter((l) => /\[(error|warning)\]/.test(l))
      .slice(-10)
      .map((l) => `        | ${l.slice(0, 300)}`);
    return [
      `      toasts: ${JSON.stringify(toasts)}`,
      ...channels,
      `      extension host errors and warnings (last ${errors.length}):`,
      ...errors,
    ].join('\n');
  }

  async waitForLog(which: 'exthost' | 'extension', match: RegExp, timeoutMs = 30_000): Promise<string> {
    return waitFor(
      `${which} log to match ${match}`,
      () =>
        this.logs()
          [which].split('\n')
          .find((l) => match.test(l)),
      timeoutMs,
    );
  }

  /** Saves a screenshot, the logs and code-server's output under .e2e-artifacts/<name>/. */
  async saveArtifacts(name: string): Promise<string> {
    const dir = join(ARTIFACTS, name.replace(/[^a-z0-9._-]+/gi, '-').slice(0, 100));
    mkdirSync(dir, { recursive: true });
    await this.page?.screenshot({ path: join(dir, 'screenshot.png') }).catch(() => {});
    const logs = this.logs();
    writeFileSync(join(dir, 'exthost.log'), logs.exthost);
    writeFileSync(join(dir, 'search-agent-studio.log'), logs.extension);
    writeFileSync(join(dir, 'code-server.log'), this.serverOutput.join(''));
    return dir;
  }

  async stop(): Promise<void> {
    CodeServerSession.live.delete(this);
    await this.browser?.close().catch(() => {});
    this.browser = undefined;
    const server = this.server;
    this.server = undefined;
    if (server?.pid !== undefined && server.exitCode === null) {
      const group = -server.pid; // detached: code-server leads its own process group
      const kill = (signal: NodeJS.Signals) => {
        try {
          process.kill(group, signal);
        } catch {
          /* already gone */
        }
      };
      kill('SIGTERM');
      const exited = await Promise.race([
        server.then(() => true),
        new Promise((r) => setTimeout(() => r(false), 5_000)),
      ]);
      if (!exited) kill('SIGKILL');
      await server.catch(() => {});
    }
    if (!process.env.SAS_E2E_KEEP) rmSync(this.dir, { recursive: true, force: true });
  }
}
