import * as vscode from 'vscode';

/**
 * The run directory a command was invoked on: a Runs view node (inline actions and context menus pass the tree's
 * node), `{ dir }` (a row's click, a notification's button), or a folder's URI.
 */
export function runDirOf(arg: unknown): string | undefined {
  if (arg instanceof vscode.Uri) return arg.fsPath;
  const a = arg as { dir?: unknown; run?: { dir?: unknown } } | undefined;
  if (typeof a?.run?.dir === 'string') return a.run.dir;
  return typeof a?.dir === 'string' ? a.dir : undefined;
}
