/**
 * The first hour: the "Get Started with Search Agent Studio" walkthrough (package.json `contributes.walkthroughs`:
 * set up the trainer's Python, open the demo, train it, inspect a rollout, replay it, edit the reward), opened by
 * "Search Agent: Show Welcome"; and the two commands its steps use besides the extension's own — Open Demo (the
 * demo config, copied into the workspace) and Open Docs (the documentation that ships with the extension).
 */
import { existsSync } from 'node:fs';
import { copyFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as vscode from 'vscode';

export const WALKTHROUGH_ID = 'searchAgent.gettingStarted';

export function registerWalkthrough(context: vscode.ExtensionContext): vscode.Disposable[] {
  const id = `${context.extension.id}#${WALKTHROUGH_ID}`;
  return [
    vscode.commands.registerCommand('searchAgent.showWelcome', () =>
      vscode.commands.executeCommand('workbench.action.openWalkthrough', id, false),
    ),
    vscode.commands.registerCommand('searchAgent.openDemo', () => openDemo(context)),
    vscode.commands.registerCommand('searchAgent.openDocs', (name?: string) => openDocs(context, name)),
  ];
}

/**
 * Writes the demo config — the README's first command's, examples/demo-multihop.run.json: the tiny policy, BM25 over
 * the two-hop world, the format-only warm start, GRPO on exact match; its data named `builtin:demo-multihop/…`, so the
 * copy runs wherever it is — into the workspace as demo.run.json, unless one is there, and opens it. (The one-hop demo,
 * examples/demo.run.json, is in the docs: shorter, and it never searches twice.)
 */
async function openDemo(context: vscode.ExtensionContext): Promise<vscode.Uri | undefined> {
  const folder = vscode.workspace.workspaceFolders?.[0];
  if (!folder) {
    void vscode.window
      .showWarningMessage('Search Agent: open a folder first; the demo config and its runs live in it.', 'Open Folder…')
      .then((b) => b && vscode.commands.executeCommand('workbench.action.files.openFolder'));
    return undefined;
  }
  const target = join(folder.uri.fsPath, 'demo.run.json');
  if (!existsSync(target))
    await copyFile(join(context.extensionUri.fsPath, 'examples', 'demo-multihop.run.json'), target);
  const uri = vscode.Uri.file(target);
  await vscode.window.showTextDocument(uri);
  return uri;
}

/** Opens docs/<name>.md (shipped with the extension) in the Markdown preview. */
async function openDocs(context: vscode.ExtensionContext, name = 'training'): Promise<void> {
  const file = /^[a-z-]+$/.test(name) ? join(context.extensionUri.fsPath, 'docs', `${name}.md`) : '';
  if (!file || !existsSync(file)) {
    void vscode.window.showWarningMessage(`Search Agent: no documentation page "${name}".`);
    return;
  }
  await vscode.commands.executeCommand('markdown.showPreview', vscode.Uri.file(file));
}
