/**
 * The rollout inspector: a custom editor (`searchAgent.rolloutInspector`, priority "option": plain JSONL editing
 * stays the default) for rollout JSONL files, and the same view in a panel for a run directory. Each view owns a
 * worker thread (src/core/inspect/worker.ts) holding the store and the table; the webview asks for pages of the
 * current view only, so neither the extension host nor the webview holds the file.
 */
import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { Worker } from 'node:worker_threads';
import * as vscode from 'vscode';
import { rolloutFile } from '../../core/host/runs';
import { detectSource } from '../../core/importers';
import { isForeignKind } from '../../core/importers/foreign';
import type { EngineMessage, EngineRequest, ForeignOpenOptions } from '../../core/inspect/engine';
import type {
  InspectorContract,
  InspectorQuery,
  InspectorState,
  InspectorStatus,
  RowFacts,
} from '../../core/protocol/rollouts';
import type { RolloutRow } from '../../core/store/rollouts';
import { auditTokenizerSetting, importanceSettings } from '../auditSettings';
import { trajectoryReadOptions } from '../trajectorySettings';
import { connectWebview, setWebviewHtml, webviewOptions } from '../webviewPanel';
import type { ReplayPanel } from './replayPanel';

export const INSPECTOR_VIEW_TYPE = 'searchAgent.rolloutInspector';

/** One inspector view over one source. */
class InspectorSession implements vscode.Disposable {
  private readonly worker: Worker;
  private status: InspectorStatus;
  private preview: RowFacts[] | undefined;
  private query: InspectorQuery = { filter: '', search: '' };
  private seq = 0;
  private scrollTop = 0;
  private selected: number[] = [];
  private nextReq = 1;
  private readonly pending = new Map<number, (m: EngineMessage) => void>();
  private readonly endpoint;
  private disposed = false;
  onDispose: (() => void) | undefined;
  /** Told once, when another engine's dump has been converted and analysed: what was found. */
  onImported: ((found: NonNullable<InspectorStatus['imported']>) => void) | undefined;

  constructor(
    readonly path: string,
    panel: vscode.WebviewPanel,
    extensionUri: vscode.Uri,
    private readonly replay: ReplayPanel,
    private readonly log: vscode.LogOutputChannel,
    open: { foreign?: ForeignOpenOptions; tokenizer?: string } = {},
  ) {
    this.status = {
      source: path,
      files: 0,
      total: 0,
      analysed: 0,
      view: 0,
      seq: 0,
      busy: true,
      following: true,
      malformed: 0,
    };
    this.worker = new Worker(join(extensionUri.fsPath, 'dist', 'inspector-worker.js'));
    this.worker.on('message', (m: EngineMessage) => this.onWorker(m));
    this.worker.on('error', (e) => {
      this.log.error(`inspector worker for ${path}: ${e.stack ?? e.message}`);
      this.status = { ...this.status, busy: false, error: `the inspector's worker failed: ${e.message}` };
      this.endpoint.emit('status', this.status);
    });
    this.endpoint = connectWebview<InspectorContract>(panel.webview, 'rollouts', log);
    const e = this.endpoint;
    e.handle(
      'getState',
      (): InspectorState => ({
        query: this.query,
        seq: this.seq,
        status: this.status,
        preview: this.preview,
        scrollTop: this.scrollTop,
        selected: this.selected,
      }),
    );
    e.handle('query', ({ seq, ...query }) => {
      this.seq = seq;
      this.query = { filter: query.filter, search: query.search, sort: query.sort };
      this.send({ t: 'query', seq, query: this.query });
    });
    e.handle('page', async ({ from, count }) => {
      const m = await this.request<Extract<EngineMessage, { t: 'page' }>>({ t: 'page', req: 0, from, count });
      return { seq: m.seq, from: m.from, rows: m.rows };
    });
    e.handle('openRow', ({ index }) => this.openRow([index]));
    e.handle('compare', ({ a, b }) => this.openRow([a, b]));
    e.handle('remember', ({ scrollTop, selected }) => {
      this.scrollTop = scrollTop;
      this.selected = selected;
    });
    panel.onDidDispose(() => this.dispose());
    setWebviewHtml(panel.webview, extensionUri, 'rollouts', panel.title);
    const tokenizer = open.tokenizer ?? auditTokenizerSetting(path);
    this.send({
      t: 'open',
      path,
      follow: true,
      read: trajectoryReadOptions(vscode.Uri.file(path), log),
      importance: importanceSettings(path),
      ...(tokenizer ? { tokenizer } : {}),
      ...(open.foreign ? { foreign: open.foreign } : {}),
    });
  }

  private send(m: EngineRequest): void {
    if (!this.disposed) this.worker.postMessage(m);
  }

  private request<M extends EngineMessage>(m: Extract<EngineRequest, { req: number }>): Promise<M> {
    const req = this.nextReq++;
    return new Promise((resolve) => {
      this.pending.set(req, resolve as (m: EngineMessage) => void);
      this.send({ ...m, req });
    });
  }

  private onWorker(m: EngineMessage): void {
    switch (m.t) {
      case 'status':
        this.status = m.status;
        if (m.status.error) this.log.warn(`inspector: ${m.status.error}`);
        if (
          m.status.imported?.ready &&
          this.onImported &&
          !m.status.busy &&
          !m.status.indexing &&
          m.status.analysed === m.status.total &&
          m.status.total >= m.status.imported.rollouts
        ) {
          const done = this.onImported;
          this.onImported = undefined;
          done(m.status.imported);
        }
        this.endpoint.emit('status', m.status);
        return;
      case 'preview':
        this.preview = m.rows;
        this.endpoint.emit('preview', { rows: m.rows });
        return;
      case 'page':
      case 'row': {
        const done = this.pending.get(m.req);
        this.pending.delete(m.req);
        done?.(m);
      }
    }
  }

  async readRow(index: number): Promise<{ row: RolloutRow | null; raw?: string }> {
    const m = await this.request<Extract<EngineMessage, { t: 'row' }>>({ t: 'row', req: 0, index });
    return { row: m.row, raw: m.raw };
  }

  private async openRow(indices: number[]): Promise<void> {
    const rows = await Promise.all(indices.map((i) => this.readRow(i)));
    await this.replay.show(
      this.path,
      rows.map((r, k) => ({ index: indices[k]!, row: r.row, raw: r.raw })),
    );
  }

  dispose(): void {
    if (this.disposed) return;
    this.send({ t: 'close' });
    this.disposed = true;
    setTimeout(() => void this.worker.terminate(), 2_000).unref();
    this.endpoint.dispose();
    this.onDispose?.();
  }
}

class RolloutDocument implements vscode.CustomDocument {
  constructor(readonly uri: vscode.Uri) {}
  dispose(): void {}
}

export class Inspector implements vscode.CustomReadonlyEditorProvider<RolloutDocument>, vscode.Disposable {
  private readonly disposables: vscode.Disposable[] = [];
  private readonly sessions = new Set<InspectorSession>();

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly replay: ReplayPanel,
    private readonly log: vscode.LogOutputChannel,
    private readonly runsParents: () => string[],
  ) {
    this.disposables.push(
      vscode.window.registerCustomEditorProvider(INSPECTOR_VIEW_TYPE, this, {
        supportsMultipleEditorsPerDocument: true,
        webviewOptions: { retainContextWhenHidden: false },
      }),
      vscode.commands.registerCommand(
        'searchAgent.openInspector',
        (arg?: vscode.Uri | { dir?: string; run?: { dir: string }; step?: number }) => this.open(arg),
      ),
    );
  }

  openCustomDocument(uri: vscode.Uri): RolloutDocument {
    return new RolloutDocument(uri);
  }

  resolveCustomEditor(doc: RolloutDocument, panel: vscode.WebviewPanel): void {
    panel.webview.options = webviewOptions(this.context.extensionUri);
    // A JSON-lines dump of another engine (a prime-rl rank file, a NeMo-RL train_data file) is converted on the way.
    this.track(
      new InspectorSession(doc.uri.fsPath, panel, this.context.extensionUri, this.replay, this.log, {
        foreign: this.foreignOptions(doc.uri.fsPath),
      }),
    );
  }

  /** How the inspector opens another engine's dump: converted into the extension's storage; no Python unless trusted. */
  foreignOptions(path: string, python?: string): ForeignOpenOptions {
    const trust = vscode.workspace.getConfiguration('searchAgent.import').get<boolean>('trustPickles') === true;
    return {
      cacheDir: join(
        this.context.globalStorageUri.fsPath,
        'imports',
        createHash('sha256').update(path).digest('hex').slice(0, 16),
      ),
      allowPython: vscode.workspace.isTrusted,
      ...(trust && vscode.workspace.isTrusted ? { trustPickle: true } : {}),
      ...(python ? { python } : {}),
    };
  }

  /**
   * Another engine's dump (or any run folder) in a panel: `foreign` as `foreignOptions` gives it, `tokenizer` the
   * one the user chose; `onImported` is told what was found once it is converted.
   */
  openFolder(
    path: string,
    open: {
      foreign?: ForeignOpenOptions;
      tokenizer?: string;
      onImported?: (found: NonNullable<InspectorStatus['imported']>) => void;
    },
  ): void {
    const panel = vscode.window.createWebviewPanel(
      'searchAgent.rollouts',
      `Rollouts: ${basename(path)}`,
      vscode.ViewColumn.Active,
      webviewOptions(this.context.extensionUri),
    );
    panel.iconPath = vscode.Uri.joinPath(this.context.extensionUri, 'media', 'icon.svg');
    const session = new InspectorSession(path, panel, this.context.extensionUri, this.replay, this.log, open);
    session.onImported = open.onImported;
    this.track(session);
  }

  private track(s: InspectorSession): void {
    this.sessions.add(s);
    s.onDispose = () => this.sessions.delete(s);
  }

  /** A rollout file (in the custom editor), a run directory or a folder of JSONL files (in a panel). */
  async open(arg?: vscode.Uri | { dir?: string; run?: { dir: string }; step?: number }): Promise<void> {
    let path = arg instanceof vscode.Uri ? arg.fsPath : (arg?.run?.dir ?? arg?.dir);
    // A step of the Runs view: its rollouts file.
    if (!(arg instanceof vscode.Uri) && arg?.run && typeof arg.step === 'number')
      path = rolloutFile(arg.run.dir, arg.step);
    let how = 'asked for';
    if (!path) {
      const active = vscode.window.activeTextEditor?.document.uri;
      if (active?.fsPath.endsWith('.jsonl')) [path, how] = [active.fsPath, 'none asked for: the active editor'];
    }
    if (!path) {
      this.log.info('inspector: no rollouts asked for: asking the user to pick a file or run directory');
      how = 'picked';
      const picked = await vscode.window.showOpenDialog({
        canSelectFiles: true,
        canSelectFolders: true,
        canSelectMany: false,
        title: 'Open rollouts (a JSONL file or a run directory)',
        filters: { 'Rollouts (JSONL)': ['jsonl'] },
        defaultUri: this.runsParents()[0] ? vscode.Uri.file(this.runsParents()[0]!) : undefined,
      });
      path = picked?.[0]?.fsPath;
    }
    if (!path) return;
    // a token-store step's rollouts.parquet: the step (its directory)
    if (basename(path) === 'rollouts.parquet') path = dirname(path);
    this.log.info(`inspector: ${path} (${how})`);
    let dir = false;
    try {
      dir = statSync(path).isDirectory();
    } catch (e) {
      void vscode.window.showErrorMessage(`Search Agent: cannot open ${path}: ${(e as Error).message}`);
      return;
    }
    // Another engine's dump: "Open Run Folder…" (its tokenizer, the trainer's Python, what was found).
    const kind = how === 'picked' || dir ? await detectSource(path).catch(() => undefined) : undefined;
    if (kind && isForeignKind(kind)) {
      await vscode.commands.executeCommand('searchAgent.openRunFolder', vscode.Uri.file(path));
      return;
    }
    if (!dir) {
      await vscode.commands.executeCommand('vscode.openWith', vscode.Uri.file(path), INSPECTOR_VIEW_TYPE);
      return;
    }
    this.openFolder(path, {});
  }

  dispose(): void {
    for (const s of this.sessions) s.dispose();
    for (const d of this.disposables) d.dispose();
  }
}
