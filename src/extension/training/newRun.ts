/**
 * "Search Agent: New Training Run…": a few quick picks, then a *.run.json written from a template
 * (src/core/host/templates.ts) and opened; the editor validates it through the contributed JSON Schema.
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import * as vscode from 'vscode';
import { type NewRunAnswers, newRunConfig } from '../../core/host/templates';
import { checkRunMemory } from '../../core/plan/check';

type Pick<T> = vscode.QuickPickItem & { value: T };

async function pick<T>(title: string, items: Pick<T>[]): Promise<T | undefined> {
  return (await vscode.window.showQuickPick(items, { title, ignoreFocusOut: true }))?.value;
}

async function folder(title: string): Promise<string | undefined> {
  return (
    await vscode.window.showOpenDialog({ title, canSelectFolders: true, canSelectFiles: false, canSelectMany: false })
  )?.[0]?.fsPath;
}

async function file(title: string, filters?: Record<string, string[]>): Promise<string | undefined> {
  return (await vscode.window.showOpenDialog({ title, canSelectFiles: true, canSelectMany: false, filters }))?.[0]
    ?.fsPath;
}

export async function newTrainingRun(): Promise<vscode.Uri | undefined> {
  const ws = vscode.workspace.workspaceFolders?.[0];
  if (!ws) {
    void vscode.window.showWarningMessage('Search Agent: open a folder first; the run config and its runs live in it.');
    return undefined;
  }
  const title = 'New Training Run';
  const engine = await pick<'builtin' | 'trl'>(`${title} (1/5): the engine`, [
    {
      label: 'Built-in trainer',
      description: 'one process; GRPO, PPO, REINFORCE++; every formula in one file',
      value: 'builtin',
    },
    {
      label: 'TRL (Hugging Face)',
      description: 'TRL’s GRPOTrainer through accelerate: several GPUs or machines; GRPO',
      value: 'trl',
    },
  ]);
  if (!engine) return undefined;
  const model = await pick<'tiny' | 'hf' | 'hf-lora'>(`${title} (2/5): the policy`, [
    engine === 'trl'
      ? {
          label: 'Tiny random Qwen2-style model (CPU, minutes)',
          description: 'the trl-tiny example: shows the machinery, does not learn',
          value: 'tiny',
        }
      : {
          label: 'Tiny built-in policy (CPU, minutes)',
          description: 'the demo: learns to search on a laptop',
          value: 'tiny',
        },
    {
      label: 'A local Hugging Face model directory',
      description: 'e.g. Qwen2.5-3B, full fine-tuning on GPU',
      value: 'hf',
    },
    { label: 'A local Hugging Face model directory, LoRA', description: 'needs peft', value: 'hf-lora' },
  ]);
  if (!model) return undefined;
  let modelAnswer: NewRunAnswers['model'] = { kind: 'tiny' };
  if (model !== 'tiny') {
    const path = await folder('The model directory (config.json, weights, tokenizer)');
    if (!path) return undefined;
    modelAnswer = { kind: 'hf', path, lora: model === 'hf-lora' };
  }
  const dataKind = await pick<'demo' | 'files'>(`${title} (3/5): the questions`, [
    {
      label: 'The demo task',
      description: 'invented facts, one- and two-hop questions, a held-out split',
      value: 'demo',
    },
    {
      label: 'My dataset (JSONL: id, question, golden)',
      description: 'convert Search-R1 parquet with `search-agent-studio import searchr1-dataset`',
      value: 'files',
    },
  ]);
  if (!dataKind) return undefined;
  let data: NewRunAnswers['data'] = { kind: 'demo' };
  if (dataKind === 'files') {
    const train = await file('Training questions (JSONL)', { JSONL: ['jsonl'] });
    if (!train) return undefined;
    const evalFile = await file('Held-out questions (JSONL) — cancel for none', { JSONL: ['jsonl'] });
    data = { kind: 'files', train, eval: evalFile };
  }
  const retrieverKind = await pick<'demo' | 'bm25-index' | 'bm25-corpus' | 'dense' | 'remote'>(
    `${title} (4/5): the retriever`,
    [
      { label: 'BM25 over the demo corpus', value: 'demo' },
      { label: 'A BM25 index', description: 'built with `search-agent-studio index`', value: 'bm25-index' },
      {
        label: 'BM25 over a corpus file (JSONL: id, contents)',
        description: 'indexed once, cached',
        value: 'bm25-corpus',
      },
      { label: 'A dense (E5) index', description: 'index + ONNX encoder directories', value: 'dense' },
      {
        label: 'A remote /retrieve URL',
        description: 'Search-R1’s retrieval server, or another of ours',
        value: 'remote',
      },
    ],
  );
  if (!retrieverKind) return undefined;
  let retriever: NewRunAnswers['retriever'] = { kind: 'demo' };
  if (retrieverKind === 'bm25-index') {
    const index = await folder('The BM25 index directory');
    if (!index) return undefined;
    retriever = { kind: 'bm25', index };
  } else if (retrieverKind === 'bm25-corpus') {
    const corpus = await file('The corpus (JSONL)', { JSONL: ['jsonl'] });
    if (!corpus) return undefined;
    retriever = { kind: 'bm25', corpus };
  } else if (retrieverKind === 'dense') {
    const index = await folder('The dense index directory');
    const encoder = index && (await folder('The E5 encoder directory (model.onnx + tokenizer.json)'));
    if (!index || !encoder) return undefined;
    retriever = { kind: 'dense', index, model: encoder };
  } else if (retrieverKind === 'remote') {
    const url = await vscode.window.showInputBox({
      title: 'The /retrieve URL',
      value: 'http://127.0.0.1:8000/retrieve',
      ignoreFocusOut: true,
      validateInput: (v) => (/^https?:\/\/\S+$/.test(v) ? undefined : 'an http(s) URL'),
    });
    if (!url) return undefined;
    retriever = { kind: 'remote', url };
  }
  const algorithm =
    engine === 'trl'
      ? 'grpo'
      : await pick<'grpo' | 'ppo'>(`${title} (5/5): the algorithm`, [
          { label: 'GRPO', description: 'group-relative advantages, no critic (Search-R1’s GRPO runs)', value: 'grpo' },
          { label: 'PPO', description: 'GAE with a value head', value: 'ppo' },
        ]);
  if (!algorithm) return undefined;
  const name = await vscode.window.showInputBox({
    title: 'Run name',
    value:
      modelAnswer.kind === 'tiny'
        ? engine === 'trl'
          ? 'trl-tiny'
          : 'demo'
        : `search-agent-${engine === 'trl' ? 'trl-' : ''}${algorithm}`,
    ignoreFocusOut: true,
    validateInput: (v) => (/^[\w.-]+$/.test(v) ? undefined : 'letters, digits, . _ -'),
  });
  if (!name) return undefined;
  let target = join(ws.uri.fsPath, `${name}.run.json`);
  for (let i = 2; existsSync(target); i++) target = join(ws.uri.fsPath, `${name}-${i}.run.json`);
  const base = dirname(target);
  const rel = (p: string) => {
    const r = relative(base, p);
    return r.startsWith('..') && r.split('/').filter((s) => s === '..').length > 2 ? p : r || '.';
  };
  const config = newRunConfig({ name, engine, model: modelAnswer, data, retriever, algorithm, relativeTo: rel });
  await writeFile(target, `${JSON.stringify(config, null, 2)}\n`);
  const uri = vscode.Uri.file(target);
  await vscode.window.showTextDocument(uri);
  // the memory plan of a Hugging Face run (one 80 GiB GPU; Start Training checks it against the real GPU)
  const check = checkRunMemory({ config, base }, {});
  const fits = !check.plan || check.plan.fits;
  const say = `Search Agent: wrote ${vscode.workspace.asRelativePath(uri)}.${check.plan ? ` ${check.line[0]!.toUpperCase()}${check.line.slice(1)}.` : ''}`;
  void (
    fits
      ? vscode.window.showInformationMessage(say, 'Start Training')
      : vscode.window.showWarningMessage(say, 'Start Training')
  ).then((b) => {
    if (b) void vscode.commands.executeCommand('searchAgent.startTraining', uri);
  });
  return uri;
}
