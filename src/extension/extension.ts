/**
 * The thin VS Code layer: registers commands and views and hands work to `src/core`, the env server and the
 * trainer. Nothing here trains, parses big files or blocks the extension host.
 */
import * as vscode from 'vscode';
import { Inspector } from './inspector/inspector';
import { registerOpenRunFolder } from './inspector/openRunFolder';
import { ReplayPanel } from './inspector/replayPanel';
import { RewardWorkbench } from './rewards/rewardWorkbench';
import { Dashboard } from './training/dashboard';
import { GroupsPanel } from './training/groupsPanel';
import { newTrainingRun } from './training/newRun';
import { RunsView } from './training/runsView';
import { liveSummary, TrainingController } from './training/trainingController';
import { TrajectoryLanguage } from './trajectoryLanguage';
import { registerWalkthrough } from './walkthrough';

/** The replay panel, whose policy servers deactivate() stops (a window reload deactivates the extension). */
let replayPanel: ReplayPanel | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const log = vscode.window.createOutputChannel('Search Agent Studio', { log: true });
  context.subscriptions.push(log);
  const version = String(context.extension.packageJSON.version);
  log.info(
    `Search Agent Studio ${version} activated (VS Code ${vscode.version}, workspace ${vscode.workspace.isTrusted ? 'trusted' : 'untrusted'})`,
  );

  const status = vscode.window.createStatusBarItem('searchAgent.status', vscode.StatusBarAlignment.Left, 10);
  status.name = 'Search Agent Studio';
  status.text = '$(beaker) Search Agent';
  status.command = 'searchAgent.showWelcome';
  status.show();
  context.subscriptions.push(status);

  context.subscriptions.push(new TrajectoryLanguage(log), new RewardWorkbench(context, log));
  const training = new TrainingController(context, log);
  context.subscriptions.push(training, new RunsView(training), new Dashboard(context, training, log));
  // The Search Agent item says what runs (never "no training run" while one does).
  const describe = () => {
    const s = training.live;
    status.tooltip = s
      ? `Search Agent Studio: training ${s.id} — ${liveSummary(s)}`
      : 'Search Agent Studio: no training run';
  };
  context.subscriptions.push(training.onDidChange(describe));
  describe();
  const replay = new ReplayPanel(context, log);
  replayPanel = replay;
  const inspector = new Inspector(context, replay, log, () => training.runsParents());
  context.subscriptions.push(
    replay,
    inspector,
    registerOpenRunFolder(context, inspector, log),
    new GroupsPanel(context, log, () => training.runsParents()),
  );

  context.subscriptions.push(
    ...registerWalkthrough(context),
    vscode.commands.registerCommand('searchAgent.showLogs', () => log.show(true)),
    vscode.commands.registerCommand('searchAgent.newTrainingRun', () => newTrainingRun()),
  );
}

/** VS Code awaits this (a few seconds) before the extension host goes: the policy servers are stopped and waited for
 * here, not left to the dispose of the subscriptions, which is not awaited (they also exit when their parent dies). */
export async function deactivate(): Promise<void> {
  await replayPanel?.stopForks();
  replayPanel = undefined;
}
