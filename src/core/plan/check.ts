/**
 * The memory check before a run starts (the run host's, so `train`, "Start Training" and "Resume" all make it), and
 * the lines `doctor --config` and "New Training Run…" show: a Hugging Face model trained on GPUs (any engine; veRL
 * always trains on GPUs) is planned (plan.ts) against the GPU's memory (the trainer's Python reports it; 80 GiB when
 * it cannot be read); a run that does not fit is refused with the plan's verdict and the changes that would make it
 * fit, unless forced. What the plan chooses for keys the config leaves unset (veRL's offload) is `chosen`: the host
 * launches the run with it.
 */
import type { RunConfig } from '../run/config';
import { DEFAULT_GPU_MEMORY, type MemoryPlan, PlanError, peakText, planRun } from './plan';

export class MemoryPlanError extends Error {
  constructor(
    message: string,
    readonly plan: MemoryPlan,
  ) {
    super(message);
    this.name = 'MemoryPlanError';
  }
}

export interface MemoryCheck {
  /** The plan, when the run was planned. */
  plan?: MemoryPlan;
  /** Why it was not planned (a CPU run, another engine, a model directory the planner cannot read). */
  skipped?: string;
  /** One line: the verdict, or why there is none. */
  line: string;
}

/** Whether a run would use a GPU: a Hugging Face model on `model.device` cuda, or auto where the Python sees CUDA
 * (`cuda` undefined: not known, assumed); a veRL run always does. */
function onGpu(config: RunConfig, cuda: boolean | undefined): boolean {
  const d = config.model.device ?? 'auto';
  return d === 'cuda' || (d === 'auto' && cuda !== false);
}

const gib = (n: number) => `${(n / 2 ** 30).toFixed(1)} GiB`;

/** Plans `loaded` for GPUs of `gpuMemoryBytes` (default 80 GiB; as many as the config's engine uses); `cuda`: whether
 * the trainer's Python sees a GPU. What the planner cannot plan (a LoRA target it cannot size, a model config.json or
 * an accelerate config it cannot read: PlanError, naming the file and the field) is `skipped`, never a refusal: the
 * run may still start (the trainer's own checks stand). */
export function checkRunMemory(
  loaded: { config: RunConfig; base: string; file?: string },
  options: { gpuMemoryBytes?: number; cuda?: boolean } = {},
): MemoryCheck {
  const c = loaded.config;
  if (c.model.kind !== 'hf')
    return { skipped: 'the built-in tiny policy', line: 'memory: the built-in tiny policy (a few MB; not planned)' };
  if (c.engine !== 'verl' && !onGpu(c, options.cuda))
    return {
      skipped: 'a CPU run',
      line: 'memory: a CPU run (not planned; `search-agent-studio plan --device cpu` plans it)',
    };
  const gpuMemoryBytes = options.gpuMemoryBytes ?? DEFAULT_GPU_MEMORY;
  let plan: MemoryPlan;
  try {
    plan = planRun(loaded, { gpuMemoryBytes });
  } catch (e) {
    if (e instanceof PlanError) return { skipped: e.message, line: `memory: not planned: ${e.message}` };
    throw e;
  }
  const need = Math.max(...plan.devices.map((d) => d.total_bytes));
  const count = plan.devices.reduce((a, d) => a + (d.count ?? 1), 0);
  const gpus = count === 1 ? `one GPU of ${gib(gpuMemoryBytes)}` : `each of ${count} GPUs of ${gib(gpuMemoryBytes)}`;
  const sets = plan.chosen.length
    ? `; the plan sets ${plan.chosen.map((x) => `${x.key}: ${JSON.stringify(x.value)}`).join(', ')}`
    : '';
  const line = plan.fits
    ? `memory: fits ${gpus} (${gib(need)} of ${gib(plan.usable_bytes)} usable; ${plan.summary}${sets})`
    : need <= plan.usable_bytes && plan.problems.length
      ? `memory: cannot start on ${gpus}: ${plan.problems.join('; ')}${plan.suggestions.length ? `; would fit: ${plan.suggestions.join('; or ')}` : ''}`
      : `memory: does not fit ${gpus}: ${gib(need)} needed, ${gib(plan.usable_bytes)} usable, largest in ${peakText(plan)} (${plan.summary}); would fit: ${plan.suggestions.join('; or ')}`;
  return { plan, line };
}

/** Throws MemoryPlanError when the run was planned and does not fit (`force`: never). */
export function refuseWhatDoesNotFit(check: MemoryCheck, file: string, force: boolean): void {
  if (force || !check.plan || check.plan.fits) return;
  throw new MemoryPlanError(
    `${file}: ${check.line.replace(/^memory: /, 'the run ')} (search-agent-studio plan ${file} shows each part)`,
    check.plan,
  );
}
