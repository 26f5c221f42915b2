/**
 * Training from the editor: Start / Stop / Resume Training, Start / Stop Retriever, on the core run host. The VS Code
 * parts only: pickers, the progress notification, the status bar, output channels, messages with actions. The
 * run directory is the record; the Runs view and the dashboard read it, so a run that outlived a window reload is
 * re-attached from its run.json.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as vscode from 'vscode';
import {
  EnvServerError,
  type EnvServerProcess,
  envServerScript,
  killTree,
  startEnvServerProcess,
} from '../../core/host/processes';
import { envServerArgs, loadRunConfig, RunConfigError, runNeeds } from '../../core/host/runConfig';
import { RunHost, type RunOutcome } from '../../core/host/runHost';
import { listRuns, progressOf, type RunInfo, readRun } from '../../core/host/runs';
import { MemoryPlanError } from '../../core/plan/check';
import { noPythonMessage, runPythonNote, type TrainerNeeds } from '../../core/python';
import type { RunEvent } from '../../core/run/format';
import { nodeCommand } from '../node';
import { DoctorReport, findTrainerPython, SETUP_COMMAND, setUpTrainerEnvironment } from './python';
import { runDirOf } from './runArg';

export interface LiveRunState {
  id: string;
  dir: string;
  step: number;
  total: number;
  phase?: string;
  /** During the warm start: its step, steps and loss (from the trainer's progress events). */
  warmup?: { step: number; steps: number; loss?: number };
  reward?: number;
  valEm?: number;
  /** Attached after a reload: no process handle, only the pid in run.json. */
  attached: boolean;
  /** Stop Training was asked: the trainer finishes its step, checkpoints and stops (seconds, on a big step). */
  stopping?: boolean;
}

type Event = RunEvent & Record<string, unknown>;

const fmt = (v: number | undefined) => (v === undefined ? '–' : v.toFixed(3));

/**
 * "warm-up 150/300 · loss 2.314" during the warm start, else "12/120 · reward 0.250 (last step)" — the last step's
 * batch reward, labelled (the Runs view shows a mean over the last steps, labelled too); "stopping… at step 12/120"
 * from the moment Stop Training is asked until the trainer has checkpointed.
 */
export function liveSummary(s: LiveRunState): string {
  if (s.stopping) return `stopping… at step ${s.step}/${s.total || '?'}`;
  if (s.phase === 'warmup')
    return s.warmup ? `warm-up ${s.warmup.step}/${s.warmup.steps} · loss ${fmt(s.warmup.loss)}` : 'warm-up';
  return `${s.step}/${s.total || '?'} · reward ${fmt(s.reward)} (last step)`;
}

/** The trainer channel's line for a step's metrics: "step 12/120 · reward 0.250 · EM 0.125 · 3 searches … · 4.2 s". */
export function stepLine(step: number, total: number, m: Record<string, number>, seconds?: number): string {
  const n = (k: string, label: string, d = 3) =>
    typeof m[k] === 'number' && Number.isFinite(m[k]) ? [`${label} ${m[k].toFixed(d)}`] : [];
  return [
    `step ${step}/${total || '?'}`,
    ...n('critic/score/mean', 'reward'),
    ...n('reward/em/mean', 'EM'),
    ...n('env/number_of_valid_search', 'searches', 2),
    ...n('response_length/mean', 'length', 1),
    ...n('reward/frac_zero_std_groups', 'zero-variance groups', 2),
    ...n('actor/ppo_kl', 'KL', 4),
    ...n('actor/entropy', 'entropy'),
    ...(seconds !== undefined && Number.isFinite(seconds) ? [`${seconds.toFixed(1)} s`] : []),
  ].join(' · ');
}

export class TrainingController implements vscode.Disposable {
  private host: RunHost | undefined;
  private attached: RunInfo | undefined;
  private attachTimer: NodeJS.Timeout | undefined;
  private retriever: EnvServerProcess | undefined;
  private state: LiveRunState | undefined;
  private readonly trainerLog: vscode.LogOutputChannel;
  private readonly serverLog: vscode.LogOutputChannel;
  private readonly status: vscode.StatusBarItem;
  private readonly changed = new vscode.EventEmitter<LiveRunState | undefined>();
  /** Fires on every step, phase and end of the live run (the Runs view and dashboard refresh on it). */
  readonly onDidChange = this.changed.event;
  private readonly disposables: vscode.Disposable[] = [];
  /** When the live run's last step's metrics came (the per-step log line says how long the step took). */
  private lastStepAt: number | undefined;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.trainerLog = vscode.window.createOutputChannel('Search Agent: Trainer', { log: true });
    this.serverLog = vscode.window.createOutputChannel('Search Agent: Env Server', { log: true });
    this.status = vscode.window.createStatusBarItem('searchAgent.training', vscode.StatusBarAlignment.Left, 9);
    this.status.name = 'Search Agent Training';
    this.status.command = 'searchAgent.openDashboard';
    const envLog = vscode.window.createOutputChannel('Search Agent: Trainer Environment', { log: true });
    const doctor = new DoctorReport(context);
    this.disposables.push(
      envLog,
      vscode.workspace.registerTextDocumentContentProvider(DoctorReport.scheme, doctor),
      vscode.commands.registerCommand('searchAgent.setUpTrainerEnvironment', () =>
        setUpTrainerEnvironment(context, envLog),
      ),
      vscode.commands.registerCommand('searchAgent.checkTrainerEnvironment', () => doctor.show()),
      this.trainerLog,
      this.serverLog,
      this.status,
      this.changed,
      vscode.commands.registerCommand('searchAgent.startTraining', (uri?: vscode.Uri) => this.start(uri)),
      vscode.commands.registerCommand('searchAgent.stopTraining', () => this.stop()),
      vscode.commands.registerCommand('searchAgent.resumeTraining', (arg?: unknown) => this.resume(runDirOf(arg))),
      vscode.commands.registerCommand('searchAgent.startRetriever', (uri?: vscode.Uri) => this.startRetriever(uri)),
      vscode.commands.registerCommand('searchAgent.stopRetriever', () => this.stopRetriever()),
      vscode.commands.registerCommand('searchAgent.showTrainingLogs', () => this.trainerLog.show(true)),
    );
    void this.reattach();
  }

  get live(): LiveRunState | undefined {
    return this.state;
  }

  /** Where runs go: `searchAgent.runsDirectory` (relative to the first workspace folder), default `runs`. */
  runsParents(): string[] {
    const setting = vscode.workspace.getConfiguration('searchAgent').get<string>('runsDirectory') || 'runs';
    return (vscode.workspace.workspaceFolders ?? []).map((f) =>
      setting.startsWith('/') ? setting : join(f.uri.fsPath, setting),
    );
  }

  private trusted(action: string): boolean {
    if (vscode.workspace.isTrusted) return true;
    void vscode.window
      .showWarningMessage(
        `Search Agent: ${action} is disabled in an untrusted workspace: it would run programs (Python, Node) named by this workspace's settings and files. Trust the workspace to train here.`,
        'Manage Workspace Trust',
      )
      .then((b) => {
        if (b) void vscode.commands.executeCommand('workbench.trust.manage');
      });
    return false;
  }

  private busy(): boolean {
    if (!this.host && !this.attached) return false;
    void vscode.window
      .showWarningMessage(`Search Agent: run ${this.state?.id} is still running. Stop it first.`, 'Stop Training')
      .then((b) => {
        if (b) void this.stop();
      });
    return true;
  }

  private async pickConfig(uri?: vscode.Uri): Promise<vscode.Uri | undefined> {
    if (uri?.fsPath.endsWith('.run.json')) return uri;
    const active = vscode.window.activeTextEditor?.document.uri;
    if (active?.fsPath.endsWith('.run.json')) return active;
    const found = await vscode.workspace.findFiles('**/*.run.json', '**/{node_modules,runs,.git}/**', 200);
    if (!found.length) {
      const b = await vscode.window.showInformationMessage(
        'Search Agent: no run config (*.run.json) in this workspace.',
        'New Training Run…',
      );
      if (b) await vscode.commands.executeCommand('searchAgent.newTrainingRun');
      return undefined;
    }
    if (found.length === 1) return found[0];
    const pick = await vscode.window.showQuickPick(
      found.map((u) => ({ label: vscode.workspace.asRelativePath(u), uri: u })),
      { title: 'Start Training: which run config?', placeHolder: 'a *.run.json' },
    );
    return pick?.uri;
  }

  /**
   * The trainer's Python for a run that needs `needs` (a resumed run's own Python first: `runPython`, run.json's
   * `python`); when none is usable, an error that offers to set one up.
   */
  private async python(needs: TrainerNeeds, runPython?: string): Promise<string | undefined> {
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    const set = vscode.workspace.getConfiguration('searchAgent', folder).inspect<string>('pythonPath');
    const scopes = { user: set?.globalValue, workspace: set?.workspaceValue, folder: set?.workspaceFolderValue };
    this.log.info(
      `searchAgent.pythonPath: ${
        Object.entries(scopes)
          .filter(([, v]) => v)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ') || 'not set'
      }`,
    );
    const search = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: 'Search Agent: looking for a Python with torch' },
      () => findTrainerPython(this.context, folder, needs, runPython),
    );
    for (const p of search.tried)
      this.log.info(
        `python candidate ${p.executable}: ${p.ok ? `torch ${p.torch}${p.cuda ? ' (CUDA)' : ''}` : p.error}`,
      );
    if (search.found) {
      const note = runPythonNote(search, runPython);
      if (note) this.log.info(note);
      return search.found.executable;
    }
    const message = noPythonMessage(
      search,
      needs,
      'Set up a trainer environment (a virtual environment with the pinned torch, transformers and peft), or set searchAgent.pythonPath to a Python that has them.',
    );
    this.log.warn(message);
    const b = await vscode.window.showErrorMessage(
      `Search Agent: ${message}`,
      'Set Up Trainer Environment',
      'Open Settings',
      'Show Logs',
    );
    if (b === 'Set Up Trainer Environment') void vscode.commands.executeCommand(SETUP_COMMAND);
    if (b === 'Open Settings')
      void vscode.commands.executeCommand('workbench.action.openSettings', 'searchAgent.pythonPath');
    if (b === 'Show Logs') this.log.show(true);
    return undefined;
  }

  private serverLauncher() {
    const { file, env } = nodeCommand();
    return {
      node: file,
      args: [join(this.context.extensionUri.fsPath, 'dist', 'server.js')],
      env: env.ELECTRON_RUN_AS_NODE ? { ELECTRON_RUN_AS_NODE: '1' } : undefined,
    };
  }

  async start(uri?: vscode.Uri): Promise<RunOutcome | undefined> {
    if (!this.trusted('Start Training') || this.busy()) return undefined;
    const config = await this.pickConfig(uri);
    if (!config) return undefined;
    return this.launch({ config: config.fsPath });
  }

  async resume(runDir?: string): Promise<RunOutcome | undefined> {
    if (!this.trusted('Resume Training') || this.busy()) return undefined;
    let dir = runDir;
    if (!dir) {
      const runs = (await listRuns(this.runsParents())).filter((r) => r.state !== 'running' && r.state !== 'finished');
      if (!runs.length) {
        void vscode.window.showInformationMessage('Search Agent: no stopped, failed or interrupted run to resume.');
        return undefined;
      }
      const pick = await vscode.window.showQuickPick(
        runs.map((r) => ({
          label: r.id,
          description: `${r.state} at step ${r.step}${r.total ? `/${r.total}` : ''}`,
          detail: r.error,
          dir: r.dir,
        })),
        { title: 'Resume Training: which run?' },
      );
      dir = pick?.dir;
    }
    if (!dir) return undefined;
    return this.launch({ runDir: dir, resume: true });
  }

  private async launch(what: {
    config?: string;
    runDir?: string;
    resume?: boolean;
    force?: boolean;
  }): Promise<RunOutcome | undefined> {
    const runPython = what.resume && what.runDir ? (await readRun(what.runDir))?.python : undefined;
    const python = await this.python(await runNeeds(what), runPython);
    if (!python) return undefined;
    const parents = this.runsParents();
    let host: RunHost;
    try {
      host = await RunHost.start({
        ...what,
        python,
        verlPython: vscode.workspace.getConfiguration('searchAgent').get<string>('verlPythonPath') || undefined,
        runsParent: parents[0],
        port: vscode.workspace.getConfiguration('searchAgent').get<number>('serverPort') ?? 0,
        serverLauncher: this.serverLauncher(),
        onEvent: (e) => this.onEvent(e as Event),
        onTrainerLog: (l) => this.trainerLog.info(l),
        onServerLog: (l) => this.serverLog.info(l),
        onNote: (note) => {
          this.trainerLog.warn(note);
          void vscode.window.showWarningMessage(`Training run: ${note}`);
        },
        onMemoryCheck: (line) => this.log.info(line),
      });
    } catch (e) {
      if (e instanceof MemoryPlanError) {
        // the memory plan says it does not fit: the user decides (the plan may be wrong; `search-agent-studio plan` shows each part)
        this.log.warn(e.message);
        const b = await vscode.window.showWarningMessage(`Search Agent: ${e.message}`, { modal: true }, 'Start Anyway');
        return b === 'Start Anyway' ? this.launch({ ...what, force: true }) : undefined;
      }
      return this.startFailed(e as Error, what.config);
    }
    this.host = host;
    this.lastStepAt = undefined;
    this.state = { id: host.id, dir: host.runDir, step: 0, total: 0, attached: false };
    this.log.info(
      `run ${host.id}: env server ${host.server.url} (pid ${host.server.child.pid}), trainer pid ${host.trainer.pid}, Python ${python}, ${host.runDir}`,
    );
    this.trainerLog.info(`run ${host.id} started in ${host.runDir}`);
    void vscode.commands.executeCommand('setContext', 'searchAgent.training', true);
    this.render();
    void vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Search Agent: training ${host.id}`, cancellable: true },
      async (progress, token) => {
        token.onCancellationRequested(() => void this.stop());
        let reported = 0;
        const sub = this.onDidChange((s) => {
          if (!s) return;
          if (s.stopping)
            return progress.report({ message: `stopping… (finishing step ${s.step + 1}, then a checkpoint)` });
          if (s.phase === 'warmup')
            return progress.report({ message: `${liveSummary(s)} (supervised warm start, before step 1)` });
          if (!s.total) return;
          const pct = (100 * s.step) / s.total;
          progress.report({
            increment: pct - reported,
            message: `step ${s.step}/${s.total} ${s.phase ?? ''} · reward ${fmt(s.reward)} · held-out EM ${fmt(s.valEm)}`,
          });
          reported = pct;
        });
        try {
          await host.done;
        } finally {
          sub.dispose();
        }
      },
    );
    const outcome = await host.done;
    this.host = undefined;
    this.state = undefined;
    void vscode.commands.executeCommand('setContext', 'searchAgent.training', false);
    this.render();
    this.changed.fire(undefined);
    void this.report(outcome);
    return outcome;
  }

  private async startFailed(e: Error, config?: string): Promise<undefined> {
    this.log.error(`start failed: ${e.message}`);
    if (e instanceof RunConfigError) {
      const b = await vscode.window.showErrorMessage(
        `Search Agent: the run config has problems — ${e.problems.join('; ')}`,
        'Open Config',
      );
      if (b && config) await vscode.window.showTextDocument(vscode.Uri.file(config));
    } else if (e instanceof EnvServerError) {
      this.serverLog.error(e.stderr);
      const b = await vscode.window.showErrorMessage(`Search Agent: ${e.message}`, 'Show Server Log', 'Open Settings');
      if (b === 'Show Server Log') this.serverLog.show(true);
      if (b === 'Open Settings')
        void vscode.commands.executeCommand('workbench.action.openSettings', 'searchAgent.serverPort');
    } else {
      void vscode.window.showErrorMessage(`Search Agent: could not start training: ${e.message}`);
    }
    return undefined;
  }

  private async report(o: RunOutcome): Promise<void> {
    const id = o.runDir.split(/[\\/]/).pop();
    if (o.status === 'failed') {
      const lines = (o.error?.traceback ?? o.error?.message ?? '').trimEnd().split('\n').slice(-4).join(' ⏎ ');
      const b = await vscode.window.showErrorMessage(
        `Search Agent: run ${id} failed at step ${o.step}: ${o.error?.message ?? ''}${lines && lines !== o.error?.message ? ` — ${lines}` : ''}`,
        'Open Log',
        'Resume',
      );
      if (b === 'Open Log') await this.openLog(o.runDir);
      if (b === 'Resume') await this.resume(o.runDir);
    } else if (o.status === 'stopped') {
      const b = await vscode.window.showInformationMessage(
        `Search Agent: run ${id} stopped at step ${o.step} (checkpointed).`,
        'Resume',
        'Open Dashboard',
      );
      if (b === 'Resume') await this.resume(o.runDir);
      if (b === 'Open Dashboard') void vscode.commands.executeCommand('searchAgent.openDashboard', { dir: o.runDir });
    } else {
      const info = await readRun(o.runDir);
      const b = await vscode.window.showInformationMessage(
        `Search Agent: run ${id} finished (${o.step} steps${info?.last?.valEm !== undefined ? `, held-out EM ${fmt(info.last.valEm)}` : ''}).`,
        'Open Dashboard',
      );
      if (b) void vscode.commands.executeCommand('searchAgent.openDashboard', { dir: o.runDir });
    }
  }

  private async openLog(runDir: string): Promise<void> {
    const file = join(runDir, 'logs', 'trainer.log');
    if (existsSync(file)) await vscode.window.showTextDocument(vscode.Uri.file(file), { preview: false });
    else this.trainerLog.show(true);
  }

  private onEvent(e: Event): void {
    const s = this.state;
    if (!s) return;
    if (typeof e.total === 'number') s.total = e.total;
    if (e.event === 'progress') {
      s.phase = e.phase;
      s.warmup = progressOf(e)?.warmup ?? (e.phase === 'warmup' ? s.warmup : undefined);
      if (e.phase !== 'warmup' && typeof e.step === 'number') s.step = Math.max(s.step, e.step - 1);
    } else if (e.event === 'metrics') {
      const m = (e.metrics ?? {}) as Record<string, number>;
      s.step = e.step ?? s.step;
      s.reward = m['critic/score/mean'] ?? s.reward;
      // One line per step in the trainer's channel (the trainer's own log has none: its steps are events).
      const now = Date.parse(String(e.time ?? '')) || Date.now();
      this.trainerLog.info(stepLine(s.step, s.total, m, this.lastStepAt ? (now - this.lastStepAt) / 1000 : undefined));
      this.lastStepAt = now;
    } else if (e.event === 'eval') {
      s.valEm = ((e.metrics ?? {}) as Record<string, number>)['val/em'] ?? s.valEm;
      const m = (e.metrics ?? {}) as Record<string, number>;
      this.trainerLog.info(
        `eval at step ${e.step ?? s.step}: held-out EM ${fmt(m['val/em'])}${typeof m['val/searches_mean'] === 'number' ? ` · searches ${m['val/searches_mean'].toFixed(2)}` : ''}`,
      );
    } else if (e.event === 'warning') {
      this.trainerLog.warn(String(e.message));
      // the run went on with a smaller KV budget or micro-batch: the plan was short, and every later step is slower
      if (typeof e.cause === 'string' && e.cause.endsWith('-out-of-memory')) {
        void vscode.window.showWarningMessage(
          `Search Agent: run ${s.id} ran out of GPU memory and goes on with ${e.cause.startsWith('rollout') ? `rollout.max_batch_tokens ${e.max_batch_tokens}` : `micro-batches of ${e.micro_batch_size}`} (slower). The trainer log says where.`,
        );
      }
    } else if (e.event === 'error') {
      this.trainerLog.error(String(e.message));
    }
    this.render();
    this.changed.fire(s);
  }

  private render(): void {
    const s = this.state;
    if (!s) {
      this.status.hide();
      return;
    }
    this.status.text = `${s.stopping ? '$(loading~spin)' : '$(sync~spin)'} ${s.id}: ${liveSummary(s)}`;
    this.status.tooltip = new vscode.MarkdownString(
      `**${s.id}**${s.attached ? ' (re-attached after a reload)' : ''}${s.stopping ? '\n\n**stopping**: the trainer finishes its step, then checkpoints and stops' : ''}\n\n${s.phase === 'warmup' ? `supervised warm start (format only) before step 1: ${s.warmup ? `step ${s.warmup.step} of ${s.warmup.steps}, loss ${fmt(s.warmup.loss)}` : 'starting'}` : `step ${s.step} of ${s.total}${s.phase ? `, ${s.phase}` : ''}`}\n\nreward ${fmt(s.reward)} (the last step's batch) · held-out EM ${fmt(s.valEm)}\n\n${s.dir}\n\nClick for the dashboard.`,
    );
    this.status.show();
  }

  /** Stops the live run (SIGTERM → checkpoint → kill after the grace period), or a re-attached one by its pid. */
  async stop(): Promise<void> {
    if (this.host) {
      this.log.info(`stopping run ${this.host.id}`);
      this.markStopping();
      await this.host.stop();
      return;
    }
    if (this.attached?.pid) {
      this.log.info(`stopping re-attached run ${this.attached.id} (pid ${this.attached.pid})`);
      this.markStopping();
      killTree(this.attached.pid, 'SIGTERM');
      return;
    }
    void vscode.window.showInformationMessage('Search Agent: no training run is running.');
  }

  /** Says "stopping…" at once (status bar, progress notification, Runs view, the trainer's channel): the trainer takes
   * a while to finish its step and checkpoint, and nothing else would change until then. */
  private markStopping(): void {
    const s = this.state;
    if (!s || s.stopping) return;
    s.stopping = true;
    this.trainerLog.info(`stopping ${s.id}: the trainer finishes step ${s.step + 1}, then checkpoints and stops`);
    this.render();
    this.changed.fire(s);
  }

  /**
   * After a window reload the trainer keeps going only until it notices its host is gone (it then checkpoints and
   * stops, `stop_reason: host-gone`); a run still `running` with a live pid is shown here until it ends, and then —
   * or at once when it already ended — "Resume" is offered.
   */
  private async reattach(): Promise<void> {
    const runs = await listRuns(this.runsParents());
    if (this.host) return;
    const running = runs.find((r) => r.state === 'running');
    if (!running) {
      this.offerResume(runs);
      return;
    }
    this.attached = running;
    this.state = {
      id: running.id,
      dir: running.dir,
      step: running.step,
      total: running.total ?? 0,
      phase: running.progress?.phase,
      warmup: running.progress?.warmup,
      reward: running.last?.reward,
      valEm: running.last?.valEm,
      attached: true,
    };
    this.log.info(`re-attached to run ${running.id} (pid ${running.pid})`);
    void vscode.commands.executeCommand('setContext', 'searchAgent.training', true);
    this.render();
    this.changed.fire(this.state);
    this.attachTimer = setInterval(() => {
      void readRun(running.dir).then((info) => {
        if (!info || !this.state?.attached) return;
        Object.assign(this.state, {
          step: info.step,
          total: info.total ?? this.state.total,
          phase: info.progress?.phase,
          warmup: info.progress?.warmup,
          reward: info.last?.reward,
          valEm: info.last?.valEm,
        });
        if (info.state !== 'running') {
          clearInterval(this.attachTimer);
          this.attached = undefined;
          this.state = undefined;
          void vscode.commands.executeCommand('setContext', 'searchAgent.training', false);
          this.changed.fire(undefined);
          this.offerResume([info]);
        } else this.changed.fire(this.state);
        this.render();
      });
    }, 2_000);
  }

  /**
   * Offers "Resume" once for the latest run that stopped because its window went away (a reload, a crash of the
   * extension host: `stop_reason: host-gone`) or was interrupted (its trainer killed), within the last day.
   */
  private offerResume(runs: RunInfo[]): void {
    if (!vscode.workspace.isTrusted) return;
    const key = 'searchAgent.resumeOffered';
    const offered = this.context.workspaceState.get<string[]>(key, []);
    const dayAgo = Date.now() - 24 * 3600_000;
    const run = runs
      .filter((r) => (r.state === 'stopped' && r.stopReason === 'host-gone') || r.state === 'interrupted')
      .filter((r) => !offered.includes(r.dir) && Date.parse(r.updated ?? r.created ?? '') > dayAgo)
      .sort((a, b) => Date.parse(b.updated ?? b.created ?? '') - Date.parse(a.updated ?? a.created ?? ''))[0];
    if (!run) return;
    void this.context.workspaceState.update(key, [...offered, run.dir].slice(-50));
    const why =
      run.state === 'interrupted'
        ? 'was interrupted (its trainer was killed)'
        : 'stopped when its window went away (checkpointed)';
    this.log.info(
      `offering to resume ${run.id} (${run.state}${run.stopReason ? `, ${run.stopReason}` : ''}, step ${run.step})`,
    );
    void vscode.window
      .showInformationMessage(`Search Agent: run ${run.id} ${why} at step ${run.step}.`, 'Resume')
      .then((b) => {
        if (b) void this.resume(run.dir);
      });
  }

  async startRetriever(uri?: vscode.Uri): Promise<string | undefined> {
    if (!this.trusted('Start Retriever')) return undefined;
    if (this.retriever) {
      void vscode.window.showInformationMessage(
        `Search Agent: the retriever is already running at ${this.retriever.url}/retrieve.`,
      );
      return this.retriever.url;
    }
    let args: string[] = [
      '--port',
      String(vscode.workspace.getConfiguration('searchAgent').get<number>('serverPort') ?? 0),
    ];
    const config = uri?.fsPath.endsWith('.run.json') ? uri : undefined;
    try {
      if (config) args = envServerArgs(await loadRunConfig(config.fsPath), { port: Number(args[1]) });
      this.retriever = await startEnvServerProcess(args, {
        onLog: (l) => this.serverLog.info(l),
        launcher: this.serverLauncher(),
      });
    } catch (e) {
      await this.startFailed(e as Error, config?.fsPath);
      return undefined;
    }
    const url = this.retriever.url;
    this.log.info(`retriever started at ${url} (${envServerScript()})`);
    void this.retriever.child.exited.then(() => {
      this.retriever = undefined;
      void vscode.commands.executeCommand('setContext', 'searchAgent.retrieverRunning', false);
    });
    void vscode.commands.executeCommand('setContext', 'searchAgent.retrieverRunning', true);
    void vscode.window
      .showInformationMessage(
        `Search Agent: retriever listening at ${url}/retrieve (Search-R1's API; ${config ? vscode.workspace.asRelativePath(config) : 'BM25 over the demo corpus'}).`,
        'Copy URL',
      )
      .then((b) => {
        if (b) void vscode.env.clipboard.writeText(`${url}/retrieve`);
      });
    return url;
  }

  async stopRetriever(): Promise<void> {
    if (!this.retriever) {
      void vscode.window.showInformationMessage('Search Agent: no retriever is running.');
      return;
    }
    await this.retriever.child.stop(3_000);
    this.retriever = undefined;
  }

  dispose(): void {
    clearInterval(this.attachTimer);
    // Deactivation (window closing or reloading): ask the trainer to checkpoint and stop; the watchdogs cover the
    // case where we are killed before this runs.
    void this.host?.stop({ hostClosing: true });
    void this.retriever?.child.stop(3_000);
    for (const d of this.disposables) d.dispose();
  }
}
