/**
 * The replay panel: one rollout (or two of a group, side by side) as a timeline and as tokens. The host keeps the
 * models and the position, so hiding and showing the panel (which re-creates the webview: no
 * retainContextWhenHidden) restores where the user was.
 */
import { join } from 'node:path';
import * as vscode from 'vscode';
import {
  addMicroscope,
  IMPORTANCE_DEFAULTS,
  importancePreview,
  mismatchNote,
  tokenizerMismatch,
} from '../../core/audit';
import { ForkHost, forkCheckpointChoices, generationTurns, listCheckpoints } from '../../core/host/fork';
import { runNeeds } from '../../core/host/runConfig';
import { readRun } from '../../core/host/runs';
import { replayModel, type TextTokenizer } from '../../core/inspect/replay';
import type {
  ForkChoices,
  ForkOptions,
  ForkResult,
  ReplayContract,
  ReplayPosition,
  ReplayState,
} from '../../core/protocol/replay';
import { noPythonMessage, runPythonNote } from '../../core/python';
import type { Rollout } from '../../core/run/format';
import { formatIssue } from '../../core/run/format';
import { type RolloutRow, rawPreview, readPartRow, runConfigDialect, runConfigNear } from '../../core/store/rollouts';
import type { Dialect } from '../../core/tags/parser';
import { loadTextTokenizer, runTokenizer, runVocabSize, type TokenizerCodec } from '../../core/tokens/tokenizer';
import { auditTokenizerSetting, importanceSettings } from '../auditSettings';
import { nodeCommand } from '../node';
import { findTrainerPython, SETUP_COMMAND } from '../training/python';
import { trajectoryReadOptions } from '../trajectorySettings';
import { type OpenedWebview, openWebviewPanel } from '../webviewPanel';

export interface ReplayInput {
  index: number;
  row: RolloutRow | null;
  raw?: string;
}

/** The run config's dialect of a rollout file, as read options. */
async function runDialectOf(file: string): Promise<{ runDialect?: Dialect }> {
  const runDialect = await runConfigDialect(file);
  return runDialect ? { runDialect } : {};
}

export class ReplayPanel implements vscode.Disposable {
  private web: OpenedWebview<ReplayContract> | undefined;
  private state: ReplayState | null = null;
  private inputs: ReplayInput[] = [];
  private tokenizer: { name: string; tokenize: TextTokenizer } | undefined;
  /** The drift check's tokenizer for the rollouts shown (their run's own, else the setting's), or why none; the run's
   * vocabulary size when known (a tokenizer with more ids is not the run's). */
  private driftCodec: { codec?: TokenizerCodec; note?: string; runVocab?: number } = {};
  private importance: ReplayState['importance'] = {
    level: IMPORTANCE_DEFAULTS.isLevel,
    cap: IMPORTANCE_DEFAULTS.isCap,
  };
  private readonly disposables: vscode.Disposable[] = [];
  /** The processes behind "Fork here" (policy servers, one per run and checkpoint; the run's env server): started on
   * the first fork, reused, stopped when the panel closes and when the extension deactivates (a window reload). */
  private forks: ForkHost | undefined;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.disposables.push(
      vscode.commands.registerCommand('searchAgent.replayRollout', (file: string, line: number) =>
        this.showLine(file, line),
      ),
    );
  }

  /** Replays the rollout on `line` of a JSONL file, or row `line` (from 1) of a token-store step (the Runs view's rollouts, the Reward Lab). */
  async showLine(file: string, line: number): Promise<void> {
    const row = await readPartRow(file, line, {
      ...trajectoryReadOptions(vscode.Uri.file(file), this.log),
      ...(await runDialectOf(file)),
    });
    if (row)
      return this.show(file, [
        {
          index: line - 1,
          row: { index: line - 1, ...row },
          raw: row.raw === undefined ? undefined : rawPreview(row.raw),
        },
      ]);
    void vscode.window.showWarningMessage(
      `Search Agent: ${file} has no ${file.endsWith('.jsonl') ? 'line' : 'row'} ${line}.`,
    );
  }

  async show(source: string, inputs: ReplayInput[]): Promise<void> {
    this.inputs = inputs;
    await this.loadAuditSettings(inputs.find((i) => i.row)?.row?.file);
    this.state = this.build({ token: 0, entry: 0, overlay: 'none', speed: 8 });
    this.log.info(`replay: ${source} rows ${inputs.map((i) => i.index).join(', ')}`);
    if (!this.web) this.create();
    else this.web.panel.reveal(undefined, false);
    this.web!.panel.title = `Replay: ${this.state.models.map((m) => m.id).join(' ⇆ ') || `row ${inputs[0]?.index}`}`;
    this.web!.endpoint.emit('state', this.state);
  }

  private build(position: ReplayPosition): ReplayState {
    const state: ReplayState = { models: [], position, importance: this.importance };
    for (const { index, row, raw } of this.inputs) {
      if (!row) {
        state.error = { file: '', line: 0, messages: [`row ${index} is not in the source any more`] };
        continue;
      }
      if (!row.record) {
        state.error = { file: row.file, line: row.line, messages: row.errors.map(formatIssue), raw };
        continue;
      }
      const read = trajectoryReadOptions(vscode.Uri.file(row.file), this.log);
      const model = replayModel(
        row.record,
        { index, file: row.file, line: row.line },
        { read, ...(this.tokenizer ? { tokenizer: this.tokenizer.tokenize, tokenizerName: this.tokenizer.name } : {}) },
      );
      // A tokenizer that cannot have tokenised this record (tokenizerMatch.ts) is not used: "does not match", not drift.
      const { codec, note, runVocab } = this.driftCodec;
      const why = codec ? tokenizerMismatch(codec, row.record, runVocab) : undefined;
      state.models.push(
        addMicroscope(model, row.record, {
          codec: why ? undefined : codec,
          noCodec: why ? mismatchNote(codec!, why) : note,
          isLevel: this.importance.level,
          isCap: this.importance.cap,
        }),
      );
    }
    return state;
  }

  /** The drift tokenizer and the importance preview's level and cap for a rollout file (searchAgent.audit.*). */
  private async loadAuditSettings(file: string | undefined): Promise<void> {
    if (!file) return;
    // The run's own tokenizer first; the folder's setting for rollouts of no run, or whose run names none.
    const t = await runTokenizer(file, auditTokenizerSetting(file));
    this.driftCodec = { ...t, ...(t.codec ? { runVocab: await runVocabSize(file) } : {}) };
    const is = importanceSettings(file);
    this.importance = { level: is.isLevel ?? IMPORTANCE_DEFAULTS.isLevel, cap: is.isCap ?? IMPORTANCE_DEFAULTS.isCap };
  }

  /** The importance-sampling preview of the rollouts shown, at another level or cap (kept for a re-created view). */
  private previewImportance(
    level: ReplayState['importance']['level'],
    cap: number,
  ): ReturnType<typeof importancePreview>[] {
    if (!(cap > 1)) throw new Error(`the cap must be > 1 (got ${cap})`);
    this.importance = { level, cap };
    if (!this.state) return [];
    this.state.importance = this.importance;
    return this.state.models.map((m) => {
      const tk = this.inputs.find((i) => i.index === m.index)?.row?.record?.tokens;
      const preview = tk
        ? importancePreview(tk as Parameters<typeof importancePreview>[0], { isLevel: level, isCap: cap })
        : null;
      if (m.microscope) m.microscope.importance = preview;
      return preview;
    });
  }

  private create(): void {
    const web = openWebviewPanel<ReplayContract>(
      this.context.extensionUri,
      { name: 'replay', title: 'Replay', viewColumn: vscode.ViewColumn.Beside },
      this.log,
    );
    this.web = web;
    web.endpoint.handle('getState', () => this.state);
    web.endpoint.handle('position', (p) => {
      if (this.state) this.state.position = p;
    });
    web.endpoint.handle('chooseTokenizer', () => this.chooseTokenizer());
    web.endpoint.handle('forkChoices', (p) => this.forkChoices(p.model));
    web.endpoint.handle('fork', (p) => this.fork(p));
    web.endpoint.handle('importance', ({ level, cap }) => this.previewImportance(level, cap));
    web.endpoint.handle('setUpTrainerEnvironment', () => void vscode.commands.executeCommand(SETUP_COMMAND));
    web.panel.onDidDispose(() => {
      this.web = undefined;
      void this.stopForks();
    });
  }

  /** The shown rollout's record and run directory (undefined run: not in a run directory). */
  private async forkTarget(k: number): Promise<{ record?: Rollout; runDir?: string }> {
    const row = this.inputs[k]?.row;
    if (!row?.record) return {};
    return { record: row.record, runDir: (await runConfigNear(row.file))?.dir };
  }

  private async forkChoices(k: number): Promise<ForkChoices> {
    const { record, runDir } = await this.forkTarget(k);
    const none = (unavailable: string): ForkChoices => ({ unavailable, checkpoints: [], turns: 0 });
    if (!vscode.workspace.isTrusted) return none('Forking runs the trainer: trust this workspace first.');
    if (!record || !runDir) return none('Forking needs a rollout of a run directory (its run.json and checkpoints).');
    if (!record.tokens?.ids) return none('This rollout has no token ids recorded: it cannot be forked.');
    const checkpoints = await listCheckpoints(runDir);
    if (!checkpoints.length) return none(`${runDir} has no checkpoint to fork from.`);
    return {
      ...forkCheckpointChoices(checkpoints, record),
      turns: generationTurns(record),
      started: this.forks?.started(runDir) ?? [],
    };
  }

  private async fork(p: ForkOptions & { model: number }): Promise<ForkResult> {
    if (!vscode.workspace.isTrusted) throw new Error('Forking runs the trainer: trust this workspace first.');
    const { record, runDir } = await this.forkTarget(p.model);
    if (!record || !runDir) throw new Error('Forking needs a rollout of a run directory.');
    if (!this.forks) {
      // The run's own Python first (run.json `python`, as Resume Training tries it), with what its config needs.
      const runPython = (await readRun(runDir))?.python;
      const needs = await runNeeds({ runDir, resume: true }).catch(() => ({}));
      const search = await findTrainerPython(this.context, vscode.Uri.file(runDir), needs, runPython);
      for (const t of search.tried)
        this.log.info(`fork: python candidate ${t.executable}: ${t.ok ? `torch ${t.torch}` : t.error}`);
      if (!search.found) {
        const message = noPythonMessage(
          search,
          needs,
          'Set up a trainer environment (Search Agent: Set Up Trainer Environment), or set searchAgent.pythonPath to a Python that has them.',
        );
        this.log.warn(`fork: ${message}`);
        void vscode.window
          .showErrorMessage(`Search Agent: cannot fork — ${message}`, 'Set Up Trainer Environment', 'Open Settings')
          .then((b) => {
            if (b === 'Set Up Trainer Environment') void vscode.commands.executeCommand(SETUP_COMMAND);
            if (b === 'Open Settings')
              void vscode.commands.executeCommand('workbench.action.openSettings', 'searchAgent.pythonPath');
          });
        throw new Error(message);
      }
      const note = runPythonNote(search, runPython);
      if (note) this.log.info(`fork: ${note.replace(/^resuming/, 'forking')}`);
      const { file, env } = nodeCommand();
      const launcher = {
        node: file,
        args: [join(this.context.extensionUri.fsPath, 'dist', 'server.js')],
        env: env.ELECTRON_RUN_AS_NODE ? { ELECTRON_RUN_AS_NODE: '1' } : undefined,
      };
      this.forks = new ForkHost({
        python: search.found.executable,
        serverLauncher: launcher,
        onLog: (l) => this.log.info(`[fork] ${l}`),
      });
    }
    const { model: _m, ...options } = p;
    const result = await this.forks.fork(runDir, record, options);
    this.log.info(
      `fork: ${record.id} at turn ${p.turn} from ${result.checkpoint}: ${result.continuations.length} continuations (policy server pids ${(await this.forks.pids()).join(', ')})`,
    );
    return result;
  }

  /** Stops the policy servers (and the env servers they used); a later fork starts new ones. */
  async stopForks(): Promise<void> {
    const f = this.forks;
    this.forks = undefined;
    if (!f) return;
    const pids = await f.pids();
    await f.stop();
    this.log.info(`fork: policy servers stopped (pids ${pids.join(', ') || 'none'})`);
  }

  /** Policy server pids (tests check none is left after the panel closes). */
  async forkPids(): Promise<number[]> {
    return (await this.forks?.pids()) ?? [];
  }

  private async chooseTokenizer(): Promise<void> {
    const picked = await vscode.window.showOpenDialog({
      canSelectFiles: true,
      canSelectMany: false,
      title: "A model directory's tokenizer.json",
      filters: { 'tokenizer.json': ['json'] },
    });
    const file = picked?.[0]?.fsPath;
    if (!file) return;
    try {
      this.tokenizer = await loadTextTokenizer(file);
    } catch (e) {
      void vscode.window.showErrorMessage(`Search Agent: ${(e as Error).message}`);
      return;
    }
    this.state = this.build({ ...(this.state?.position ?? { overlay: 'none', speed: 8 }), token: 0, entry: 0 });
    this.web?.endpoint.emit('state', this.state);
  }

  dispose(): void {
    void this.stopForks();
    this.web?.panel.dispose();
    for (const d of this.disposables) d.dispose();
  }
}
