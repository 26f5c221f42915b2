/**
 * Running our own Node scripts (dist/cli.js) from the extension host: the `searchAgent.nodePath` setting
 * (ignored in untrusted workspaces), else the Node that runs the extension host (Electron's, as plain Node).
 */
import * as vscode from 'vscode';

export function nodeCommand(): { file: string; env: NodeJS.ProcessEnv } {
  const configured = vscode.workspace.isTrusted
    ? vscode.workspace.getConfiguration('searchAgent').get<string>('nodePath')
    : '';
  if (configured) return { file: configured, env: { ...process.env } };
  return { file: process.execPath, env: { ...process.env, ELECTRON_RUN_AS_NODE: '1' } };
}
