/**
 * The training dashboard (one panel): live charts of metrics.jsonl for one run or several overlaid. The host only
 * follows files (src/core/host/metricsTail.ts) and sends appended lines; the webview (webview/dashboard) appends
 * them to its charts without re-rendering.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as vscode from 'vscode';
import { auditMetricRows, withoutTrainerSeries } from '../../core/audit/series';
import { AuditThread } from '../../core/audit/thread';
import { MetricsTail } from '../../core/host/metricsTail';
import { listRuns, readRun, rolloutFile } from '../../core/host/runs';
import type { DashboardContract, DashboardRun, DashboardSettings, MetricsRow } from '../../core/protocol/dashboard';
import { type OpenedWebview, openWebviewPanel } from '../webviewPanel';
import { runDirOf } from './runArg';
import { pickRun } from './runsView';
import type { TrainingController } from './trainingController';

/**
 * `searchAgent.dashboard.alarmThresholds`: per alarm, the share of a step's rollouts (0–1) at which the alarm lane marks
 * the step; `*` for the others. A value that is not a number in [0, 1] is ignored.
 */
export function dashboardSettings(): DashboardSettings {
  const raw =
    vscode.workspace.getConfiguration('searchAgent.dashboard').get<Record<string, unknown>>('alarmThresholds') ?? {};
  const alarmThresholds: Record<string, number> = {};
  for (const [k, v] of Object.entries(raw)) if (typeof v === 'number' && v >= 0 && v <= 1) alarmThresholds[k] = v;
  return { alarmThresholds };
}

interface Followed {
  dir: string;
  tail: MetricsTail;
  rows: MetricsRow[];
  /** The audit of its rollouts (drift, log-prob gap, leaks, alarms per step), as metrics rows. */
  auditRows: MetricsRow[];
}

export class Dashboard implements vscode.Disposable {
  private web: OpenedWebview<DashboardContract> | undefined;
  private followed: Followed[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly disposables: vscode.Disposable[] = [];
  /** The audits of the followed runs' rollouts, on a worker thread (a big run's audit is seconds of CPU). */
  private readonly audits = new AuditThread();

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly controller: TrainingController,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.disposables.push(
      vscode.commands.registerCommand('searchAgent.openDashboard', (arg?: unknown) => this.open(runDirOf(arg))),
      vscode.commands.registerCommand('searchAgent.addRunToDashboard', (arg?: unknown) => this.add(runDirOf(arg))),
      controller.onDidChange(() => void this.poll()),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration('searchAgent.dashboard')) this.web?.endpoint.emit('settings', dashboardSettings());
      }),
    );
  }

  /** Opens the dashboard on a run (default: the live run, else the newest). */
  async open(asked?: string): Promise<void> {
    const live = this.controller.live?.dir;
    const dir = asked ?? live ?? (await listRuns(this.controller.runsParents()))[0]?.dir;
    this.log.info(
      `dashboard: ${dir ?? 'no run'} (${asked ? 'the run asked for' : live ? 'no run asked for: the live run' : 'no run asked for: the newest run'})`,
    );
    if (!this.web) this.create();
    else this.web.panel.reveal(undefined, true);
    if (dir && !this.followed.some((f) => f.dir === dir)) {
      // Opening on a run shows that run; "Add Run" overlays others.
      this.unfollow(() => false);
      await this.follow(dir);
    }
    await this.sendRuns();
  }

  private create(): void {
    const web = openWebviewPanel<DashboardContract>(
      this.context.extensionUri,
      { name: 'dashboard', title: 'Search Agent: Training Dashboard', viewColumn: vscode.ViewColumn.Active },
      this.log,
    );
    this.web = web;
    web.endpoint.handle('getState', async () => ({
      runs: await this.runs(),
      metrics: this.followed.map((f) => ({ dir: f.dir, rows: f.rows })),
      audit: this.followed.map((f) => ({ dir: f.dir, rows: f.auditRows })),
      settings: dashboardSettings(),
    }));
    web.endpoint.handle('addRun', () => this.add());
    web.endpoint.handle('removeRun', async ({ dir }) => {
      this.unfollow((f) => f.dir !== dir);
      await this.sendRuns();
    });
    web.endpoint.handle('openStep', ({ dir, step }) => this.openStep(dir, step));
    web.endpoint.handle('openGroups', async ({ dir, step }) => {
      const at = await this.stepFile(dir, step);
      this.log.info(`dashboard: the groups of step ${step} of ${dir}: ${at ? at.file : 'no rollouts'}`);
      if (at) await vscode.commands.executeCommand('searchAgent.openGroups', at.file, at.step);
    });
    web.panel.onDidDispose(() => {
      this.web = undefined;
      this.sentRuns = '';
      this.unfollow(() => false);
      clearInterval(this.timer);
      this.timer = undefined;
    });
    this.timer = setInterval(() => void this.poll(), 1_000);
  }

  private async follow(dir: string): Promise<void> {
    const f: Followed = { dir, tail: new MetricsTail(join(dir, 'metrics.jsonl')), rows: [], auditRows: [] };
    this.followed.push(f);
    const r = await f.tail.read();
    f.rows.push(...r.rows);
    for (const m of r.malformed)
      this.log.warn(`${join(dir, 'metrics.jsonl')}:${m.line}: skipped a malformed line (${m.message})`);
    this.web?.endpoint.emit('metrics', { dir, rows: f.rows, reset: true });
    // The audit's series follow when the thread has them (a big run's first audit takes a while): not awaited.
    void this.audit(f);
  }

  /** Keeps the followed runs that `keep` says; the audit thread forgets the others (a run followed again is audited afresh). */
  private unfollow(keep: (f: Followed) => boolean): void {
    for (const f of this.followed) if (!keep(f)) this.audits.forget(f.dir);
    this.followed = this.followed.filter(keep);
  }

  /** Audits the run's new or changed rollouts files and sends the per-step series when it changed. */
  private async audit(f: Followed): Promise<void> {
    try {
      const steps = await this.audits.update(f.dir);
      if (!steps || !this.followed.includes(f)) return;
      f.auditRows = withoutTrainerSeries(auditMetricRows(steps), f.rows);
      this.web?.endpoint.emit('audit', { dir: f.dir, rows: f.auditRows });
    } catch (e) {
      this.log.warn(`audit of ${f.dir}'s rollouts: ${(e as Error).message}`);
    }
  }

  private async add(dir?: string): Promise<void> {
    if (!dir) {
      const shown = new Set(this.followed.map((f) => f.dir));
      const runs = (await listRuns(this.controller.runsParents())).filter((r) => !shown.has(r.dir));
      if (!runs.length) {
        void vscode.window.showInformationMessage('Search Agent: no other run to overlay.');
        return;
      }
      dir = (await pickRun(runs, 'Overlay which run?'))?.dir;
    }
    if (!dir) return;
    if (!this.web) return this.open(dir);
    if (!this.followed.some((f) => f.dir === dir)) await this.follow(dir);
    await this.sendRuns();
  }

  private async runs(): Promise<DashboardRun[]> {
    const out: DashboardRun[] = [];
    for (const f of this.followed) {
      const r = await readRun(f.dir);
      const p = r?.progress;
      out.push({
        id: r?.id ?? f.dir.split(/[\\/]/).pop() ?? f.dir,
        dir: f.dir,
        state: r?.state ?? 'interrupted',
        step: r?.step ?? 0,
        total: r?.total,
        ...(r?.stages ? { stages: r.stages } : {}),
        ...(p ? { phase: p.phase, ...(p.warmup ? { warmup: p.warmup } : {}) } : {}),
      });
    }
    return out;
  }

  /** The runs' headers (state, step, warm-up), sent when they changed: a run stopping changes its state without a new metrics line. */
  private sentRuns = '';
  private async sendRuns(): Promise<void> {
    const runs = await this.runs();
    const key = JSON.stringify(runs);
    if (key === this.sentRuns) return;
    this.sentRuns = key;
    this.web?.endpoint.emit('runs', { runs });
  }

  private polling = false;
  private async poll(): Promise<void> {
    if (!this.web || this.polling) return;
    this.polling = true;
    try {
      for (const f of this.followed) {
        const r = await f.tail.read();
        if (r.reset) f.rows = [];
        for (const m of r.malformed) this.log.warn(`${f.tail.file}:${m.line}: skipped a malformed line (${m.message})`);
        await this.audit(f);
        if (!r.rows.length && !r.reset) continue;
        f.rows.push(...r.rows);
        this.web.endpoint.emit('metrics', { dir: f.dir, rows: r.reset ? f.rows : r.rows, reset: r.reset });
      }
      await this.sendRuns();
    } finally {
      this.polling = false;
    }
  }

  /** The rollouts of a step: the nearest step with a rollouts file at or before it (the inspector, when present). */
  private async openStep(dir: string, step: number): Promise<void> {
    const at = await this.stepFile(dir, step);
    this.log.info(`dashboard: the rollouts of step ${step} of ${dir}: ${at ? at.file : 'none'}`);
    if (!at) return;
    const { file } = at;
    const commands = await vscode.commands.getCommands(true);
    if (commands.includes('searchAgent.openInspector'))
      await vscode.commands.executeCommand('searchAgent.openInspector', vscode.Uri.file(file));
    else
      await vscode.window.showTextDocument(vscode.Uri.file(file), {
        viewColumn: vscode.ViewColumn.Beside,
        preview: true,
      });
  }

  /** The rollouts file of the nearest step with one at or before `step` (else the first); undefined (and said) when none. */
  private async stepFile(dir: string, step: number): Promise<{ file: string; step: number } | undefined> {
    const run = await readRun(dir);
    const steps = run?.rolloutSteps ?? [];
    const best = steps.filter((s) => s <= step).pop() ?? steps[0];
    if (best === undefined) {
      void vscode.window.showInformationMessage(`Search Agent: no rollouts saved in ${dir} yet.`);
      return undefined;
    }
    const file = rolloutFile(dir, best);
    return existsSync(file) ? { file, step: best } : undefined;
  }

  dispose(): void {
    clearInterval(this.timer);
    this.web?.panel.dispose();
    void this.audits.dispose();
    for (const d of this.disposables) d.dispose();
  }
}
