/**
 * `search-agent-studio`: the command-line twin of the extension, on the same core.
 *
 *   search-agent-studio doctor [--python PATH]     what this machine has for training (Node, Python, torch, GPU)
 *   search-agent-studio serve [--port N]           the env server (Search-R1's /retrieve, /reward, /health)
 *   search-agent-studio demo                       the main job on the embedded defaults
 *   search-agent-studio train <config> | --resume   a training run (src/core/host)
 *   search-agent-studio export verl <config> --out DIR   a veRL run as files for a cluster
 *   search-agent-studio --version | --help
 */
import { parseArgs } from 'node:util';
import { UnreadableInput } from '../core/importers';
import { packageRoot } from '../core/paths';
import { probePython, pythonCandidates, type PythonProbe } from '../core/python';
import { VERSION } from '../core/version';
import { runServer, UsageError } from '../server/run';
import { exportCommand } from './export';
import { importCommand } from './import';
import { indexCommand } from './index-command';
import { rewardCommand } from './reward-command';
import { inspect, READ_ARGS, readOptionsFromArgs } from './inspect';
import { demoCommand, trainCommand } from './train';

const USAGE = `search-agent-studio ${VERSION}

Usage:
  search-agent-studio doctor [--python PATH]   check Node, the trainer's Python (torch, transformers, peft, trl) and GPUs
  search-agent-studio serve [--port N] [--corpus FILE | --index DIR | --url URL] [--retriever bm25|dense|remote|none]
                           [--model DIR] [--topk 3] [--workers N]
                                               run the env server on 127.0.0.1 (port 0 = any free port);
                                               with nothing named: BM25 over the demo corpus; BM25 searches
                                               on N threads sharing the index (default: the cores)
  search-agent-studio index <corpus.jsonl> --out DIR [--kind bm25|dense] [--model DIR] [--dtype float16]
                                               build a retrieval index (dense builds resume)
  search-agent-studio index --migrate DIR      rewrite a BM25 index of an older format version in place
  search-agent-studio demo [--python PATH] [--run-dir DIR]
                                               the main job on the embedded defaults: train a tiny search agent
                                               on the demo corpus (CPU, minutes); prints held-out exact match
                                               before and after
  search-agent-studio train <config.run.json> [--run-dir DIR] [--python PATH] [--port N]
  search-agent-studio train --resume --run-dir DIR
                                               start the env server and the trainer for a run config (Ctrl-C
                                               stops after a checkpoint; --resume continues a run)
  search-agent-studio export verl <config.run.json> --out DIR [--python PATH]
                                               a veRL run as files for your own cluster (Ray job, SLURM): launch
                                               script, Hydra overrides, our modules, the parquet (docs/engines.md)
  search-agent-studio inspect <file|run-dir> [--json] [--dialect auto|searchr1|toolcall|llama-json] [--search-tool NAME]
                                               summarise trajectories: our rollout JSONL, run directories,
                                               Search-R1 transcripts, veRL dumps, TRL completion tables;
                                               Search-R1 tags or tool calls (detected unless --dialect)
  search-agent-studio import <searchr1|verl|trl|searchr1-dataset> <src> --out <file.jsonl> [--dialect D] [--search-tool NAME]
                                               convert into our rollout JSONL (a dataset: our dataset JSONL)

  search-agent-studio reward <module.reward.ts|builtin:em|builtin:subem|builtin:f1|builtin:em-format> <rollouts>
                           [--json] [--out scored.jsonl]
                                               score rollouts with a reward module (sandboxed)

Exit codes: 0 success, 1 a check failed (or some items failed to score), 2 bad usage or unreadable input.
  search-agent-studio --version
`;


function describe(p: PythonProbe): string {
  if (!p.ok) return `  ✗ ${p.executable}: ${p.error ?? 'unusable'}`;
  const gpu = p.cuda ? `CUDA (${(p.cudaDevices ?? []).join(', ')})` : 'CPU only';
  return [
    `  ✓ ${p.executable}: Python ${p.python}, torch ${p.torch}, ${gpu}`,
    `    transformers ${p.transformers ?? 'not installed (only the built-in tiny policy)'}, peft ${p.peft ?? 'not installed (no LoRA)'}`,
    `    trl ${p.trl ?? 'not installed (engine "trl": pip install -r trainer/requirements-trl.txt)'}`,
  ].join('\n');
}

async function doctor(python?: string): Promise<PythonProbe | undefined> {
  console.log(`search-agent-studio ${VERSION}`);
  console.log(`Node ${process.versions.node} on ${process.platform}-${process.arch}`);
  console.log('Trainer Python (first that imports torch is used):');
  for (const candidate of python ? [python] : pythonCandidates([], packageRoot())) {
    const probe = await probePython(candidate);
    console.log(describe(probe));
    if (probe.ok) return probe;
  }
  console.log('  No Python with torch found. Run `bash scripts/setup.sh` to create .venv, or pass --python.');
  return undefined;
}

function usage(why: string): number {
  process.stderr.write(`search-agent-studio: ${why}\n\n${USAGE}`);
  return 2;
}

/** Unreadable input → its message (naming the file and why) and exit code 2. */
async function withInputErrors(fn: () => Promise<number>): Promise<number> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof UnreadableInput || (e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'EACCES' || (e as NodeJS.ErrnoException).code === 'EISDIR') {
      process.stderr.write(`search-agent-studio: ${(e as Error).message}\n`);
      return 2;
    }
    throw e;
  }
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case undefined:
    case '-h':
    case '--help':
    case 'help':
      process.stdout.write(USAGE);
      return command === undefined ? 2 : 0;
    case '-v':
    case '--version':
      console.log(VERSION);
      return 0;
    case 'doctor': {
      const { values } = parseArgs({ args: rest, options: { python: { type: 'string' } }, strict: true });
      return (await doctor(values.python)) ? 0 : 1;
    }
    case 'demo':
      return demoCommand(rest);
    case 'train':
      return trainCommand(rest);
    case 'serve':
      try {
        await runServer(rest);
      } catch (e) {
        if (e instanceof UsageError || (e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'EADDRINUSE' || (e as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
          process.stderr.write(`search-agent-studio serve: ${(e as NodeJS.ErrnoException).code === 'EADDRINUSE' ? 'port already in use: ' : ''}${(e as Error).message}\n`);
          return 2;
        }
        throw e;
      }
      return -1; // keeps running until a signal
    case 'reward':
      return withInputErrors(async () => {
        try {
          return await rewardCommand(rest, (s) => process.stdout.write(s), (s) => process.stderr.write(s));
        } catch (e) {
          if (e instanceof UsageError) return usage(e.message);
          throw e;
        }
      });
    case 'index':
      return withInputErrors(async () => {
        try {
          return await indexCommand(rest, (s) => process.stderr.write(s));
        } catch (e) {
          if (e instanceof UsageError) return usage(e.message);
          throw e;
        }
      });
    case 'inspect': {
      const { values, positionals } = parseArgs({ args: rest, options: { json: { type: 'boolean', default: false }, ...READ_ARGS }, allowPositionals: true, strict: true });
      if (positionals.length !== 1) return usage('inspect takes one path');
      const read = readOptionsFromArgs(values);
      if (typeof read === 'string') return usage(read);
      return withInputErrors(() =>
        inspect(positionals[0]!, { json: values.json ?? false, read, out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s) }),
      );
    }
    case 'export':
      return exportCommand(rest, (s) => process.stdout.write(s), (s) => process.stderr.write(s));
    case 'import': {
      const { values, positionals } = parseArgs({ args: rest, options: { out: { type: 'string' }, ...READ_ARGS }, allowPositionals: true, strict: true });
      if (positionals.length !== 2 || !values.out) return usage('import takes a kind, a source and --out <file.jsonl>');
      const read = readOptionsFromArgs(values);
      if (typeof read === 'string') return usage(read);
      return withInputErrors(() => importCommand(positionals[0]!, positionals[1]!, values.out!, (s) => process.stderr.write(s), read));
    }
    default:
      process.stderr.write(`unknown command: ${command}\n\n${USAGE}`);
      return 2;
  }
}

