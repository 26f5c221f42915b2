/**
 * The plans the GPU check prints (scripts/gpu-check.sh, trainer/search_agent_trainer/benchmark.py --memory): each
 * bench/gpu/*.run.json planned for one 80 GiB GPU (the smoke config, which runs on CPU, for the CPU), written to
 * bench/gpu/plans.json by `npm run -s gpu-plans`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../paths';
import { DEFAULT_GPU_MEMORY, planRun } from '../plan/plan';
import { checkRunConfig } from './runConfig';

export const GPU_PLANS_FILE = join(packageRoot(), 'bench', 'gpu', 'plans.json');

/** The text of bench/gpu/plans.json: per config (its file name without .run.json), the plan's phases and parts. */
export function gpuCheckPlans(): string {
  const dir = join(packageRoot(), 'bench', 'gpu');
  const out: Record<string, unknown> = {};
  for (const f of readdirSync(dir)
    .filter((x) => x.endsWith('.run.json'))
    .sort()) {
    const file = join(dir, f);
    const loaded = checkRunConfig(JSON.parse(readFileSync(file, 'utf8')), file, dir);
    const device = loaded.config.model.device === 'cpu' ? 'cpu' : 'cuda';
    const plan = planRun(loaded, { gpuMemoryBytes: DEFAULT_GPU_MEMORY, device });
    const [d] = plan.devices;
    out[f.replace(/\.run\.json$/, '')] = {
      device,
      gpu_memory_bytes: plan.gpu_memory_bytes,
      fits: plan.fits,
      phases: d!.phases,
      parts: d!.parts,
      summary: plan.summary,
    };
  }
  return `${JSON.stringify(out, null, 2)}\n`;
}
