/**
 * The reward editor in VS Code: a CodeLens above a reward module's default export ("Score against …", then the
 * result inline), the Reward Lab webview beside the editor, re-scoring on save (debounced; a new save cancels
 * the run in flight; Cancel stops it), decorations on the lines that threw (dropped from a line once it is edited),
 * and "New Reward Function". In an untrusted workspace nothing runs and the lens says why. Scoring happens in a
 * separate process (runner.ts) whose sandbox holds the per-item and per-batch limits; re-scoring after an edit scores
 * the same rollouts as the run before it (the set is pinned: a live run's files keep growing).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import * as vscode from 'vscode';
import { rolloutFileKind } from '../../core/importers';
import { failedSoFar, type RewardLabContract, type RewardLabState } from '../../core/protocol/rewardLab';
import { rewardTemplate } from '../../core/rewards/template';
import { JsonlFile } from '../../core/store/jsonl';
import { isStorePart, rolloutFiles } from '../../core/store/rollouts';
import { STEP_DIR, StoreStep } from '../../core/store/tokenStore';
import { type OpenedWebview, openWebviewPanel } from '../webviewPanel';
import { RewardRun } from './runner';

type Choice = vscode.QuickPickItem & { path?: string; browse?: boolean };

/**
 * What "Score against…" offers: run directories (every rollout of the run), then the rollout files of each run and
 * the workspace's other files that hold rollouts (recognised by place or content: src/core/importers
 * rolloutFileKind) — not metrics, events, datasets or corpora.
 */
async function rolloutChoices(): Promise<Choice[]> {
  const exclude = '**/{node_modules,.git,.venv,out,dist}/**';
  const runs = (await vscode.workspace.findFiles('**/run.json', exclude, 200)).map((u) => dirname(u.fsPath)).sort();
  const files = (await vscode.workspace.findFiles('**/*.jsonl', exclude, 2000)).map((u) => u.fsPath);
  const kinds: (readonly [string, 'rollouts' | 'verl' | undefined])[] = await Promise.all(
    files.map(async (f) => [f, await rolloutFileKind(f)] as const),
  );
  // the token store's steps (rollouts/step-N/rollouts.parquet): the step directory
  for (const u of await vscode.workspace.findFiles('**/rollouts/*step-*/rollouts.parquet', exclude, 2000))
    kinds.push([dirname(u.fsPath), 'rollouts'] as const);
  const items: Choice[] = runs.map((dir) => ({
    label: `$(folder) ${vscode.workspace.asRelativePath(dir)}`,
    description: 'run directory: all its rollouts',
    path: dir,
  }));
  const ofRun = (f: string) => runs.find((r) => f.startsWith(`${r}/rollouts/`) || f.startsWith(`${r}\\rollouts\\`));
  const step = (f: string) => /(val-)?step-(\d+)(\.jsonl)?$/.exec(f);
  const found = kinds.filter(([, k]) => k).map(([f, k]) => ({ f, k: k!, run: ofRun(f), m: step(f) }));
  found.sort(
    (a, b) =>
      (a.run ?? '~').localeCompare(b.run ?? '~') ||
      (a.m && b.m ? Number(a.m[2]) - Number(b.m[2]) || (a.m[1] ? 1 : 0) - (b.m[1] ? 1 : 0) : a.f.localeCompare(b.f)),
  );
  for (const { f, k, run, m } of found) {
    const description =
      run && m
        ? `${basename(run)} · step ${Number(m[2])}${m[1] ? ' · held-out' : ''}`
        : k === 'verl'
          ? 'veRL dump'
          : 'rollouts';
    items.push({ label: `$(file) ${vscode.workspace.asRelativePath(f)}`, description, path: f });
  }
  items.push({
    label: '$(folder-opened) Browse…',
    description: 'a rollout file, a run directory, a veRL dump folder, TRL completion tables, Search-R1 transcripts',
    browse: true,
  });
  return items;
}

export const REWARD_SELECTOR: vscode.DocumentSelector = [{ pattern: '**/*.reward.{ts,js,mts,mjs}' }];
const isRewardModule = (uri: vscode.Uri) => /\.reward\.(ts|js|mts|mjs)$/.test(uri.path);

interface Session {
  uri: vscode.Uri;
  state: RewardLabState;
  run?: RewardRun;
  lab?: OpenedWebview<RewardLabContract>;
  saveTimer?: ReturnType<typeof setTimeout>;
  /** The rollouts re-scoring uses (file → last line), taken by the first run after the rollouts were chosen. */
  set?: Record<string, number>;
  /** Bumped when the rollouts are chosen again: a report of another set is no "before the edit". */
  setVersion: number;
  reportVersion?: number;
}

/** Failure marks in a module, by 1-based line. */
type Marks = Map<number, { count: number; message: string }>;

const pct = (x: number | null | undefined) => (x === null || x === undefined ? '–' : `${(100 * x).toFixed(1)}%`);
const num = (x: number | null | undefined) => (x === null || x === undefined ? '–' : x.toFixed(3));

export class RewardWorkbench implements vscode.Disposable {
  private readonly sessions = new Map<string, Session>();
  /** The lines that threw, per module file; edited lines lose theirs at once (onDidChangeTextDocument). */
  private readonly marks = new Map<string, Marks>();
  private readonly lensChanged = new vscode.EventEmitter<void>();
  private readonly disposables: vscode.Disposable[] = [this.lensChanged];
  private readonly errorLines = vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    backgroundColor: new vscode.ThemeColor('diffEditor.removedLineBackground'),
    overviewRulerColor: new vscode.ThemeColor('editorError.foreground'),
    overviewRulerLane: vscode.OverviewRulerLane.Right,
    after: { color: new vscode.ThemeColor('editorError.foreground'), margin: '0 0 0 2em' },
  });

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.disposables.push(
      this.errorLines,
      vscode.languages.registerCodeLensProvider(REWARD_SELECTOR, {
        provideCodeLenses: (d) => this.lenses(d),
        onDidChangeCodeLenses: this.lensChanged.event,
      }),
      vscode.commands.registerCommand('searchAgent.scoreReward', (uri?: vscode.Uri) => this.score(uri)),
      vscode.commands.registerCommand('searchAgent.chooseRewardRollouts', (uri?: vscode.Uri) => this.choose(uri, true)),
      vscode.commands.registerCommand('searchAgent.openRewardLab', (uri?: vscode.Uri) => this.openLab(uri)),
      vscode.commands.registerCommand('searchAgent.cancelRewardScoring', (uri?: vscode.Uri) => {
        const u = uri ?? vscode.window.activeTextEditor?.document.uri;
        const s = u && this.sessions.get(u.toString());
        if (s) this.cancel(s);
      }),
      vscode.commands.registerCommand('searchAgent.newRewardFunction', () => this.scaffold()),
      vscode.workspace.onDidSaveTextDocument((d) => this.onSave(d)),
      vscode.workspace.onDidChangeTextDocument((e) => this.onEdit(e)),
      vscode.workspace.onDidGrantWorkspaceTrust(() => this.lensChanged.fire()),
      vscode.window.onDidChangeVisibleTextEditors(() => this.decorateAll()),
    );
  }

  private session(uri: vscode.Uri): Session {
    const key = uri.toString();
    let s = this.sessions.get(key);
    if (!s) {
      const rollouts = this.context.workspaceState.get<string>(`rewardRollouts:${key}`) ?? null;
      s = {
        uri,
        state: { module: uri.fsPath, moduleName: basename(uri.fsPath), rollouts, status: 'idle', run: 0 },
        setVersion: 0,
      };
      this.sessions.set(key, s);
    }
    return s;
  }

  private target(uri?: vscode.Uri): vscode.Uri | undefined {
    const u = uri ?? vscode.window.activeTextEditor?.document.uri;
    if (!u || !isRewardModule(u)) {
      void vscode.window.showWarningMessage('Open a reward module (a file named *.reward.ts or *.reward.js) first.');
      return undefined;
    }
    return u;
  }

  // --- CodeLens -------------------------------------------------------------------------------------------

  private lenses(document: vscode.TextDocument): vscode.CodeLens[] {
    const text = document.getText();
    const m = /^export\s+default\b/m.exec(text);
    const at = new vscode.Range(document.positionAt(m?.index ?? 0), document.positionAt(m?.index ?? 0));
    if (!vscode.workspace.isTrusted) {
      return [
        new vscode.CodeLens(at, {
          title: '$(shield) Reward modules do not run in Restricted Mode: trust this workspace to score',
          command: 'workbench.trust.manage',
        }),
      ];
    }
    const s = this.session(document.uri);
    const target = s.state.rollouts ? basename(s.state.rollouts) : undefined;
    const lenses = [
      new vscode.CodeLens(at, {
        title: target ? `$(play) Score against ${target}` : '$(play) Score against rollouts…',
        command: 'searchAgent.scoreReward',
        arguments: [document.uri],
      }),
    ];
    const st = s.state;
    if (st.status === 'running') {
      const p = st.progress;
      const failed = failedSoFar(p?.errors);
      lenses.push(
        new vscode.CodeLens(at, {
          title: `$(sync~spin) scoring… ${p ? `${p.done.toLocaleString()}${p.total ? ` / ${p.total.toLocaleString()}` : ''}` : ''}${failed ? ` · ${failed}` : ''}`,
          command: 'searchAgent.openRewardLab',
          arguments: [document.uri],
        }),
      );
      lenses.push(
        new vscode.CodeLens(at, {
          title: '$(debug-stop) Cancel',
          command: 'searchAgent.cancelRewardScoring',
          arguments: [document.uri],
        }),
      );
    } else if (st.compileError) {
      lenses.push(
        new vscode.CodeLens(at, {
          title: `$(error) does not compile: line ${st.compileError.line}: ${st.compileError.message}`,
          command: 'searchAgent.openRewardLab',
          arguments: [document.uri],
        }),
      );
    } else if (st.report) {
      const r = st.report;
      const parts = [
        `mean ${num(r.mean)}${r.recordedMean !== null ? ` (recorded ${num(r.recordedMean)})` : ''}`,
        `agrees with recorded ${pct(r.agreement)}`,
        `zero-variance groups ${pct(r.frac_zero_std_groups)}`,
        `${r.errors} error${r.errors === 1 ? '' : 's'}`,
      ];
      lenses.push(
        new vscode.CodeLens(at, {
          title: `${r.errors ? '$(warning)' : '$(check)'} ${parts.join(' · ')}`,
          command: 'searchAgent.openRewardLab',
          arguments: [document.uri],
        }),
      );
    } else if (st.message) {
      lenses.push(
        new vscode.CodeLens(at, {
          title: `$(error) ${st.message.split('\n')[0]}`,
          command: 'searchAgent.openRewardLab',
          arguments: [document.uri],
        }),
      );
    }
    if (target)
      lenses.push(
        new vscode.CodeLens(at, {
          title: 'Change rollouts…',
          command: 'searchAgent.chooseRewardRollouts',
          arguments: [document.uri],
        }),
      );
    return lenses;
  }

  // --- choosing rollouts and scoring --------------------------------------------------------------------------

  private async choose(uri: vscode.Uri | undefined, thenScore: boolean): Promise<string | undefined> {
    const u = this.target(uri);
    if (!u) return undefined;
    const items = await rolloutChoices();
    const picked = await vscode.window.showQuickPick<Choice>(items, {
      title: `Score ${basename(u.fsPath)} against`,
      placeHolder: 'a rollout JSONL file or a run directory',
      matchOnDescription: true,
    });
    if (!picked) return undefined;
    let path = picked.path;
    if (picked.browse) {
      const chosen = await vscode.window.showOpenDialog({
        canSelectFiles: true,
        canSelectFolders: true,
        canSelectMany: false,
        openLabel: 'Score against this',
      });
      path = chosen?.[0]?.fsPath;
    }
    if (!path) return undefined;
    const s = this.session(u);
    s.state.rollouts = path;
    // A new choice takes a new set of rollouts (the files as they are now), with nothing to compare against yet.
    delete s.set;
    delete s.state.pinned;
    delete s.state.previous;
    s.setVersion++;
    await this.context.workspaceState.update(`rewardRollouts:${u.toString()}`, path);
    this.lensChanged.fire();
    if (thenScore) await this.score(u);
    return path;
  }

  private async score(uri?: vscode.Uri): Promise<void> {
    const u = this.target(uri);
    if (!u) return;
    if (!vscode.workspace.isTrusted) {
      void vscode.window
        .showWarningMessage(
          'Reward modules do not run in an untrusted workspace (Restricted Mode). Trust the workspace to score rewards.',
          'Manage Workspace Trust',
        )
        .then((a) => a && vscode.commands.executeCommand('workbench.trust.manage'));
      return;
    }
    const s = this.session(u);
    if (!s.state.rollouts) {
      await this.choose(u, true);
      return;
    }
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === u.toString());
    if (doc?.isDirty) await doc.save();
    this.openLab(u);
    this.start(s);
  }

  private start(s: Session): void {
    s.run?.cancel();
    const rollouts = s.state.rollouts!;
    const st = s.state;
    // "Before the edit": the last finished run, when it scored the same set as this one will.
    if (st.report && s.reportVersion === s.setVersion && s.set)
      st.previous = {
        mean: st.report.mean,
        frac_zero_std_groups: st.report.frac_zero_std_groups,
        agreement: st.report.agreement,
      };
    st.run++;
    st.status = 'running';
    st.progress = { done: 0, total: st.pinned?.count ?? null, errors: {} };
    delete st.compileError;
    delete st.message;
    const runNumber = st.run;
    if (!s.set) {
      void countRows(rollouts).then((total) => {
        if (st.run === runNumber && st.progress) st.progress.total = total;
      });
    }
    const cli = vscode.Uri.joinPath(this.context.extensionUri, 'dist', 'cli.js').fsPath;
    this.log.info(`scoring ${s.uri.fsPath} against ${rollouts}`);
    let lastPush = 0;
    const setVersion = s.setVersion;
    const run = new RewardRun(
      cli,
      s.uri.fsPath,
      rollouts,
      (done, errors) => {
        if (st.run !== runNumber) return;
        st.progress = { done, total: st.progress?.total ?? null, errors };
        if (Date.now() - lastPush > 200) {
          lastPush = Date.now();
          this.push(s);
        }
      },
      (line) => this.log.info(`[reward] ${line}`),
      s.set ? { set: s.set } : {},
    );
    s.run = run;
    this.push(s);
    void run.done.then((o) => {
      if (o.cancelled || st.run !== runNumber) return;
      s.run = undefined;
      st.finishedAt = new Date().toISOString();
      if (o.compileError) {
        st.status = 'failed';
        st.compileError = o.compileError;
        delete st.report;
      } else if (o.report) {
        st.status = 'done';
        st.report = o.report;
        s.reportVersion = setVersion;
        st.progress = { done: o.report.count, total: o.report.count, errors: o.report.errorsByKind ?? {} };
        if (!s.set && o.set && setVersion === s.setVersion) {
          s.set = o.set;
          st.pinned = { count: o.report.count, at: st.finishedAt };
        }
      } else {
        st.status = 'failed';
        st.message = o.message ?? 'scoring failed';
      }
      for (const m of o.malformed.slice(0, 20)) this.log.warn(`[reward] ${m}`);
      this.log.info(
        `scored ${s.uri.fsPath}: ${st.status}${st.report ? ` mean ${num(st.report.mean)}, ${st.report.errors} errors` : ''}`,
      );
      this.rebuildMarks();
      this.push(s);
      this.decorateAll();
    });
  }

  /** Stops the run in flight: its process (and the sandbox threads in it) is killed; the last numbers stay, dimmed. */
  private cancel(s: Session): void {
    const run = s.run;
    if (!run) return;
    run.cancel();
    s.run = undefined;
    s.state.status = 'cancelled';
    s.state.finishedAt = new Date().toISOString();
    this.log.info(`cancelled scoring ${s.uri.fsPath} (process ${run.pid ?? '?'} killed)`);
    this.push(s);
  }

  private onSave(document: vscode.TextDocument): void {
    if (!isRewardModule(document.uri) || !vscode.workspace.isTrusted) return;
    const s = this.sessions.get(document.uri.toString());
    if (!s?.state.rollouts || s.state.run === 0) return; // re-score only what was scored before
    clearTimeout(s.saveTimer);
    s.saveTimer = setTimeout(() => this.start(s), 300);
  }

  // --- the Reward Lab ------------------------------------------------------------------------------------------

  private openLab(uri?: vscode.Uri): void {
    const u = this.target(uri);
    if (!u) return;
    const s = this.session(u);
    if (s.lab) {
      s.lab.panel.reveal(vscode.ViewColumn.Beside, true);
      return;
    }
    const lab = openWebviewPanel<RewardLabContract>(
      this.context.extensionUri,
      {
        name: 'reward-lab',
        title: `Reward Lab: ${basename(u.fsPath)}`,
        viewColumn: vscode.ViewColumn.Beside,
        preserveFocus: true,
      },
      this.log,
    );
    s.lab = lab;
    lab.endpoint.handle('getState', () => this.viewState(s));
    lab.endpoint.handle('rescore', () => this.score(u));
    lab.endpoint.handle('cancel', () => this.cancel(s));
    lab.endpoint.handle('chooseRollouts', async () => {
      await this.choose(u, true);
    });
    lab.endpoint.handle('openLocation', ({ where }) => this.openLocation(where));
    lab.endpoint.onReady(() => lab.endpoint.emit('state', this.viewState(s)));
    lab.panel.onDidDispose(() => {
      s.lab = undefined;
    });
  }

  private viewState(s: Session): RewardLabState {
    return vscode.workspace.isTrusted ? s.state : { ...s.state, status: 'untrusted' };
  }

  private push(s: Session): void {
    this.lensChanged.fire();
    s.lab?.endpoint.emit('state', this.viewState(s));
  }

  private async openLocation(where: string): Promise<void> {
    const m = /^(.*?):(\d+)(?::(\d+))?$/.exec(where);
    if (!m) throw new Error(`not a file location: ${where}`);
    // A rollout (file.jsonl:line): its replay, which shows the reward and its parts beside the trajectory.
    if ((m[1]!.endsWith('.jsonl') || STEP_DIR.test(basename(m[1]!))) && m[3] === undefined) {
      await vscode.commands.executeCommand('searchAgent.replayRollout', m[1], Number(m[2]));
      return;
    }
    const line = Math.max(0, Number(m[2]) - 1);
    const col = Math.max(0, Number(m[3] ?? 1) - 1);
    const doc = await vscode.workspace.openTextDocument(vscode.Uri.file(m[1]!));
    const pos = new vscode.Position(line, col);
    await vscode.window.showTextDocument(doc, {
      viewColumn: vscode.ViewColumn.One,
      selection: new vscode.Range(pos, doc.lineAt(Math.min(line, doc.lineCount - 1)).range.end),
    });
  }

  // --- decorations on the lines that threw ----------------------------------------------------------------------

  /** The marks of every session's last report, by module file and line. */
  private rebuildMarks(): void {
    this.marks.clear();
    for (const s of this.sessions.values()) {
      for (const f of s.state.report?.failures ?? []) {
        if (!f.error.file || !f.error.line) continue;
        const byLine = this.marks.get(f.error.file) ?? new Map();
        const e = byLine.get(f.error.line) ?? { count: 0, message: f.error.message };
        e.count++;
        byLine.set(f.error.line, e);
        this.marks.set(f.error.file, byLine);
      }
    }
  }

  /** An edit drops the marks of the lines it touched and moves those below it with the text. */
  private onEdit(e: vscode.TextDocumentChangeEvent): void {
    const marks = this.marks.get(e.document.uri.fsPath);
    if (!marks?.size || !e.contentChanges.length) return;
    let current = marks;
    for (const c of e.contentChanges) {
      const first = c.range.start.line + 1;
      const last = c.range.end.line + 1;
      const delta = (c.text.match(/\n/g)?.length ?? 0) - (last - first);
      const next: Marks = new Map();
      for (const [line, m] of current) {
        if (line >= first && line <= last) continue;
        next.set(line > last ? line + delta : line, m);
      }
      current = next;
    }
    this.marks.set(e.document.uri.fsPath, current);
    this.decorateAll();
  }

  private decorateAll(): void {
    for (const editor of vscode.window.visibleTextEditors) {
      const byLine =
        this.marks.get(editor.document.uri.fsPath) ?? new Map<number, { count: number; message: string }>();
      editor.setDecorations(
        this.errorLines,
        [...byLine.entries()]
          .filter(([line]) => line >= 1 && line <= editor.document.lineCount)
          .map(([line, e]) => ({
            range: editor.document.lineAt(line - 1).range,
            hoverMessage: new vscode.MarkdownString().appendText(
              `${e.count} rollout${e.count === 1 ? '' : 's'} failed here: ${e.message}`,
            ),
            renderOptions: {
              after: { contentText: ` ✗ ${e.count} rollout${e.count === 1 ? '' : 's'}: ${e.message.slice(0, 120)}` },
            },
          })),
      );
    }
  }

  // --- New Reward Function ---------------------------------------------------------------------------------------

  private async scaffold(): Promise<void> {
    const folder = vscode.workspace.workspaceFolders?.[0];
    if (!folder) {
      void vscode.window.showWarningMessage('Open a folder first: the reward module is created in the workspace.');
      return;
    }
    const name = await vscode.window.showInputBox({
      title: 'New Reward Function',
      prompt: 'A name for the reward module (letters, digits, dashes)',
      value: 'my-reward',
      validateInput: (v) => (/^[a-z0-9][a-z0-9-]*$/i.test(v) ? undefined : 'letters, digits and dashes only'),
    });
    if (!name) return;
    // No typings are written: the extension's TypeScript server plugin gives every reward module the API's types.
    const dir = join(folder.uri.fsPath, 'rewards');
    await mkdir(dir, { recursive: true });
    const file = join(dir, `${name}.reward.ts`);
    const exists = await vscode.workspace.fs.stat(vscode.Uri.file(file)).then(
      () => true,
      () => false,
    );
    if (exists) {
      void vscode.window.showWarningMessage(`${vscode.workspace.asRelativePath(file)} already exists.`);
    } else {
      await writeFile(file, rewardTemplate(name));
    }
    await vscode.window.showTextDocument(vscode.Uri.file(file));
  }

  dispose(): void {
    for (const s of this.sessions.values()) {
      s.run?.cancel();
      clearTimeout(s.saveTimer);
      s.lab?.panel.dispose();
    }
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}

async function countRows(path: string): Promise<number | null> {
  try {
    const files = await rolloutFiles(path);
    let n = 0;
    for (const f of files) {
      if (await isStorePart(f)) {
        n += (await StoreStep.open(f)).count;
        continue;
      }
      if (!f.endsWith('.jsonl')) return null;
      const j = await JsonlFile.open(f);
      n += j.count;
      await j.close();
    }
    return n;
  } catch {
    return null;
  }
}
