/**
 * The trainer's Python, found the way issue 8 asks (for a resume, the Python the run started in first): `searchAgent.pythonPath`, then the Python extension's active
 * interpreter (when that extension is installed), then the usual candidates — the environment "Set Up Trainer
 * Environment" made (the extension's global storage, or the workspace's `.venv`), the extension's own `.venv`,
 * python3 on PATH, /usr/bin/python3 — each checked for the trainer's minimum versions (src/core/python.ts).
 * Also the two commands about it: "Set Up Trainer Environment" and "Check Trainer Environment (Doctor)".
 */
import { existsSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import * as vscode from 'vscode';
import { doctorReport } from '../../core/doctor';
import { checkRunConfig } from '../../core/host/runConfig';
import { SetupError, setupTrainerEnv } from '../../core/host/trainerEnv';
import { checkRunMemory } from '../../core/plan/check';
import { findPython, type PythonSearch, pythonCandidates, type TrainerNeeds, trainerNeeds } from '../../core/python';

export const SETUP_COMMAND = 'searchAgent.setUpTrainerEnvironment';

interface PythonExtensionApi {
  environments?: { getActiveEnvironmentPath(resource?: vscode.Uri): { path: string } | undefined };
  settings?: { getExecutionDetails(resource?: vscode.Uri): { execCommand?: string[] } };
}

/** The Python extension's active interpreter, if that extension is present (never fails). */
async function pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
  if (!ext) return undefined;
  try {
    const api = ext.isActive ? ext.exports : await ext.activate();
    const env = api?.environments?.getActiveEnvironmentPath(resource)?.path;
    if (env) return env;
    return api?.settings?.getExecutionDetails(resource)?.execCommand?.[0];
  } catch {
    return undefined;
  }
}

/** Folders whose `.venv` is a candidate: the extension's global storage (Set Up's default), the workspace, the extension. */
function venvRoots(context: vscode.ExtensionContext, resource?: vscode.Uri): string[] {
  const folder = resource ? vscode.workspace.getWorkspaceFolder(resource) : vscode.workspace.workspaceFolders?.[0];
  return [context.globalStorageUri.fsPath, ...(folder ? [folder.uri.fsPath] : []), context.extensionUri.fsPath];
}

/** The candidates in order; a resumed run's own Python (run.json `python`) before all: the versions it started with. */
async function candidates(
  context: vscode.ExtensionContext,
  resource?: vscode.Uri,
  runPython?: string,
): Promise<string[]> {
  const configured = vscode.workspace.getConfiguration('searchAgent', resource).get<string>('pythonPath') || undefined;
  return pythonCandidates(
    [runPython, configured, await pythonExtensionInterpreter(resource)],
    venvRoots(context, resource),
  );
}

export async function findTrainerPython(
  context: vscode.ExtensionContext,
  resource?: vscode.Uri,
  needs: TrainerNeeds = {},
  runPython?: string,
): Promise<PythonSearch> {
  return findPython(await candidates(context, resource, runPython), needs);
}

/** Whether this machine shows an NVIDIA driver (else a CPU-only torch is the sensible download). */
function hasNvidia(): boolean {
  return process.platform === 'linux' ? existsSync('/proc/driver/nvidia') : process.platform === 'win32';
}

/**
 * "Search Agent: Set Up Trainer Environment": where (the extension's global storage, or the workspace's `.venv`),
 * which torch (CPU-only when no NVIDIA driver is seen), then src/core/host/trainerEnv.ts with a cancellable progress
 * notification and the log in an output channel; the new interpreter is selected (searchAgent.pythonPath).
 * Tests point it at a fake requirements file with SAS_TRAINER_REQUIREMENTS (and SAS_TRAINER_PIP_ARGS, a JSON array).
 */
export async function setUpTrainerEnvironment(
  context: vscode.ExtensionContext,
  channel: vscode.LogOutputChannel,
): Promise<string | undefined> {
  if (!vscode.workspace.isTrusted) {
    void vscode.window
      .showWarningMessage(
        'Search Agent: setting up the trainer environment runs Python and pip; trust the workspace first.',
        'Manage Workspace Trust',
      )
      .then((b) => b && vscode.commands.executeCommand('workbench.trust.manage'));
    return undefined;
  }
  const folder = vscode.workspace.workspaceFolders?.[0];
  type Where = vscode.QuickPickItem & { dir: string; target: vscode.ConfigurationTarget };
  const places: Where[] = [
    {
      label: 'In the extension’s storage',
      description: 'shared by all your workspaces',
      detail: join(context.globalStorageUri.fsPath, '.venv'),
      dir: join(context.globalStorageUri.fsPath, '.venv'),
      target: vscode.ConfigurationTarget.Global,
    },
    ...(folder
      ? [
          {
            label: 'In this workspace (.venv)',
            description: vscode.workspace.asRelativePath(folder.uri),
            detail: join(folder.uri.fsPath, '.venv'),
            dir: join(folder.uri.fsPath, '.venv'),
            target: vscode.ConfigurationTarget.Workspace,
          },
        ]
      : []),
  ];
  const where = await vscode.window.showQuickPick(places, {
    title: 'Set Up Trainer Environment (1/2): where?',
    placeHolder: 'a virtual environment with the pinned torch, transformers and peft',
    ignoreFocusOut: true,
  });
  if (!where) return undefined;
  type Torch = vscode.QuickPickItem & { pipArgs: string[] };
  const cpu: Torch = {
    label: 'CPU-only torch',
    description: 'a smaller download (the demo runs on CPU)',
    pipArgs: ['--extra-index-url', 'https://download.pytorch.org/whl/cpu'],
  };
  const cuda: Torch = { label: 'torch from PyPI', description: 'with CUDA (several GB); runs on CPU too', pipArgs: [] };
  const torch = await vscode.window.showQuickPick(hasNvidia() ? [cuda, cpu] : [cpu, cuda], {
    title: 'Set Up Trainer Environment (2/2): which torch?',
    ignoreFocusOut: true,
  });
  if (!torch) return undefined;
  const requirements =
    process.env.SAS_TRAINER_REQUIREMENTS || join(context.extensionUri.fsPath, 'trainer', 'requirements.txt');
  const pipArgs = [
    ...torch.pipArgs,
    ...(process.env.SAS_TRAINER_PIP_ARGS ? (JSON.parse(process.env.SAS_TRAINER_PIP_ARGS) as string[]) : []),
  ];
  const configured = vscode.workspace.getConfiguration('searchAgent').get<string>('pythonPath') || undefined;
  const basePythons = [
    ...new Set(
      [
        await pythonExtensionInterpreter(),
        configured,
        'python3',
        'python3.12',
        'python3.11',
        'python3.10',
        '/usr/bin/python3',
      ].filter((p): p is string => !!p),
    ),
  ];
  channel.show(true);
  channel.info(`setting up the trainer environment in ${where.dir} from ${requirements}`);
  try {
    const r = await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: 'Search Agent: setting up the trainer environment',
        cancellable: true,
      },
      (progress, token) => {
        const ac = new AbortController();
        token.onCancellationRequested(() => ac.abort());
        return setupTrainerEnv({
          basePythons,
          venvDir: where.dir,
          requirements,
          pipArgs,
          signal: ac.signal,
          onLog: (l) => channel.info(l),
          onProgress: (p) => progress.report({ message: p.message }),
        });
      },
    );
    await vscode.workspace.getConfiguration('searchAgent').update('pythonPath', r.python, where.target);
    channel.info(`selected ${r.python} (searchAgent.pythonPath)`);
    void vscode.window.showInformationMessage(
      `Search Agent: trainer environment ready — Python ${r.probe.python}, torch ${r.probe.torch}${r.probe.cuda ? ' (CUDA)' : ' (CPU)'}; selected ${r.python}.`,
    );
    return r.python;
  } catch (e) {
    if (!(e instanceof SetupError)) throw e;
    channel.error(e.message);
    if (e.cancelled) void vscode.window.showInformationMessage('Search Agent: trainer environment setup cancelled.');
    else
      void vscode.window
        .showErrorMessage(`Search Agent: could not set up the trainer environment: ${e.message}`, 'Show Log')
        .then((b) => b && channel.show(true));
    return undefined;
  }
}

/** "Check Trainer Environment (Doctor)": the doctor's report (as the CLI prints it) in a read-only document. */
export class DoctorReport implements vscode.TextDocumentContentProvider {
  static readonly scheme = 'search-agent-doctor';
  private text = '';
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  constructor(private readonly context: vscode.ExtensionContext) {}

  provideTextDocumentContent(): string {
    return this.text;
  }

  async show(): Promise<void> {
    const uri = vscode.Uri.from({ scheme: DoctorReport.scheme, path: '/Trainer Environment.md' });
    const active = vscode.window.activeTextEditor?.document;
    let needs: TrainerNeeds = {};
    if (active?.fileName.endsWith('.run.json')) {
      try {
        needs = trainerNeeds(JSON.parse(active.getText()));
      } catch {
        /* an unfinished config: torch only */
      }
    }
    const report = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: 'Search Agent: checking the trainer environment' },
      async () =>
        doctorReport(
          await candidates(this.context, active?.uri),
          [
            `Search Agent Studio ${this.context.extension.packageJSON.version}`,
            `VS Code ${vscode.version}, Node ${process.versions.node} on ${process.platform}-${process.arch}`,
          ],
          needs,
        ),
    );
    // the active run config's memory plan, against the GPU that Python sees (src/core/plan)
    let memory: string[] = [];
    if (active?.fileName.endsWith('.run.json')) {
      try {
        const loaded = checkRunConfig(JSON.parse(active.getText()), active.fileName, dirname(active.fileName));
        memory = [
          `${basename(active.fileName)}: ${checkRunMemory(loaded, { cuda: report.found?.cuda, gpuMemoryBytes: report.found?.cudaMemory?.[0] }).line}`,
        ];
      } catch (e) {
        memory = [`${basename(active.fileName)}: memory not planned (${(e as Error).message})`];
      }
    }
    this.text = [
      '# Trainer environment',
      '',
      '```',
      ...report.lines,
      ...memory,
      '```',
      '',
      report.found
        ? `Training uses \`${report.found.executable}\`.`
        : `No usable Python: run **Search Agent: Set Up Trainer Environment**, or set \`searchAgent.pythonPath\`.`,
      '',
    ].join('\n');
    this.changed.fire(uri);
    const doc = await vscode.workspace.openTextDocument(uri);
    await vscode.languages.setTextDocumentLanguage(doc, 'markdown');
    await vscode.window.showTextDocument(doc, { preview: true });
  }
}
