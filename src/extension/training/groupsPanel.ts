/**
 * The GRPO group view's panel: the groups of one step's rollouts file side by side (src/core/audit/groups.ts builds
 * them), opened from the dashboard's zero-variance chart (`searchAgent.openGroups`), or from the palette's
 * "Show GRPO Groups…" (`searchAgent.showGroups`: a run, then one of its steps with rollouts; on a Runs view step,
 * that step); a sample opens in the replay. Only views files: allowed in untrusted workspaces, as the other viewers.
 */
import * as vscode from 'vscode';
import { runFactsOf } from '../../core/audit/groupChecks';
import { groupViews, type LocatedRollout } from '../../core/audit/groups';
import { listRuns, readRun, rolloutFile, zeroVarianceSteps } from '../../core/host/runs';
import type { GroupsContract, GroupsState } from '../../core/protocol/groups';
import { formatIssue } from '../../core/run/format';
import { readPart, runConfigDialect, runConfigNear, stepRecording } from '../../core/store/rollouts';
import { trajectoryReadOptions } from '../trajectorySettings';
import { type OpenedWebview, openWebviewPanel } from '../webviewPanel';
import { runDirOf } from './runArg';
import { pickRun } from './runsView';

export class GroupsPanel implements vscode.Disposable {
  private web: OpenedWebview<GroupsContract> | undefined;
  private state: GroupsState | null = null;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: vscode.LogOutputChannel,
    private readonly runsParents: () => string[],
  ) {
    this.disposables.push(
      vscode.commands.registerCommand('searchAgent.openGroups', (file: string, step?: number) => this.show(file, step)),
      vscode.commands.registerCommand('searchAgent.showGroups', (arg?: unknown) => this.pick(arg)),
    );
  }

  /** Asks for a run with rollouts and one of its steps (each with its share of zero-variance groups when the metrics say it), and shows that step's groups. */
  async pick(arg?: unknown): Promise<void> {
    const dir = runDirOf(arg);
    const given = (arg as { step?: unknown } | undefined)?.step;
    if (dir && typeof given === 'number') return this.show(rolloutFile(dir, given), given);
    let run;
    if (dir) {
      run = await readRun(dir);
      if (!run?.rolloutSteps.length) {
        void vscode.window.showInformationMessage(
          `Search Agent: no rollouts saved in ${dir}${run ? ' yet' : ' (not a run directory)'}.`,
        );
        return;
      }
    } else {
      const runs = (await listRuns(this.runsParents())).filter((r) => r.rolloutSteps.length);
      if (!runs.length) {
        void vscode.window.showInformationMessage('Search Agent: no run with saved rollouts in this workspace.');
        return;
      }
      run = await pickRun(runs, 'Show GRPO Groups (1/2): which run?');
      if (!run) return;
    }
    const zero = await zeroVarianceSteps(run.dir);
    const items = [...run.rolloutSteps].reverse().map((step) => {
      const z = zero.get(step);
      const description = !z
        ? undefined
        : z.groups
          ? `${Math.round(z.frac * z.groups)} of ${z.groups} groups zero-variance`
          : `${Math.round(z.frac * 100)}% of groups zero-variance`;
      return { label: `step ${step}`, ...(description ? { description } : {}), step };
    });
    const step = (
      await vscode.window.showQuickPick(items, {
        title: `Show GRPO Groups (2/2): which step of ${run.id}?`,
        placeHolder: 'steps with rollouts, newest first',
        matchOnDescription: true,
      })
    )?.step;
    if (step !== undefined) await this.show(rolloutFile(run.dir, step), step);
  }

  /** Shows the groups of a rollouts file (one step's). */
  async show(file: string, step?: number): Promise<void> {
    const runDialect = await runConfigDialect(file);
    const read = { ...trajectoryReadOptions(vscode.Uri.file(file), this.log), ...(runDialect ? { runDialect } : {}) };
    const rollouts: LocatedRollout[] = [];
    const errors: string[] = [];
    for await (const row of readPart(file, read)) {
      if (row.record) rollouts.push({ record: row.record, file, line: row.line });
      else if (row.errors[0]) errors.push(formatIssue(row.errors[0]));
    }
    const config = (await runConfigNear(file))?.config;
    const recording = await stepRecording(file);
    this.state = {
      source: file,
      ...(step !== undefined ? { step } : {}),
      groups: groupViews(rollouts, read, runFactsOf(config)),
      errors,
      ...(recording && recording.recorded < recording.of
        ? { sampled: { recorded: recording.recorded, of: recording.of } }
        : {}),
    };
    this.log.info(
      `groups: ${file} (${this.state.groups.length} groups, ${this.state.groups.filter((g) => g.zeroVariance).length} with zero variance)`,
    );
    if (!this.web) {
      const web = openWebviewPanel<GroupsContract>(
        this.context.extensionUri,
        { name: 'groups', title: 'GRPO Groups', viewColumn: vscode.ViewColumn.Beside },
        this.log,
      );
      this.web = web;
      web.endpoint.handle('getState', () => this.state);
      web.endpoint.handle('openSample', async ({ file: f, line }) => {
        await vscode.commands.executeCommand('searchAgent.replayRollout', f, line);
      });
      web.panel.onDidDispose(() => (this.web = undefined));
    } else this.web.panel.reveal(undefined, false);
    this.web.panel.title = `GRPO Groups${step !== undefined ? `: step ${step}` : ''}`;
    this.web.endpoint.emit('state', this.state);
  }

  dispose(): void {
    this.web?.panel.dispose();
    for (const d of this.disposables) d.dispose();
  }
}
