/**
 * `searchAgent.audit.*`: the drift check's tokenizer, and the level and cap of the importance-sampling preview
 * (src/core/audit/importance.ts), as the inspector and the replay read them for a rollout file.
 */
import * as vscode from 'vscode';
import type { ImportanceOptions } from '../core/audit/importance';

/** The `searchAgent.audit.tokenizer` setting (a model directory or tokenizer.json), if set. */
export function auditTokenizerSetting(path: string): string | undefined {
  return (
    vscode.workspace.getConfiguration('searchAgent.audit', vscode.Uri.file(path)).get<string>('tokenizer')?.trim() ||
    undefined
  );
}

/** The importance-sampling preview's level and cap; an out-of-range cap falls back to the default. */
export function importanceSettings(path: string): ImportanceOptions {
  const c = vscode.workspace.getConfiguration('searchAgent.audit', vscode.Uri.file(path));
  const level = c.get<string>('isLevel');
  const cap = c.get<number>('isCap');
  return {
    ...(level === 'sequence' || level === 'token' ? { isLevel: level } : {}),
    ...(typeof cap === 'number' && cap > 1 ? { isCap: cap } : {}),
  };
}
