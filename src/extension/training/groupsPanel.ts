/**
 * The GRPO group view's panel: the groups of one step's rollouts file side by side (src/core/audit/groups.ts builds
 * them), opened from the dashboard's zero-variance chart (`searchAgent.openGroups`); a sample opens in the replay.
 */
import * as vscode from 'vscode';
import { groupViews, type LocatedRollout } from '../../core/audit/groups';
import type { GroupsContract, GroupsState } from '../../core/protocol';
import { formatIssue } from '../../core/run/format';
import { readLines } from '../../core/store/jsonl';
import { parseRolloutLine, runConfigDialect } from '../../core/store/rollouts';
import { openWebviewPanel, type OpenedWebview } from '../webviewPanel';
import { trajectoryReadOptions } from '../trajectorySettings';

export class GroupsPanel implements vscode.Disposable {
  private web: OpenedWebview<GroupsContract> | undefined;
  private state: GroupsState | null = null;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.disposables.push(vscode.commands.registerCommand('searchAgent.openGroups', (file: string, step?: number) => this.show(file, step)));
  }

  /** Shows the groups of a rollouts file (one step's). */
  async show(file: string, step?: number): Promise<void> {
    const runDialect = await runConfigDialect(file);
    const read = { ...trajectoryReadOptions(vscode.Uri.file(file), this.log), ...(runDialect ? { runDialect } : {}) };
    const rollouts: LocatedRollout[] = [];
    const errors: string[] = [];
    for await (const l of readLines(file)) {
      const row = parseRolloutLine(l.text, file, l.line, read);
      if (row.record) rollouts.push({ record: row.record, file, line: l.line });
      else if (row.errors[0]) errors.push(formatIssue(row.errors[0]));
    }
    this.state = { source: file, ...(step !== undefined ? { step } : {}), groups: groupViews(rollouts, read), errors };
    this.log.info(`groups: ${file} (${this.state.groups.length} groups, ${this.state.groups.filter((g) => g.zeroVariance).length} with zero variance)`);
    if (!this.web) {
      const web = openWebviewPanel<GroupsContract>(this.context.extensionUri, { name: 'groups', title: 'GRPO Groups', viewColumn: vscode.ViewColumn.Beside }, this.log);
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
