/**
 * `search-agent-studio plan <config.run.json> [--model DIR|config.json] [--gpu-memory 80GiB] [--gpus N] [--json]`: the
 * run's memory, part by part and device by device, from the model's config.json (src/core/plan). Planning needs
 * nothing else: the config's schema is checked, but its data, retriever and model files need not exist (a fresh
 * checkout plans the examples with `--model examples/one-gpu/models/...`). Exit 0 when it fits, 1 when it does not
 * (with the cheapest changes that would make it fit), 2 for a config or model shape that cannot be read.
 */
import { loadRunConfig, RunConfigError } from '../core/host/runConfig';
import { formatPlan, PlanError, parseBytes, planJson, planRun, resolveModelArg } from '../core/plan/plan';
import { resolveRunConfig } from '../core/run/presets';
import { UsageError } from '../server/run';
import { defineCommand } from './command';

/** The help's examples, each run as written from the repository root by test/unit/plan.test.ts. */
export const PLAN_EXAMPLES: [string, string][] = [
  [
    'plan examples/one-gpu/qwen2.5-3b-grpo.run.json --model qwen2.5-3b',
    "does Search-R1's GRPO on Qwen2.5-3B fit one 80 GiB GPU? (the shape that ships with the package: no weights needed)",
  ],
  [
    'plan examples/one-gpu/qwen2.5-3b-grpo-trl.run.json --model qwen2.5-3b',
    'the same with TRL: vLLM colocated in sleep mode, a bf16 reference',
  ],
  [
    'plan examples/one-gpu/qwen2.5-3b-grpo-verl.run.json --model qwen2.5-3b',
    'the same with veRL: the offload the plan chooses for one GPU',
  ],
  [
    'plan examples/qwen2.5-3b-grpo-verl.run.json --model examples/one-gpu/models/qwen2.5-3b/config.json --gpu-memory 141GiB --json',
    'veRL on 8 H200s, as JSON',
  ],
];

export const planCommand = defineCommand({
  command: 'plan <config>',
  describe:
    "a run's GPU memory before it starts: weights, gradients, optimizer states, reference, activations, logits, KV cache and the rollout engine's share per device, from the model's config.json; for veRL the offload it would choose; exit 1 when it does not fit (with the changes that would make it fit)",
  builder: (y) => {
    let b = y
      .positional('config', {
        type: 'string',
        demandOption: true,
        describe: 'the run config (*.run.json); its data, retriever and model files need not exist',
      })
      .option('model', {
        type: 'string',
        describe:
          "the model's shape: a model directory, its config.json, or a shape that ships with the package (qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, qwen2.5-7b: examples/one-gpu/models/); default: model.path's",
      })
      .option('gpu-memory', {
        type: 'string',
        default: '80GiB',
        describe: 'memory of one GPU, 1 GiB at least (80GiB, 80GB, 141GiB, or bytes)',
      })
      .option('gpus', {
        type: 'string',
        describe:
          "GPUs the run has (default: the config's: devices, verl.gpus_per_node × verl.nodes; the builtin engine uses one)",
      })
      .option('device', {
        choices: ['cuda', 'cpu'] as const,
        describe:
          "plan for a CUDA GPU (bf16 autocast when model.dtype is auto) or the CPU (default: the config's model.device; auto: cuda)",
      })
      .option('json', {
        type: 'boolean',
        default: false,
        describe:
          'print the plan as JSON: {fits, gpu_memory_bytes, devices: [{total_bytes, parts, phases, count}], chosen, cpu, suggestions, suggested_changes, …}',
      });
    for (const [cmd, what] of PLAN_EXAMPLES) b = b.example(`$0 ${cmd}`, what);
    return b;
  },
  run: async (a, io) => {
    let gpus: number | undefined;
    if (a.gpus !== undefined) {
      gpus = /^\s*\d+\s*$/.test(String(a.gpus)) ? Number(a.gpus) : Number.NaN;
      if (!Number.isSafeInteger(gpus) || gpus < 1)
        throw new UsageError(
          `--gpus: expected a positive integer (the GPUs the run has), got ${JSON.stringify(a.gpus)}`,
        );
    }
    let gpuMemoryBytes: number;
    try {
      gpuMemoryBytes = parseBytes(a['gpu-memory']);
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
    try {
      const loaded = await loadRunConfig(a.config, { files: false });
      // the built-in tiny policy (a few MB) is a valid run with nothing to plan: said, exit 0 (doctor --config says
      // the same), not a usage error — unless --model names a Hugging Face model to plan the config's run with
      if (resolveRunConfig(loaded.config).model.kind !== 'hf' && a.model === undefined) {
        io.out(
          a.json
            ? `${JSON.stringify({ planned: false, model: 'tiny', reason: 'the built-in tiny policy needs a few MB' })}\n`
            : `memory plan: ${loaded.file}\n  the built-in tiny policy (model.kind "tiny"): a few MB, nothing to plan; the memory plan is for Hugging Face models (model.kind "hf", or --model)\n`,
        );
        return 0;
      }
      // the device the run trains on: --device, else the config's (a CPU run is planned for the CPU, not a GPU)
      const device = a.device ?? (loaded.config.model.device === 'cpu' ? 'cpu' : 'cuda');
      const plan = planRun(loaded, {
        gpuMemoryBytes,
        gpus,
        device,
        model: a.model === undefined ? undefined : resolveModelArg(a.model),
      });
      io.out(
        a.json
          ? `${JSON.stringify({ ...planJson(plan), device }, null, 2)}\n`
          : `${formatPlan(plan, loaded.file, { device })}\n`,
      );
      // on the CPU only a problem (a setting that cannot run) fails it: no GPU's memory is checked
      return plan.fits || (device === 'cpu' && !plan.problems.length) ? 0 : 1;
    } catch (e) {
      if (e instanceof RunConfigError || e instanceof PlanError) {
        io.err(`search-agent-studio plan: ${e.message}\n`);
        return 2;
      }
      throw e;
    }
  },
});
