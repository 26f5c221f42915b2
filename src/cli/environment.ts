/**
 * `doctor` (what this machine has for training) and `setup` (a virtual environment with the trainer's pinned
 * requirements), on the same core as the editor's "Doctor" report and "Set Up Trainer Environment".
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { doctorReport } from '../core/doctor';
import { type LoadedRunConfig, loadRunConfig } from '../core/host/runConfig';
import { SetupError, setupTrainerEnv } from '../core/host/trainerEnv';
import { packageRoot } from '../core/paths';
import { checkRunMemory } from '../core/plan/check';
import { type TrainerNeeds, trainerNeeds } from '../core/python';
import { VERSION } from '../core/version';
import { UsageError } from '../server/run';
import { defineCommand } from './command';
import { cliPythonCandidates } from './train';

export const doctorCommand = defineCommand({
  command: 'doctor',
  describe:
    "check Node, the trainer's Python (torch, transformers, peft against their minimums) and GPUs, and with --config the run's memory plan; exit 1 when no Python is usable or the run does not fit",
  builder: (y) =>
    y.option('python', { type: 'string', describe: 'check only this Python' }).option('config', {
      type: 'string',
      describe:
        "a run config: also check what it needs (transformers for a Hugging Face model, peft for LoRA) and whether it fits the GPU's memory (the memory plan)",
    }),
  run: async (a, io) => {
    let needs: TrainerNeeds = {};
    let loaded: LoadedRunConfig | undefined;
    if (a.config) {
      try {
        loaded = await loadRunConfig(a.config);
        needs = trainerNeeds(loaded.config);
      } catch (e) {
        throw new UsageError((e as Error).message);
      }
    }
    const verl = a.python
      ? []
      : [
          process.env.SAS_VERL_PYTHON,
          join(process.cwd(), '.venv-verl', 'bin', 'python'),
          join(packageRoot(), '.venv-verl', 'bin', 'python'),
        ].filter((p, i, all): p is string => !!p && existsSync(p) && all.indexOf(p) === i);
    const report = await doctorReport(
      cliPythonCandidates(a.python),
      [`search-agent-studio ${VERSION}`, `Node ${process.versions.node} on ${process.platform}-${process.arch}`],
      needs,
      (l) => io.out(`${l}\n`),
      verl,
    );
    if (!report.found)
      io.out(
        '  Make one with `search-agent-studio setup` (a .venv with the pinned torch, transformers and peft), or pass --python.\n',
      );
    let fits = true;
    if (loaded) {
      const check = checkRunMemory(loaded, { cuda: report.found?.cuda, gpuMemoryBytes: report.found?.cudaMemory?.[0] });
      io.out(`${check.line}\n`);
      fits = !check.plan || check.plan.fits;
    }
    return report.found && fits ? 0 : 1;
  },
});

export const setupCommand = defineCommand({
  command: 'setup',
  describe:
    "make a virtual environment with the trainer's pinned requirements (torch, transformers, peft) and check it",
  builder: (y) =>
    y
      .option('venv', {
        type: 'string',
        default: '.venv',
        describe: 'where to make it (train, demo and doctor look in ./.venv)',
      })
      .option('python', {
        type: 'string',
        describe: 'the Python ≥ 3.10 to make it from (default: python3, /usr/bin/python3)',
      })
      .option('requirements', {
        type: 'string',
        describe: "the requirements file (default: the trainer's pinned trainer/requirements.txt)",
      })
      .option('pip-arg', {
        type: 'string',
        array: true,
        describe: 'an extra pip argument (repeatable), e.g. --pip-arg=--index-url=https://download.pytorch.org/whl/cpu',
      }),
  run: async (a, io) => {
    const venvDir = resolve(a.venv);
    try {
      const r = await setupTrainerEnv({
        basePythons: a.python ? [a.python] : ['python3', '/usr/bin/python3'],
        venvDir,
        requirements: a.requirements ?? join(packageRoot(), 'trainer', 'requirements.txt'),
        pipArgs: a['pip-arg'] ?? [],
        onLog: (l) => io.err(`${l}\n`),
        onProgress: (p) => io.out(`[${p.phase}] ${p.message}\n`),
      });
      io.out(
        `ready: ${r.python} (Python ${r.probe.python}, torch ${r.probe.torch}${r.probe.cuda ? ', CUDA' : ', CPU only'}, transformers ${r.probe.transformers ?? '–'}, peft ${r.probe.peft ?? '–'}); log ${r.log}\n`,
      );
      return 0;
    } catch (e) {
      if (!(e instanceof SetupError)) throw e;
      io.err(`search-agent-studio setup: ${e.message}\n`);
      return 1;
    }
  },
});
