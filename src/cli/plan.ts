/**
 * `search-agent-studio plan <config.run.json> [--gpu-memory 80GiB] [--gpus N] [--json]`: the run's memory, part by
 * part and device by device, from the model's config.json (src/core/plan). Exit 0 when it fits, 1 when it does not
 * (with the cheapest changes that would make it fit), 2 for a config or model directory that cannot be read.
 */
import { loadRunConfig, RunConfigError } from '../core/host/runConfig';
import { formatPlan, parseBytes, planJson, planRun, PlanError } from '../core/plan/plan';
import { UsageError } from '../server/run';
import { defineCommand } from './command';

export const planCommand = defineCommand({
  command: 'plan <config>',
  describe: "a run's GPU memory before it starts: weights, gradients, optimizer states, reference, activations, logits and KV cache per device, from the model's config.json; exit 1 when it does not fit (with the changes that would make it fit)",
  builder: (y) =>
    y
      .positional('config', { type: 'string', demandOption: true, describe: 'the run config (*.run.json)' })
      .option('gpu-memory', { type: 'string', default: '80GiB', describe: 'memory of one GPU (80GiB, 80GB, 141GiB, bytes)' })
      .option('gpus', { type: 'number', default: 1, describe: 'GPUs the run has (the builtin engine uses one)' })
      .option('device', { choices: ['cuda', 'cpu'] as const, default: 'cuda' as const, describe: 'plan for a CUDA GPU (bf16 autocast when model.dtype is auto) or the CPU' })
      .option('json', { type: 'boolean', default: false, describe: 'print the plan as JSON: {fits, gpu_memory_bytes, devices: [{total_bytes, parts}], suggestions, …}' })
      .example('$0 plan examples/one-gpu/qwen2.5-3b-grpo.run.json', 'does it fit one 80 GiB GPU?')
      .example('$0 plan my.run.json --gpu-memory 141GiB --json', 'for an H200, as JSON'),
  run: async (a, io) => {
    if (!Number.isInteger(a.gpus) || a.gpus < 1) throw new UsageError(`--gpus must be a positive integer, got ${a.gpus}`);
    let gpuMemoryBytes: number;
    try {
      gpuMemoryBytes = parseBytes(a['gpu-memory']);
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
    try {
      const loaded = await loadRunConfig(a.config);
      const plan = planRun(loaded, { gpuMemoryBytes, gpus: a.gpus, device: a.device });
      io.out(a.json ? `${JSON.stringify(planJson(plan), null, 2)}\n` : `${formatPlan(plan, loaded.file)}\n`);
      return plan.fits ? 0 : 1;
    } catch (e) {
      if (e instanceof RunConfigError || e instanceof PlanError) {
        io.err(`search-agent-studio plan: ${e.message}\n`);
        return 2;
      }
      throw e;
    }
  },
});
