/**
 * `search-agent-studio export verl <config.run.json> --out DIR [--python PATH]`: a veRL run as files for one's own
 * cluster (src/core/host/verl.ts; docs/engines.md). veRL's Python: --python (only it, when named), else the
 * config's verl.python, SAS_VERL_PYTHON, .venv-verl (the first with veRL 0.9.1).
 */
import { readFile, rename, rm, rmdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { loadRunConfig, RunConfigError } from '../core/host/runConfig';
import { exportVerl, findVerlPython, noVerlPythonMessage, verlPythonCandidates } from '../core/host/verl';
import { packageRoot } from '../core/paths';
import { checkRunMemory } from '../core/plan/check';
import { type CliIo, defineCommand } from './command';
import { exportJsonl } from './exportJsonl';
import { withInputErrors } from './inputErrors';
import { checkOutputDir, tempSibling } from './output';

/** Whether a directory is an earlier `export verl` (its overrides.txt says so). */
async function isVerlExport(dir: string): Promise<boolean> {
  const head = await readFile(join(dir, 'overrides.txt'), 'utf8').catch(() => '');
  return head.startsWith('# Hydra overrides of veRL') && head.includes('search-agent-studio export verl');
}

export interface ExportArgs {
  engine: string;
  config: string;
  out: string;
  python?: string;
}

export const exportCommandDef = defineCommand({
  command: 'export <engine> <config>',
  describe:
    "a run config as files for your own cluster (verl: launch script, Hydra overrides, our modules, the parquet); or a run's recorded rollouts as v2 JSONL (jsonl <run-dir|step-dir> --out F.jsonl|DIR)",
  builder: (y) =>
    y
      .positional('engine', {
        type: 'string',
        choices: ['verl', 'jsonl'],
        demandOption: true,
        describe: 'the engine to export for (verl), or jsonl: rollouts as v2 JSONL',
      })
      .positional('config', {
        type: 'string',
        demandOption: true,
        describe:
          'the run config (*.run.json); for jsonl: a run directory, a step of its token store, or a rollout file',
      })
      .option('out', {
        type: 'string',
        demandOption: true,
        describe: 'the directory to write (jsonl: a .jsonl file, or a directory for one file per step)',
      })
      .option('python', {
        type: 'string',
        describe:
          "veRL's Python, the only one tried when named (default: the config's verl.python, SAS_VERL_PYTHON, .venv-verl)",
      })
      .example(
        '$0 export verl examples/qwen2.5-3b-grpo-verl.run.json --out verl-run',
        'write a veRL launch for a Ray cluster or SLURM',
      )
      .example('$0 export jsonl runs/my-run --out my-run.jsonl', "a run's token store as v2 JSONL"),
  run: (a, io) =>
    withInputErrors(io, () => (a.engine === 'jsonl' ? exportJsonl(a.config, a.out, io) : exportCommand(a, io))),
});

export async function exportCommand(a: ExportArgs, io: CliIo): Promise<number> {
  try {
    const loaded = await loadRunConfig(a.config);
    // Written into a new directory (built beside it and renamed into place: a failed export leaves nothing), or over
    // an earlier export of ours (its run/ kept); never into a folder of the user's, never one holding the config.
    const data = [loaded.config.data?.train, loaded.config.data?.eval]
      .filter((p): p is string => typeof p === 'string' && !p.startsWith('builtin:'))
      .map((p) => resolve(loaded.base, p));
    const { exists } = await checkOutputDir(a.out, {
      inputs: [loaded.file, ...data],
      ours: isVerlExport,
      what: 'a veRL export',
    });
    const search = await findVerlPython(verlPythonCandidates(loaded, [a.python], packageRoot()));
    if (!search.found) {
      io.err(`${noVerlPythonMessage(search)}\n`);
      return 1;
    }
    let result;
    if (exists) result = await exportVerl(loaded, a.out, search.found.executable);
    else {
      const temp = tempSibling(a.out);
      try {
        const built = await exportVerl(loaded, temp, search.found.executable);
        await rmdir(a.out).catch(() => undefined); // an empty directory the user made for it
        await rename(temp, a.out);
        result = { ...built, dir: resolve(a.out) };
      } catch (e) {
        await rm(temp, { recursive: true, force: true });
        throw e;
      }
    }
    io.out(
      `exported a veRL ${search.found.verl} run to ${result.dir}:\n${result.files.map((f) => `  ${f}\n`).join('')}  trainer/search_agent_trainer/ (our agent loops, tool, reward bridge, recorder)\n`,
    );
    for (const note of result.notes) io.out(`note: ${note}\n`);
    // the memory plan for GPUs of 80 GiB: what `train` would set is not applied to an export (its GPUs are not known)
    const memory = checkRunMemory(loaded);
    io.out(`${memory.line} (search-agent-studio plan ${loaded.file} --gpu-memory SIZE plans other GPUs)\n`);
    const sets = memory.plan?.chosen ?? [];
    if (sets.length)
      io.out(
        `note: the export keeps veRL's defaults where the config leaves ${sets.map((x) => x.key).join(' and ')} unset; for GPUs of 80 GiB set ${sets.map((x) => `${x.key}: ${JSON.stringify(x.value)}`).join(', ')} in the config and export again (train sets ${sets.length === 1 ? 'it' : 'them'} itself)\n`,
      );
    io.out(
      `${result.checked ? 'checked: every override composed with veRL’s own config' : 'not checked against veRL’s config (this Python has no veRL)'}\n`,
    );
    io.out(
      `launch: ${result.dir}/env-server.sh on every node, then SAS_ENV_URL=http://127.0.0.1:8790 PYTHON=<veRL's python> ${result.dir}/launch.sh (RAY_ADDRESS joins a Ray cluster; docs/engines.md)\n`,
    );
    return 0;
  } catch (e) {
    if (e instanceof RunConfigError) {
      io.err(`search-agent-studio export: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
}
