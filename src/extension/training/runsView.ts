/**
 * The Runs view (activity bar → Search Agent → Runs): run directories with their state, step and reward; under a
 * run its steps with rollouts; under a step its rollouts with a reward icon. Refreshed by file-system watchers while
 * a run writes (debounced), and by the live run's events: only the rows whose look changed are re-rendered.
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import * as vscode from 'vscode';
import { listRuns, type RunInfo, rolloutFile, SMOOTHING } from '../../core/host/runs';
import { isStorePart, readPart } from '../../core/store/rollouts';
import type { TrainingController } from './trainingController';

type Node =
  | { kind: 'run'; run: RunInfo }
  | { kind: 'step'; run: RunInfo; step: number }
  | { kind: 'rollout'; file: string; line: number; label: string; reward?: number; detail: string }
  | { kind: 'more'; label: string };

const ICONS: Record<RunInfo['state'], [string, string?]> = {
  running: ['sync~spin', 'charts.blue'],
  finished: ['pass', 'testing.iconPassed'],
  failed: ['error', 'testing.iconFailed'],
  stopped: ['debug-pause', 'charts.yellow'],
  interrupted: ['warning', 'list.warningForeground'],
};

const fmt = (v: number | undefined) => (v === undefined ? '–' : v.toFixed(3));

/**
 * A run's row: state ("stopping…" once Stop Training was asked), step (or the warm start's progress), held-out EM,
 * and the reward averaged over the last steps, labelled so (one small batch's reward swings between 0 and 1 and
 * reads as failure; the status bar shows the last step's, labelled too).
 */
export function runDescription(r: RunInfo, stopping = false): string {
  const where = r.progress?.warmup
    ? `warm-up ${r.progress.warmup.step}/${r.progress.warmup.steps}`
    : `step ${r.step}${r.total ? `/${r.total}` : ''}`;
  return `${stopping && r.state === 'running' ? 'stopping…' : r.state} · ${where}${r.last?.valEm !== undefined ? ` · held-out EM ${fmt(r.last.valEm)}` : ''}${r.last?.rewardSmoothed !== undefined ? ` · reward ${fmt(r.last.rewardSmoothed)} (mean of last ${SMOOTHING} steps)` : ''}`;
}

/** A quick pick of runs (label: the id; description: as the Runs view shows it); the picked run, or undefined. */
export async function pickRun(runs: readonly RunInfo[], title: string): Promise<RunInfo | undefined> {
  return (
    await vscode.window.showQuickPick(
      runs.map((run) => ({ label: run.id, description: runDescription(run), run })),
      { title, matchOnDescription: true },
    )
  )?.run;
}
const MAX_ROLLOUTS = 200;

/** The first `limit` rollouts of a step file: line number, question, reward (streamed, so a big file is cheap). */
async function rolloutsOf(file: string, limit: number): Promise<{ nodes: Node[]; more: boolean }> {
  const nodes: Node[] = [];
  if (await isStorePart(file)) {
    // a token-store step: its rollouts' fields (no token arrays), row by row
    let more = false;
    for await (const row of readPart(file, {}, undefined, 'none')) {
      if (nodes.length >= limit) {
        more = true;
        break;
      }
      const r = row.record;
      nodes.push(
        r
          ? {
              kind: 'rollout',
              file,
              line: row.line,
              label: `${r.group ?? ''}/${r.sample ?? ''} ${r.question ?? ''}`.trim(),
              reward: r.reward,
              detail: `reward ${fmt(r.reward)} · ${r.searches ?? 0} searches · ${r.finish ?? ''}`,
            }
          : {
              kind: 'rollout',
              file,
              line: row.line,
              label: `row ${row.line}: malformed`,
              detail: 'not a rollout record',
            },
      );
    }
    return { nodes, more };
  }
  const rl = createInterface({ input: createReadStream(file, { encoding: 'utf8' }), crlfDelay: Infinity });
  let line = 0;
  let more = false;
  for await (const text of rl) {
    line++;
    if (!text.trim()) continue;
    if (nodes.length >= limit) {
      more = true;
      break;
    }
    try {
      const r = JSON.parse(text) as {
        group?: string;
        sample?: number;
        question?: string;
        reward?: number;
        searches?: number;
        finish?: string;
      };
      nodes.push({
        kind: 'rollout',
        file,
        line,
        label: `${r.group ?? ''}/${r.sample ?? ''} ${r.question ?? ''}`.trim(),
        reward: r.reward,
        detail: `reward ${fmt(r.reward)} · ${r.searches ?? 0} searches · ${r.finish ?? ''}`,
      });
    } catch {
      nodes.push({
        kind: 'rollout',
        file,
        line,
        label: `line ${line}: malformed JSON`,
        detail: 'not a rollout record',
      });
    }
  }
  rl.close();
  return { nodes, more };
}

export class RunsView implements vscode.TreeDataProvider<Node>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private readonly disposables: vscode.Disposable[] = [];
  private timer: NodeJS.Timeout | undefined;
  /**
   * The run rows as last shown, one node object per run directory kept across refreshes, with what its row showed.
   * A refresh re-renders only the rows that changed: refreshing the whole tree makes VS Code forget every row's
   * handle until it has asked for the children again, and a click on a row's inline action in that window reaches
   * the command without its run (it then opens the newest run).
   */
  private readonly shown = new Map<string, { node: Node & { kind: 'run' }; look: string }>();
  private order: string[] = [];
  readonly view: vscode.TreeView<Node>;

  constructor(private readonly controller: TrainingController) {
    this.view = vscode.window.createTreeView('searchAgent.runs', { treeDataProvider: this, showCollapseAll: true });
    const watcher = vscode.workspace.createFileSystemWatcher(
      '**/{run.json,metrics.jsonl,rollouts/step-*.jsonl,rollouts/step-*/rollouts.parquet}',
    );
    const poke = () => this.refreshSoon();
    this.disposables.push(
      this.view,
      this.changed,
      watcher,
      watcher.onDidChange(poke),
      watcher.onDidCreate(poke),
      watcher.onDidDelete(poke),
      controller.onDidChange(poke),
      vscode.commands.registerCommand('searchAgent.refreshRuns', () => {
        this.order = [];
        this.changed.fire(undefined);
      }),
      vscode.commands.registerCommand('searchAgent.openRollout', (file: string, line: number) =>
        this.openRollout(file, line),
      ),
    );
  }

  private refreshSoon(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.update();
    }, 500);
  }

  /** Whether the live run `r` is stopping (Stop Training asked; the trainer finishes its step and checkpoints). */
  private stopping(r: RunInfo): boolean {
    const live = this.controller.live;
    return !!live?.stopping && live.dir === r.dir;
  }

  /** What a run's row shows (its item and its steps): a row whose look did not change is not re-rendered. */
  private look(r: RunInfo): string {
    return JSON.stringify([r.state, runDescription(r, this.stopping(r)), r.error, r.last, r.rolloutSteps]);
  }

  /** Re-reads the runs; the whole tree is refreshed only when runs came, went or moved, otherwise just changed rows. */
  private async update(): Promise<void> {
    const runs = await listRuns(this.controller.runsParents());
    if (runs.map((r) => r.dir).join('\0') !== this.order.join('\0')) {
      this.changed.fire(undefined);
      return;
    }
    for (const run of runs) {
      const row = this.shown.get(run.dir);
      const look = this.look(run);
      if (!row || row.look === look) continue;
      row.node.run = run;
      row.look = look;
      this.changed.fire(row.node);
    }
  }

  private async openRollout(file: string, line: number): Promise<void> {
    const doc = await vscode.window.showTextDocument(vscode.Uri.file(file), { preview: true });
    const pos = new vscode.Position(Math.max(0, line - 1), 0);
    doc.selection = new vscode.Selection(pos, pos);
    doc.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.AtTop);
  }

  getTreeItem(n: Node): vscode.TreeItem {
    switch (n.kind) {
      case 'run': {
        const r = n.run;
        const item = new vscode.TreeItem(
          r.id,
          r.rolloutSteps.length ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.None,
        );
        const [icon, color] = ICONS[r.state];
        item.iconPath = new vscode.ThemeIcon(icon, color ? new vscode.ThemeColor(color) : undefined);
        item.description = runDescription(r, this.stopping(r));
        item.tooltip = new vscode.MarkdownString(
          `**${r.id}** — ${this.stopping(r) ? 'stopping (finishing its step, then a checkpoint)' : r.state}${r.error ? `\n\n${r.error}` : ''}\n\nheld-out exact match ${fmt(r.last?.valEm)} · reward ${fmt(r.last?.rewardSmoothed)} (mean of the last ${SMOOTHING} steps; the last step's ${fmt(r.last?.reward)}, as the status bar shows it)\n\n${r.dir}`,
        );
        item.contextValue = `run.${r.state}`;
        item.id = `run:${r.dir}`;
        item.resourceUri = vscode.Uri.file(r.dir);
        item.command = { command: 'searchAgent.openDashboard', title: 'Open Dashboard', arguments: [{ dir: r.dir }] };
        return item;
      }
      case 'step': {
        const item = new vscode.TreeItem(`step ${n.step}`, vscode.TreeItemCollapsibleState.Collapsed);
        item.iconPath = new vscode.ThemeIcon('list-ordered');
        item.id = `step:${n.run.dir}:${n.step}`;
        item.contextValue = 'step';
        item.resourceUri = vscode.Uri.file(rolloutFile(n.run.dir, n.step));
        return item;
      }
      case 'rollout': {
        const item = new vscode.TreeItem(n.label, vscode.TreeItemCollapsibleState.None);
        item.iconPath =
          n.reward === undefined
            ? new vscode.ThemeIcon('question')
            : n.reward > 0
              ? new vscode.ThemeIcon('pass-filled', new vscode.ThemeColor('testing.iconPassed'))
              : new vscode.ThemeIcon('circle-large-outline', new vscode.ThemeColor('testing.iconFailed'));
        item.description = n.detail;
        item.contextValue = 'rollout';
        item.command = { command: 'searchAgent.replayRollout', title: 'Replay Rollout', arguments: [n.file, n.line] };
        return item;
      }
      case 'more':
        return new vscode.TreeItem(n.label, vscode.TreeItemCollapsibleState.None);
    }
  }

  async getChildren(n?: Node): Promise<Node[]> {
    if (!n) {
      const runs = await listRuns(this.controller.runsParents());
      const nodes = runs.map((run) => {
        const row = this.shown.get(run.dir) ?? { node: { kind: 'run' as const, run }, look: '' };
        row.node.run = run;
        row.look = this.look(run);
        return [run.dir, row] as const;
      });
      this.shown.clear();
      for (const [dir, row] of nodes) this.shown.set(dir, row);
      this.order = runs.map((r) => r.dir);
      return nodes.map(([, row]) => row.node);
    }
    if (n.kind === 'run') return [...n.run.rolloutSteps].reverse().map((step) => ({ kind: 'step', run: n.run, step }));
    if (n.kind === 'step') {
      const { nodes, more } = await rolloutsOf(rolloutFile(n.run.dir, n.step), MAX_ROLLOUTS);
      return more ? [...nodes, { kind: 'more', label: `… first ${MAX_ROLLOUTS} shown` }] : nodes;
    }
    return [];
  }

  dispose(): void {
    clearTimeout(this.timer);
    for (const d of this.disposables) d.dispose();
  }
}
