/**
 * `searchAgent.trajectory.dialect` and `.searchTool`: how the editor, the inspector and the replay read
 * responses (read options of src/core/run/format.ts). An unknown dialect is logged and detection used instead.
 */
import * as vscode from 'vscode';
import type { ReadOptions } from '../core/run/format';
import { parseDialectName } from '../core/tags/trajectory';

export function trajectoryReadOptions(scope: vscode.Uri | undefined, log: vscode.LogOutputChannel): ReadOptions {
  const config = vscode.workspace.getConfiguration('searchAgent.trajectory', scope);
  const dialect = parseDialectName(config.get<string>('dialect'));
  if (typeof dialect === 'object') log.warn(`searchAgent.trajectory.dialect: ${dialect.error}; detecting it instead`);
  const searchTool = config.get<string>('searchTool')?.trim();
  return { dialect: typeof dialect === 'object' ? 'auto' : dialect, ...(searchTool ? { searchTool } : {}) };
}
