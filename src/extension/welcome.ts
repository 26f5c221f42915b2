/** "Search Agent: Show Welcome": what the extension is, the workspace's trust, and its commands. */
import * as vscode from 'vscode';
import type { WelcomeContract, WelcomeInfo } from '../core/protocol';
import { openWebviewPanel, type OpenedWebview } from './webviewPanel';

interface ContributedCommand {
  command: string;
  title: string;
  category?: string;
}

export class WelcomePanel {
  private static current: WelcomePanel | undefined;

  static show(context: vscode.ExtensionContext, log: vscode.LogOutputChannel): WelcomePanel {
    if (WelcomePanel.current) {
      WelcomePanel.current.opened.panel.reveal();
      return WelcomePanel.current;
    }
    return (WelcomePanel.current = new WelcomePanel(context, log));
  }

  private readonly opened: OpenedWebview<WelcomeContract>;
  private readonly disposables: vscode.Disposable[] = [];

  private constructor(
    private readonly context: vscode.ExtensionContext,
    log: vscode.LogOutputChannel,
  ) {
    this.opened = openWebviewPanel<WelcomeContract>(context.extensionUri, { name: 'welcome', title: 'Search Agent Studio' }, log);
    const { panel, endpoint } = this.opened;
    endpoint.handle('getInfo', () => this.info());
    endpoint.handle('runCommand', async ({ id }) => {
      if (!this.commands().some((c) => c.id === id)) throw new Error(`not a Search Agent command: ${id}`);
      await vscode.commands.executeCommand(id);
    });
    this.disposables.push(
      vscode.workspace.onDidGrantWorkspaceTrust(() => endpoint.emit('trustChanged', { trusted: true })),
      panel.onDidDispose(() => this.dispose()),
    );
  }

  private commands(): WelcomeInfo['commands'] {
    const contributed = (this.context.extension.packageJSON.contributes?.commands ?? []) as ContributedCommand[];
    return contributed.map((c) => ({ id: c.command, title: c.category ? `${c.category}: ${c.title}` : c.title }));
  }

  private info(): WelcomeInfo {
    return {
      version: String(this.context.extension.packageJSON.version),
      trusted: vscode.workspace.isTrusted,
      vscodeVersion: vscode.version,
      commands: this.commands(),
    };
  }

  private dispose(): void {
    WelcomePanel.current = undefined;
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}
