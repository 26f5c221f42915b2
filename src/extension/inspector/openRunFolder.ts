/**
 * "Search Agent: Open Run Folder…" (and the Runs view's "+"): any folder a run left — one of ours, a veRL or TRL
 * dump, or another engine's per-token dump (prime-rl's token exports, NeMo-RL's train data, miles' --dump-details,
 * slime's debug rollouts, SkyRL's dumped batches) — detected (src/core/importers), opened in the rollout inspector
 * (followed while the engine writes), and what was found told once it is read: engine, steps, rollouts, the arrays
 * the records carry, how roles were found. Paths are the workspace side's (the extension runs there: a Remote-SSH
 * folder is opened on the remote machine). Dumps that need the trainer's Python (pickles, .pt files) open only in a
 * trusted workspace; ids-only dumps ask for the model's tokenizer when `searchAgent.audit.tokenizer` names none.
 */
import { basename } from 'node:path';
import * as vscode from 'vscode';
import { detectSource, UnreadableInput } from '../../core/importers';
import { isForeignKind, PYTHON_KINDS } from '../../core/importers/foreign';
import type { InspectorStatus } from '../../core/protocol/rollouts';
import { auditTokenizerSetting } from '../auditSettings';
import { findTrainerPython } from '../training/python';
import type { Inspector } from './inspector';

export const OPEN_RUN_FOLDER = 'searchAgent.openRunFolder';

/** The message that says what a dump held (also written to the log, step by step). */
export function foundMessage(path: string, f: NonNullable<InspectorStatus['imported']>): string {
  const steps = f.perStep.map((p) => p.step).filter((s) => s >= 0);
  const range = steps.length > 1 ? ` (${steps[0]}–${steps[steps.length - 1]})` : steps.length ? ` (${steps[0]})` : '';
  return `${f.engine} dump ${basename(path)}: ${f.steps} step${f.steps === 1 ? '' : 's'}${range}, ${f.rollouts} rollouts${f.skipped ? `, ${f.skipped} skipped` : ''}; arrays ${f.arrays.join(', ')}; roles from ${f.roles.join(' / ') || 'the records'}${f.pending ? `; ${f.pending} file(s) still being written` : ''}`;
}

export function registerOpenRunFolder(
  context: vscode.ExtensionContext,
  inspector: Inspector,
  log: vscode.LogOutputChannel,
): vscode.Disposable {
  return vscode.commands.registerCommand('searchAgent.openRunFolder', async (arg?: vscode.Uri) => {
    let uri = arg instanceof vscode.Uri ? arg : undefined;
    if (!uri) {
      const picked = await vscode.window.showOpenDialog({
        canSelectFolders: true,
        canSelectFiles: true,
        canSelectMany: false,
        title:
          'Open Run Folder (a run of ours, or another engine’s dump: prime-rl, NeMo-RL, miles, slime, SkyRL, veRL, TRL)',
        openLabel: 'Open Run',
        defaultUri: vscode.workspace.workspaceFolders?.[0]?.uri,
      });
      uri = picked?.[0];
    }
    if (!uri) return;
    const path = uri.fsPath;
    let kind: string;
    try {
      kind = await detectSource(path);
    } catch (e) {
      const why = e instanceof UnreadableInput ? e.message : `${path}: ${(e as Error).message}`;
      log.warn(`open run folder: ${why}`);
      void vscode.window.showErrorMessage(
        `Search Agent: nothing to open in ${why}. Expected one of our runs, a veRL or TRL dump, or the per-token dump of prime-rl (token_exports/), NeMo-RL (train_data_stepN.jsonl), miles (--dump-details), slime (rollout .pt) or SkyRL (dumped_data/*.pkl).`,
      );
      return;
    }
    log.info(`open run folder: ${path} (${kind})`);
    if (!isForeignKind(kind)) {
      await vscode.commands.executeCommand(
        'searchAgent.openInspector',
        (await vscode.workspace.fs.stat(uri)).type & vscode.FileType.Directory ? { dir: path } : uri,
      );
      return;
    }
    let python: string | undefined;
    if (PYTHON_KINDS.includes(kind)) {
      if (!vscode.workspace.isTrusted) {
        void vscode.window.showErrorMessage(
          `Search Agent: a ${kind} dump is read by the trainer's Python (pickles and .pt files); this workspace is not trusted, so nothing is run. Trust the workspace to open it.`,
        );
        return;
      }
      const search = await findTrainerPython(context, uri);
      if (!search.found) {
        void vscode.window.showErrorMessage(
          `Search Agent: reading a ${kind} dump needs the trainer's Python (with torch); none was found (${search.tried.map((t) => t.executable).join(', ')}). Run "Search Agent: Set Up Trainer Environment".`,
        );
        return;
      }
      python = search.found.executable;
    }
    let tokenizer = auditTokenizerSetting(path);
    if (!tokenizer) {
      const choice = await vscode.window.showInformationMessage(
        `This ${kind} dump holds token ids. Choose the model's tokenizer to see the text and read each token's role from its chat template (without one, roles restate the dump's own loss mask and no leak can be seen).`,
        'Choose Tokenizer…',
        'Open Without',
      );
      if (choice === undefined) return;
      if (choice === 'Choose Tokenizer…') {
        const t = await vscode.window.showOpenDialog({
          canSelectFolders: true,
          canSelectFiles: true,
          canSelectMany: false,
          title: 'The model directory (or its tokenizer.json)',
          openLabel: 'Use Tokenizer',
        });
        if (!t?.[0]) return;
        tokenizer = t[0].fsPath;
      }
    }
    inspector.openFolder(path, {
      foreign: inspector.foreignOptions(path, python),
      ...(tokenizer ? { tokenizer } : {}),
      onImported: (found) => {
        log.info(`open run folder: ${foundMessage(path, found)}`);
        for (const p of found.perStep)
          log.info(`  step ${p.step}: ${p.rollouts} rollouts; arrays ${p.arrays.join(', ')}`);
        for (const n of found.notes) log.info(`  note: ${n}`);
        for (const i of found.issues) log.warn(`  skipped: ${i}`);
        void vscode.window.showInformationMessage(`Search Agent: ${foundMessage(path, found)}`);
      },
    });
  });
}
