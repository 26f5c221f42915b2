/**
 * Engine "trl": a GPU's memory in a TRL 1.16 run (our engine, trainer/search_agent_trainer/engines/trl), part by part,
 * as TRL and our policy keep it (read in TRL's source: trl/trainer/grpo_trainer.py, trl/trainer/utils.py's
 * add_fused_lm_head, trl/kernels/chunked_logprob.py, trl/generation/vllm_generation.py; the update phase checked on
 * CPU against a real TRL update step, within 15 %: trainer/tests/test_memory_plan.py's TRL_CASES):
 * - without DeepSpeed or FSDP (no `trl.accelerate_config`, or one that shards nothing) every process holds the whole
 *   policy: fp32 master weights (ours: build_policy), fp32 gradients and AdamW's two fp32 moments (transformers' fused
 *   AdamW); TRL's reference is a second model (KL > 0, not LoRA) in `reference_dtype` (bf16 under bf16 compute: the
 *   engine asks for it), every weight at that dtype; under LoRA (KL > 0) it is a "ref" adapter TRL adds to the model,
 *   a frozen fp32 copy of the starting adapter (grpo_trainer.py: add_adapter("ref"));
 * - the update computes under autocast (accelerate's), whose cache keeps the bf16 copy of every projection it casts
 *   until the forward ends (TRL's update forward is one autocast region), then the backward recomputes one checkpointed
 *   layer at a time; so the update has two peaks, the forward's end ('update_forward': every layer's casts) and the
 *   backward ('update'); the residual stream is bf16 (our policy's residual_in_compute_dtype);
 * - TRL's log-probs never hold the logits: a fused head projects 4,096 tokens × 32,768 vocabulary entries at a time
 *   into one buffer of that size (Triton on CUDA, scoring only the completion's positions; torch on CPU, which scores
 *   every position and keeps fp32 temporaries of the tile) and its
 *   backward accumulates the output layer's gradient in fp32 (vocabulary × hidden);
 * - the rollout is ours (our generator, its KV cache sized after TRL built the reference: generation.py), or TRL's
 *   colocated vLLM (`trl.use_vllm`) at `trl.vllm_gpu_memory_utilization` of the GPU, given back during the update in
 *   sleep mode (`trl.vllm_enable_sleep_mode`);
 * - TRL keeps the step's generation batch (ids, masks, log-probs) on the GPU through the update.
 * With an accelerate config that shards (DeepSpeed ZeRO 1–3, FSDP), the states are counted as those schemes store them
 * (ZeRO: bf16 weights and gradients, fp32 master weights and moments; FSDP: as veRL's) — the textbook count, not
 * measured.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { resolveConfigPath } from '../paths';
import type { RunConfig } from '../run/config';
import {
  attentionMaskBytes,
  type Change,
  computesInBf16,
  type EnginePlan,
  kvBudgetChanges,
  loraTargets,
  ourGenerationParts,
  type Part,
  type PlanContext,
} from './builtin';
import { PlanError } from './errors';
import { layerLinears, loraAdapter, type ModelShape, paramCounts } from './model';
import {
  checkpointBytesPerToken,
  gibText,
  headActivationBytesPerToken,
  layerActivationBytesPerToken,
  layerBackwardBytesPerToken,
  outputLayerGradientBytes,
  type Recipe,
  vllmShare,
} from './parts';

/** TRL 1.16's GRPOConfig defaults the plan relies on (options.py's TRL_DEFAULTS: test_trl_engine.py compares them with
 * the installed GRPOConfig). */
export const TRL_DEFAULTS = {
  gradient_checkpointing: true,
  vllm_gpu_memory_utilization: 0.3,
  vllm_enable_sleep_mode: false,
} as const;
/** TRL's colocated vLLM (vllm_generation.py): the batch it profiles its activations with. */
const VLLM_MAX_NUM_BATCHED_TOKENS = 4096;
/** TRL's fused log-prob head (trl/kernels/chunked_logprob.py, trl/trainer/utils.py's _CHUNKED_LOGPROB_CHUNK_SIZE):
 * tokens × vocabulary entries projected at a time; its tile buffer has HEAD_VOCAB columns whatever the vocabulary. */
const HEAD_TOKENS = 4096;
const HEAD_VOCAB = 32768;
/** The torch fallback of the fused head (CPU, no Triton) works on the whole tile at once in fp32: bytes per tile
 * element its forward's temporaries hold (the tile in fp32, the shifted exponentials, their product with the logits)
 * and its backward's (the tile in fp32, its scaled copy, log p, p, the gradient, the target one-hot in bool and fp32,
 * and the products: 8 fp32 tensors and a bool one) — read in _forward_tile and _backward_tile, and the backward's
 * count checked by trainer/tests/test_memory_plan.py's TRL case. */
const HEAD_CPU_FORWARD_TEMPS = 16;
const HEAD_CPU_BACKWARD_TEMPS = 33;
/** What a sleeping colocated vLLM keeps (its CUDA graph pool; the process is TRL's): an estimate. */
const VLLM_ASLEEP = 0.5 * 2 ** 30;

/** Training processes: trl.num_processes, else devices (options.processes). */
export function trlProcesses(config: RunConfig): number {
  return (config.trl?.num_processes as number | undefined) || config.devices || 1;
}

/** One step of ours in TRL's units for `world` processes (options.plan): the micro-batch per process, the mini-batch,
 * TRL's steps_per_generation. */
export function trlStepPlan(
  config: RunConfig,
  world: number,
): { sequences: number; micro: number; mini: number; stepsPerGeneration: number } {
  const r = config.rollout!;
  const o = config.optim!;
  const S = r.batch_size! * r.n!;
  const micro = Math.min(o.micro_batch_size!, Math.max(1, Math.floor(S / world)));
  return {
    sequences: S,
    micro,
    mini: Math.min(o.mini_batch_size!, S),
    stepsPerGeneration: Math.floor(S / (world * micro)),
  };
}

/** The reference's dtype (options.memory_inputs): the trl section's model_init_kwargs.dtype, else bf16 under bf16
 * compute (the engine asks for it), else the policy's (fp32); null without a reference model. */
function referenceDtype(config: RunConfig, bf16: boolean): string | null {
  if (!((config.algorithm?.kl_coef ?? 0) > 0) || config.model.lora) return null;
  const named = (
    (config.trl as Record<string, unknown> | undefined)?.model_init_kwargs as Record<string, unknown> | undefined
  )?.dtype;
  if (named) return String(named);
  if (config.trl && 'model_init_kwargs' in config.trl) return 'float32';
  return bf16 ? 'bfloat16' : 'float32';
}

/** What decides a trl run's memory per GPU besides the shapes: options.memory_inputs(cfg, world, bf16) of the trainer
 * package, key for key (test/unit/plan-engines.test.ts compares them for every example config). */
export function trlMemoryInputs(
  config: RunConfig,
  world: number,
  bf16: boolean,
  base?: string,
): Record<string, unknown> {
  const p = trlStepPlan(config, world);
  const section = (config.trl ?? {}) as Record<string, unknown>;
  const vllm = !!section.use_vllm;
  const acc = section.accelerate_config as string | undefined;
  return {
    engine: 'trl',
    processes: world,
    sharded_by: acc === undefined ? null : base ? resolveConfigPath(acc, base) : acc,
    master_dtype: 'float32',
    compute_dtype: bf16 ? 'bfloat16' : 'float32',
    reference_model: (config.algorithm?.kl_coef ?? 0) > 0 && !config.model.lora,
    reference_dtype: referenceDtype(config, bf16),
    reference_adapter: (config.algorithm?.kl_coef ?? 0) > 0 && !!config.model.lora,
    lora: !!config.model.lora,
    gradient_checkpointing: config.model.gradient_checkpointing ?? TRL_DEFAULTS.gradient_checkpointing,
    micro_batch_per_process: p.micro,
    max_sequence_tokens: config.rollout!.max_prompt_length! + config.rollout!.max_response_length!,
    generation: vllm ? 'vllm' : 'ours',
    generation_kv_tokens: vllm ? null : (config.rollout!.max_batch_tokens ?? null),
    vllm_gpu_memory_utilization: vllm
      ? ((section.vllm_gpu_memory_utilization as number | undefined) ?? TRL_DEFAULTS.vllm_gpu_memory_utilization)
      : null,
    vllm_sleep_mode: vllm ? !!(section.vllm_enable_sleep_mode ?? TRL_DEFAULTS.vllm_enable_sleep_mode) : null,
    vllm_max_num_seqs: vllm ? p.micro * p.stepsPerGeneration : null,
  };
}

/** How an accelerate config shards the states: DeepSpeed's ZeRO stage and offload, or FSDP. */
interface Sharding {
  kind: 'none' | 'zero1' | 'zero2' | 'zero3' | 'fsdp';
  offloadOptimizer: boolean;
  offloadParams: boolean;
  what: string;
}

/** The `key: value` lines of an accelerate config (what `accelerate config` writes: nested maps of scalars). */
export function readAccelerateConfig(text: string): Record<string, any> {
  const root: Record<string, any> = {};
  const stack: { indent: number; node: Record<string, any> }[] = [{ indent: -1, node: root }];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\s+#.*$/, '').replace(/^#.*$/, '');
    const m = /^(\s*)([\w.-]+):\s*(.*?)\s*$/.exec(line);
    if (!m) continue;
    const indent = m[1]!.length;
    while (stack.length > 1 && stack[stack.length - 1]!.indent >= indent) stack.pop();
    const parent = stack[stack.length - 1]!.node;
    if (m[3] === '') {
      parent[m[2]!] = {};
      stack.push({ indent, node: parent[m[2]!] });
    } else {
      parent[m[2]!] = m[3]!.replace(/^['"]|['"]$/g, '');
    }
  }
  return root;
}

/** DeepSpeed's ZeRO stage as a config writes it: 0–3 (a number, or its digits in quotes). */
function zeroStage(v: unknown, where: string): number {
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^\s*\d+\s*$/.test(v) ? Number(v) : Number.NaN;
  if (!Number.isInteger(n) || n < 0 || n > 3)
    throw new PlanError(`${where}: expected a ZeRO stage, 0, 1, 2 or 3, got ${JSON.stringify(v)}`);
  return n;
}

/** An offload device of DeepSpeed's (none, cpu, nvme): whether it offloads. */
function offloadDevice(v: unknown, where: string): boolean {
  if (v === undefined || v === null) return false;
  const d = String(v).toLowerCase();
  if (!['none', 'cpu', 'nvme'].includes(d))
    throw new PlanError(`${where}: expected none, cpu or nvme, got ${JSON.stringify(v)}`);
  return d !== 'none';
}

const FSDP_STRATEGIES = ['FULL_SHARD', 'SHARD_GRAD_OP', 'NO_SHARD', 'HYBRID_SHARD', 'HYBRID_SHARD_ZERO2'];

/** How the accelerate config at `path` shards the states (no path: none). A file that cannot be read, or a field the
 * plan depends on that is not one of the values accelerate and DeepSpeed take, is a PlanError naming the file and the
 * field (`trl.accelerate_config` for a file that is not there). */
function sharding(path: string | null): Sharding {
  const none: Sharding = {
    kind: 'none',
    offloadOptimizer: false,
    offloadParams: false,
    what: 'no sharding: every process holds the whole policy',
  };
  if (!path) return none;
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new PlanError(
      `trl.accelerate_config: ${path}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file (an accelerate config, as `accelerate config` writes it)' : (e as Error).message}`,
    );
  }
  const c = readAccelerateConfig(text);
  const type = String(c.distributed_type ?? 'NO').toUpperCase();
  if (type === 'DEEPSPEED') {
    const ds = c.deepspeed_config ?? {};
    let stage: number;
    let offloadOptimizer: boolean;
    let offloadParams: boolean;
    if (ds.deepspeed_config_file) {
      // a DeepSpeed JSON config named by the accelerate config: its zero_optimization says the stage and offload
      const file = resolve(dirname(path), String(ds.deepspeed_config_file));
      let json: unknown;
      try {
        json = JSON.parse(readFileSync(file, 'utf8'));
      } catch (e) {
        throw new PlanError(
          `${path}: deepspeed_config.deepspeed_config_file: ${file}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`,
        );
      }
      if (!json || typeof json !== 'object' || Array.isArray(json))
        throw new PlanError(`${file}: expected a JSON object (a DeepSpeed config)`);
      const z = ((json as Record<string, any>).zero_optimization ?? {}) as Record<string, any>;
      stage = zeroStage(z.stage ?? 0, `${file}: zero_optimization.stage`);
      offloadOptimizer = offloadDevice(
        z.offload_optimizer?.device,
        `${file}: zero_optimization.offload_optimizer.device`,
      );
      offloadParams = offloadDevice(z.offload_param?.device, `${file}: zero_optimization.offload_param.device`);
    } else {
      stage = zeroStage(ds.zero_stage ?? 0, `${path}: deepspeed_config.zero_stage`);
      offloadOptimizer = offloadDevice(
        ds.offload_optimizer_device,
        `${path}: deepspeed_config.offload_optimizer_device`,
      );
      offloadParams = offloadDevice(ds.offload_param_device, `${path}: deepspeed_config.offload_param_device`);
    }
    if (stage >= 1)
      return {
        kind: `zero${stage}` as Sharding['kind'],
        offloadOptimizer,
        offloadParams,
        what: `DeepSpeed ZeRO-${stage} (${path})`,
      };
    return { ...none, what: `DeepSpeed without ZeRO (${path})` };
  }
  if (type === 'FSDP') {
    const f = c.fsdp_config ?? {};
    const strategy = String(f.fsdp_sharding_strategy ?? 'FULL_SHARD').toUpperCase();
    if (!FSDP_STRATEGIES.includes(strategy) && !/^[1-5]$/.test(strategy))
      throw new PlanError(
        `${path}: fsdp_config.fsdp_sharding_strategy: expected ${FSDP_STRATEGIES.join(', ')} (or 1–5), got ${JSON.stringify(f.fsdp_sharding_strategy)}`,
      );
    const offload = String(f.fsdp_offload_params ?? 'false').toLowerCase();
    if (offload !== 'true' && offload !== 'false')
      throw new PlanError(
        `${path}: fsdp_config.fsdp_offload_params: expected true or false, got ${JSON.stringify(f.fsdp_offload_params)}`,
      );
    const off = offload === 'true';
    if (strategy === 'NO_SHARD' || strategy === '3') return { ...none, what: `FSDP NO_SHARD (${path})` };
    return { kind: 'fsdp', offloadOptimizer: off, offloadParams: off, what: `FSDP ${strategy} (${path})` };
  }
  return { ...none, what: `${type} (${path}): no sharding` };
}

const dtypeBytes = (d: string | null, shape: ModelShape): number => {
  const x = d === 'auto' ? (shape.dtype ?? 'bfloat16') : d;
  return x === 'float32' || x === 'fp32' ? 4 : 2;
};

export function trlPlan(ctx: PlanContext): EnginePlan {
  const { config: c, shape: s } = ctx;
  const world = ctx.gpusGiven ? ctx.gpus : trlProcesses(c);
  const bf16 = computesInBf16(c, ctx.device);
  const inputs = trlMemoryInputs(c, world, bf16, ctx.base);
  const sh = sharding(inputs.sharded_by as string | null);
  const p = paramCounts(s);
  const lora = c.model.lora;
  const adapter = lora ? loraAdapter(s, lora.r ?? 8, loraTargets(lora)) : undefined;
  const trained = adapter ? adapter.params : p.total;
  const notes: string[] = [...(adapter?.notes ?? [])];
  if (adapter?.adapted.includes('lm_head'))
    notes.push(
      "LoRA on lm_head: its adapter's parameters are counted; what its output adds to TRL's fused log-prob head (read for a plain output layer) is not planned",
    );
  const ckpt = inputs.gradient_checkpointing as boolean;
  const recipe: Recipe = { act: bf16 || sh.kind.startsWith('zero') ? 2 : 4, checkpointing: ckpt };
  const parts: Part[] = [];
  const cpu: Part[] = [];
  const problems: string[] = [];
  const add = (list: Part[], name: string, bytes: number, phase: Part['phase'], what: string) =>
    bytes > 0 && list.push({ name, bytes: Math.round(bytes), phase, what });
  const addGpu = (name: string, bytes: number, phase: Part['phase'], what: string) =>
    add(parts, name, bytes, phase, what);
  const B = (n: number) => `${(n / 1e9).toFixed(2)} B`;
  const train: Part['phase'] = ['update_forward', 'update'];
  const N = world;
  const layer1 = Object.values(layerLinears(s)).reduce((x, [i, o, b]) => x + i * o + (b ? o : 0), 0);
  let castsAll = 0; // what autocast caches through the update's forward
  let castsRollout = 0; // what it caches through a generation call of ours
  let loaded = 0; // on the GPU when our generator sizes its KV cache (weights, reference, vLLM)

  // the policy's states
  if (sh.kind === 'none') {
    if (lora)
      addGpu(
        'weights',
        (bf16 ? 2 : 4) * p.total + 4 * trained,
        'all',
        `frozen base ${B(p.total)} × ${bf16 ? 2 : 4} B + LoRA adapter ${B(trained)} × 4 B (fp32)`,
      );
    else
      addGpu(
        'weights',
        4 * p.total,
        'all',
        `fp32 master weights, ${B(p.total)} × 4 B (autocast computes with bf16 copies)`,
      );
    addGpu('gradients', 4 * trained, train, `fp32, ${B(trained)} trained × 4 B`);
    addGpu(
      'optimizer',
      8 * trained,
      'all',
      `AdamW's two fp32 moments (fused), ${B(trained)} × 8 B, from the first optimizer step`,
    );
    if (bf16) {
      castsAll = lora ? 2 * trained : 2 * s.layers * layer1;
      castsRollout = lora ? 2 * trained : 2 * p.cast;
    }
  } else if (sh.kind === 'fsdp') {
    addGpu(
      'weights',
      (4 * p.total) / N,
      sh.offloadParams ? train : 'all',
      `fp32 master weights ÷ ${N} processes (FSDP)`,
    );
    addGpu('gradients', (4 * trained) / N, train, `fp32 ÷ ${N}`);
    addGpu('optimizer', (8 * trained) / N, sh.offloadOptimizer ? train : 'all', `AdamW's moments ÷ ${N}`);
    addGpu(
      'fsdp_gathered',
      2 * (p.embedding + (s.tied ? 0 : p.outputLayer) + 2 * layer1),
      train,
      "bf16 copies FSDP gathers: the root unit's and two layers'",
    );
    if (sh.offloadParams)
      add(cpu, 'weights', 4 * p.total, 'all', 'the fp32 weights of every process (fsdp_offload_params)');
  } else {
    const stage = Number(sh.kind.slice(4));
    addGpu(
      'weights',
      stage === 3 ? (2 * p.total) / N : 2 * p.total,
      stage === 3 && sh.offloadParams ? train : 'all',
      `bf16 weights${stage === 3 ? ` ÷ ${N} (ZeRO-3)` : ''}`,
    );
    addGpu(
      'gradients',
      stage >= 2 ? (2 * trained) / N : 2 * trained,
      train,
      `bf16 gradients${stage >= 2 ? ` ÷ ${N}` : ''}`,
    );
    if (!sh.offloadOptimizer)
      addGpu(
        'optimizer',
        (12 * trained) / N,
        'all',
        `fp32 master weights and AdamW's moments, 12 B × ${B(trained)} ÷ ${N}`,
      );
    if (stage === 3)
      addGpu(
        'zero3_gathered',
        2 * 2 * layer1 + 2 * (p.embedding + (s.tied ? 0 : p.outputLayer)),
        train,
        'bf16 parameters ZeRO-3 gathers to compute (a layer and the one prefetched, the embedding and output layer)',
      );
    if (sh.offloadOptimizer)
      add(
        cpu,
        'optimizer',
        12 * trained,
        'all',
        "every process's fp32 master weights and moments (offload_optimizer_device)",
      );
    if (stage === 3 && sh.offloadParams)
      add(cpu, 'weights', 2 * p.total, 'all', 'the bf16 weights (offload_param_device)');
  }
  const refDtype = inputs.reference_dtype as string | null;
  if (inputs.reference_model) {
    const per = dtypeBytes(refDtype, s);
    const shards = sh.kind === 'zero3' || sh.kind === 'fsdp' ? N : 1;
    addGpu(
      'reference',
      (per * p.total) / shards,
      'all',
      `TRL's reference model, every weight in ${refDtype}${shards > 1 ? ` ÷ ${shards}` : ''} (a second model: TRL builds it from model.path)`,
    );
  } else if (inputs.reference_adapter) {
    const shards = sh.kind === 'zero3' || sh.kind === 'fsdp' ? N : 1;
    addGpu(
      'reference',
      (4 * trained) / shards,
      'all',
      `TRL's "ref" adapter: a frozen fp32 copy of the starting adapter, ${B(trained)} × 4 B${shards > 1 ? ` ÷ ${shards}` : ''} (the reference under LoRA)`,
    );
  }
  loaded = parts.filter((x) => x.phase === 'all' && x.name !== 'optimizer').reduce((a, x) => a + x.bytes, 0);

  // the update: one micro-batch of the longest sequences (prompt + completion), TRL's fused head over the completion
  const r = c.rollout!;
  const T = inputs.max_sequence_tokens as number;
  const mb = inputs.micro_batch_per_process as number;
  const tokens = mb * T;
  const headTokens = ctx.device === 'cuda' ? mb * r.max_response_length! : mb * (T - 1); // CPU: every position (no Triton)
  const tileTokens = Math.min(headTokens, HEAD_TOKENS);
  const tileVocab = Math.min(s.vocab, HEAD_VOCAB);
  const buffer = tileTokens * HEAD_VOCAB * recipe.act; // mm_buf, in the compute dtype
  const cpuHead = ctx.device !== 'cuda';
  const tile = buffer + (cpuHead ? tileTokens * tileVocab * HEAD_CPU_FORWARD_TEMPS : 0);
  const tileBackward = buffer + (cpuHead ? tileTokens * tileVocab * HEAD_CPU_BACKWARD_TEMPS : 0);
  const layer = tokens * layerActivationBytesPerToken(s, recipe);
  const backward = tokens * layerBackwardBytesPerToken(s, recipe);
  const norm = tokens * headActivationBytesPerToken(s, recipe);
  const saved = headTokens * s.hidden * recipe.act;
  const headGrads = (lora ? 0 : 4 * s.vocab * s.hidden) + 4 * headTokens * s.hidden;
  // the held output-layer gradient and the pass's end (parts.ts), with one process's whole weights only: under ZeRO
  // or FSDP the gradients are partitioned, not measured (the head's own is in headGrads above either way)
  const { held: heldHead, end: embeddingEnd } = outputLayerGradientBytes(s, !lora && sh.kind === 'none');
  const ckptActivations = tokens * checkpointBytesPerToken(s, recipe) * s.layers;
  // TRL's batch is padded (prompts on the left, completions on the right): SDPA's mask, as the builtin engine's
  const mask = attentionMaskBytes(mb, T, recipe);
  if (castsAll)
    addGpu(
      'weight_casts_update',
      castsAll,
      'update_forward',
      lora
        ? "bf16 copies of the adapter, cached by autocast through the update's forward"
        : "bf16 copies of every layer's projections, cached by autocast until the update's forward ends (TRL runs it as one autocast region)",
    );
  if (ckpt) {
    addGpu(
      'activations',
      ckptActivations,
      train,
      `micro-batch ${mb} × ${T} tokens: each layer's input (checkpointed${c.model.gradient_checkpointing === undefined ? ", TRL's default" : ''})`,
    );
    addGpu(
      'head_forward',
      norm + saved + tile,
      'update_forward',
      `the final norm's activations, the ${headTokens.toLocaleString('en-US')} scored positions' hidden states and one fused-head tile buffer of ${tileTokens} × ${HEAD_VOCAB.toLocaleString('en-US')}${cpuHead ? ' and its fp32 temporaries (the torch fallback on CPU)' : ''}`,
    );
    const layerPeak = layer + backward + (castsAll ? 2 * layer1 : 0) + mask.copy + heldHead;
    const headPeak = norm + saved + tileBackward + headGrads;
    // the pass's end holds nothing else of the micro-batch: net of the activations and the mask the phase adds
    const endPeak = embeddingEnd - ckptActivations - mask.bool;
    addGpu(
      'backward_peak',
      Math.max(layerPeak, headPeak, endPeak),
      'update',
      `the largest of one layer recomputed with its gradients${castsAll ? ', its casts' : ''}${heldHead ? ", the output layer's gradient held (tied to the embedding)" : ''} and SDPA's ${recipe.act === 2 ? 'bf16' : 'fp32'} copy of the attention mask (${gibText(layerPeak)}), the fused head's backward: its tile, ${lora ? '' : "the output layer's gradient accumulated in fp32 (vocabulary × hidden), "}the hidden states' gradient (${gibText(headPeak)})${embeddingEnd ? `, and the pass's end: the embedding's dense gradient${s.tied ? ', the held one and their sum' : ''} (${gibText(embeddingEnd)})` : ''}`,
    );
    addGpu('attention_mask', mask.bool, train, mask.what(true));
  } else {
    addGpu(
      'activations',
      s.layers * layer + norm,
      train,
      `micro-batch ${mb} × ${T} tokens: every layer's (${s.layers}) kept for the backward pass`,
    );
    addGpu(
      'head_forward',
      saved + tile,
      'update_forward',
      "the scored positions' hidden states and one fused-head tile",
    );
    addGpu(
      'backward_peak',
      Math.max(
        backward + heldHead,
        saved + tileBackward + headGrads,
        embeddingEnd - (s.layers * layer + norm) - mask.bool - s.layers * mask.copy,
      ),
      'update',
      `the largest of one layer's gradients${heldHead ? " (with the output layer's, held: tied to the embedding)" : ''}, the fused head's backward${embeddingEnd ? ` and the pass's end (the embedding's dense gradient${s.tied ? ', the held one and their sum' : ''})` : ''}`,
    );
    addGpu('attention_mask', mask.bool + s.layers * mask.copy, train, mask.what(false, s.layers));
  }
  const S = r.batch_size! * r.n!;
  addGpu(
    'generation_batch',
    Math.ceil(S / world) * T * 40,
    train,
    `the step's generation batch TRL keeps on the GPU: ${Math.ceil(S / world).toLocaleString('en-US')} sequences × ${T} tokens of ids, masks and log-probs`,
  );

  // the rollout: ours, or TRL's colocated vLLM
  let kvTokens: number | undefined;
  if (inputs.generation === 'vllm') {
    if (ctx.device !== 'cuda') throw new PlanError('trl.use_vllm needs a GPU: plan it with --device cuda');
    const util = inputs.vllm_gpu_memory_utilization as number;
    const sleep = inputs.vllm_sleep_mode as boolean;
    const v = vllmShare(
      s,
      util,
      ctx.gpuMemoryBytes,
      1,
      VLLM_MAX_NUM_BATCHED_TOKENS,
      inputs.vllm_max_num_seqs as number,
    );
    addGpu(
      'vllm',
      v.share,
      sleep ? 'rollout' : 'all',
      `TRL's colocated vLLM at trl.vllm_gpu_memory_utilization ${util}: bf16 weights ${gibText(v.weights)}, its profile's activations and sampler for ${(inputs.vllm_max_num_seqs as number).toLocaleString('en-US')} sequences and CUDA graphs ≈ ${gibText(v.overhead)} (estimated), KV cache ${gibText(v.kvBytes)} ≈ ${v.kvTokens.toLocaleString('en-US')} tokens${sleep ? '; asleep during the update (trl.vllm_enable_sleep_mode)' : '; held through the update (no sleep mode)'}`,
    );
    if (sleep)
      addGpu('vllm_asleep', VLLM_ASLEEP, train, 'what vLLM keeps while asleep: its CUDA graph pool (estimated)');
    if (sh.kind === 'zero3')
      addGpu(
        'weight_sync',
        2 * p.embedding,
        'rollout',
        'one module gathered at a time as TRL copies the weights into vLLM',
      );
    const maxModelLen =
      ((c.trl as Record<string, unknown> | undefined)?.vllm_max_model_length as number | undefined) ??
      s.maxPositions ??
      T;
    if (v.kvTokens < maxModelLen)
      problems.push(
        `vLLM's share (trl.vllm_gpu_memory_utilization ${util} × ${gibText(ctx.gpuMemoryBytes)} = ${gibText(v.share)}) leaves ${v.kvTokens.toLocaleString('en-US')} tokens of KV cache after its weights and overhead, fewer than one sequence of max_model_len ${maxModelLen.toLocaleString('en-US')}: vLLM would refuse to start`,
      );
    else
      notes.push(
        `vLLM's KV cache holds ≈ ${v.kvTokens.toLocaleString('en-US')} tokens: ${Math.floor(v.kvTokens / T).toLocaleString('en-US')} sequences of the longest at once`,
      );
  } else {
    if (sh.kind === 'zero3')
      addGpu(
        'weights_gathered',
        2 * p.total,
        'rollout',
        "the whole bf16 model, gathered for our generator (TRL's ds3_gather_for_generation)",
      );
    if (castsRollout)
      addGpu(
        'weight_casts',
        castsRollout,
        'rollout',
        `bf16 copies of ${lora ? 'the adapter' : 'every projection and the output layer'}, cached through a generation call`,
      );
    kvTokens = ourGenerationParts(
      ctx,
      recipe,
      {
        loaded,
        moments: sh.kind === 'none' ? 8 * trained : 0,
        casts: castsRollout,
        who: 'the engine after TRL built the reference',
      },
      addGpu,
      notes,
    );
  }
  if (sh.kind !== 'none')
    notes.push(`${sh.what}: states counted as the scheme stores them (textbook count, not measured)`);
  notes.push('the reference and old log-prob passes run without gradients: less than the update');

  const changes: Change[] = [];
  if (inputs.generation === 'vllm') {
    if (!inputs.vllm_sleep_mode)
      changes.push({
        sets: [['trl.vllm_enable_sleep_mode', true]],
        why: 'vLLM gives its memory back during the update',
      });
    const util = inputs.vllm_gpu_memory_utilization as number;
    const deltas = problems.length ? [0.1, 0.2, 0.3] : [-0.05, -0.1, -0.15];
    for (const u of deltas.map((d) => Math.round((util + d) * 100) / 100).filter((u) => u >= 0.05 && u <= 0.9))
      changes.push({ sets: [['trl.vllm_gpu_memory_utilization', u]], knob: 'trl.vllm_gpu_memory_utilization' });
  } else if (kvTokens !== undefined) changes.push(...kvBudgetChanges(c, kvTokens));
  const summary = `${lora ? `LoRA r=${lora.r ?? 8}` : 'full fine-tune'}, ${bf16 ? 'bf16 autocast over fp32 master weights' : 'fp32'}, ${ckpt ? 'gradient checkpointing' : 'no gradient checkpointing'}, ${world} process${world === 1 ? '' : 'es'}${sh.kind === 'none' ? '' : ` (${sh.kind === 'fsdp' ? 'FSDP' : `ZeRO-${sh.kind.slice(4)}`})`}, ${inputs.generation === 'vllm' ? `vLLM at ${inputs.vllm_gpu_memory_utilization}${inputs.vllm_sleep_mode ? ' in sleep mode' : ''}` : 'our generator'}, engine trl`;
  return { devices: [parts], counts: [world], notes, summary, cpu, problems, changes, kvTokens };
}
