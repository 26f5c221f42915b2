/**
 * Engine "verl": a GPU's memory in a veRL 0.9.1 run, part by part, as veRL keeps it (read in its source:
 * verl/workers/engine/fsdp/transformer_impl.py, verl/workers/engine/base.py, verl/workers/engine_workers.py,
 * verl/trainer/ppo/ray_trainer.py, verl/utils/torch_functional.py, verl/workers/rollout/vllm_rollout/; not measured:
 * veRL needs vLLM on a GPU, and no such machine was available to this work):
 * - the actor is FSDP over every GPU of the run (world size = fsdp shards): fp32 master weights, fp32 gradients and
 *   AdamW's two fp32 moments, each ÷ the shards; FSDP's mixed precision computes in bf16, gathering a unit's bf16
 *   parameters as it runs it (the root unit — embedding, output layer — through the forward and backward, and the
 *   decoder layer running with the one prefetched);
 * - offload is by phase (BaseEngineCtx): `verl.param_offload` keeps the actor's weights on the CPU except in the update
 *   and the weight sync, `verl.optimizer_offload` the moments except in the update; the update itself holds weights,
 *   gradients and moments whatever the offload;
 * - the reference (KL > 0, not LoRA) is loaded in bf16 and always lives on the CPU (FSDP CPUOffload: veRL forces it),
 *   streamed one unit at a time while it computes; under LoRA it is the actor without its adapter;
 * - the update runs one micro-batch packed into one row (remove-padding: every token of `optim.micro_batch_size`
 *   sequences of the longest, prompt included): each layer's input with gradient checkpointing (veRL's default), and
 *   at the backward's peak the larger of one layer recomputed with its gradients and the micro-batch's logits — veRL
 *   materialises them (tokens × vocabulary, bf16), divides them by the temperature when it is not 1, computes the
 *   entropy from them (`algorithm.entropy_coef` ≠ 0: a softmax kept for the backward), and its log-softmax without
 *   flash-attn goes row by row keeping each row's output; then their gradient. With SDPA (flash-attn absent) the
 *   packed row's block-causal mask is tokens² bytes. A full fine-tune holds the output layer's bf16 gradient and the
 *   root unit's bf16 parameters cast again from the head's backward to the pass's end, where FSDP reduces the root
 *   unit's flat gradient (measured on CPU through torch's FSDP1 and veRL's own engine, not on a GPU);
 * - vLLM is colocated at `verl.gpu_memory_utilization` of the GPU in the rollout (its bf16 weights ÷ tensor parallel,
 *   its profile's activations and CUDA graphs, then KV cache); veRL puts it to sleep for the update (level 2: weights
 *   and KV cache freed), wakes its weights for the sync — while the actor's weights are on the GPU — and its KV cache
 *   after the actor is offloaded;
 * - PPO's critic is a second FSDP model of the same shape (a value head for the output layer), with the same offload,
 *   updated in its own phase.
 * The planner chooses veRL's offload for the device count and memory: of the settings the config leaves unset, the
 * fewest offloads that fit (none, the optimizer's, the parameters', both); it never turns gradient checkpointing off (veRL's default
 * stays unless the config says). What it chooses is `chosen` (PLANNER_KEYS), which the run host writes into the config
 * it launches.
 */
import type { RunConfig } from '../run/config';
import { type Change, type Chosen, type EnginePlan, loraTargets, type Part, type PlanContext } from './builtin';
import { PlanError } from './errors';
import { layerLinears, loraAdapter, loraParams, type ModelShape, paramCounts } from './model';
import {
  checkpointBytesPerToken,
  gibText,
  headActivationBytesPerToken,
  layerActivationBytesPerToken,
  layerBackwardBytesPerToken,
  type Recipe,
  USABLE_SHARE,
  vllmShare,
} from './parts';

/** veRL 0.9.1's own defaults for what a plan may set (ppo_trainer.yaml), as overrides.py's VERL_OWN. */
export const VERL_OWN = { param_offload: false, optimizer_offload: false, gradient_checkpointing: true } as const;
/** The run-config keys a plan may set (overrides.py's PLANNER_KEYS); the last always has a value. */
export const PLANNER_KEYS = [
  'verl.param_offload',
  'verl.optimizer_offload',
  'model.gradient_checkpointing',
  'verl.gpu_memory_utilization',
] as const;
/** The `verl` section's defaults that decide memory (overrides.py's VERL_DEFAULTS). */
export const VERL_DEFAULTS = {
  rollout: 'vllm',
  tensor_parallel: 1,
  gpu_memory_utilization: 0.5,
  gpus_per_node: 1,
  nodes: 1,
  strategy: 'fsdp',
  attention: 'auto',
} as const;
/** veRL's rollout config (ppo_trainer.yaml): the batch vLLM profiles its activations with. */
const VLLM_MAX_NUM_BATCHED_TOKENS = 8192;
const VLLM_MAX_NUM_SEQS = 256;
/** What a sleeping vLLM keeps on each GPU (its worker process's CUDA context and CUDA graph pool): an estimate. */
const VLLM_ASLEEP = 2 ** 30;

export interface VerlSettings {
  rollout: string;
  tensor_parallel: number;
  gpu_memory_utilization: number;
  gpus_per_node: number;
  nodes: number;
  strategy: string;
  attention: string;
  param_offload?: boolean;
  optimizer_offload?: boolean;
}

/** The `verl` section with its defaults and the world size from `devices` (overrides.py's verl_settings). */
export function verlSettings(config: RunConfig): VerlSettings {
  const given = (config.verl ?? {}) as Partial<VerlSettings>;
  const s: VerlSettings = { ...VERL_DEFAULTS };
  for (const k of Object.keys(VERL_DEFAULTS) as (keyof typeof VERL_DEFAULTS)[])
    if (given[k] !== undefined && given[k] !== null) (s as any)[k] = given[k];
  if (given.param_offload !== undefined && given.param_offload !== null) s.param_offload = given.param_offload;
  if (given.optimizer_offload !== undefined && given.optimizer_offload !== null)
    s.optimizer_offload = given.optimizer_offload;
  const devices = config.devices ?? 1;
  if (devices > 1) {
    if (given.gpus_per_node === undefined) {
      if (devices % s.nodes) throw new PlanError(`devices (${devices}) must be a multiple of verl.nodes (${s.nodes})`);
      s.gpus_per_node = devices / s.nodes;
    } else if (s.gpus_per_node * s.nodes !== devices) {
      throw new PlanError(
        `devices (${devices}) disagrees with verl.gpus_per_node × verl.nodes (${s.gpus_per_node} × ${s.nodes}); set one of them`,
      );
    }
  }
  if (s.gpus_per_node % s.tensor_parallel)
    throw new PlanError(
      `verl.tensor_parallel (${s.tensor_parallel}) must divide verl.gpus_per_node (${s.gpus_per_node})`,
    );
  return s;
}

/** What decides a veRL run's memory per GPU besides the shapes: overrides.memory_inputs(cfg) of the trainer package,
 * key for key (test/unit/plan-engines.test.ts runs the Python on every example config and compares). `flashAttn`:
 * flash-attn's version in veRL's Python, unknown here (null: planned without it, the larger). */
export function verlMemoryInputs(config: RunConfig, flashAttn: string | null = null): Record<string, unknown> {
  const s = verlSettings(config);
  const world = s.gpus_per_node * s.nodes;
  const ckpt = config.model.gradient_checkpointing;
  const kl = config.algorithm?.kl_coef ?? 0;
  const lora = !!config.model.lora;
  const attention =
    s.attention === 'sdpa' ? 'sdpa' : flashAttn || s.attention === 'flash_attention_2' ? 'flash_attention_2' : 'sdpa';
  return {
    engine: 'verl',
    world_size: world,
    fsdp_shards: world,
    strategy: s.strategy,
    param_offload: s.param_offload ?? VERL_OWN.param_offload,
    optimizer_offload: s.optimizer_offload ?? VERL_OWN.optimizer_offload,
    gradient_checkpointing: ckpt ?? VERL_OWN.gradient_checkpointing,
    chosen: [
      ['verl.param_offload', s.param_offload],
      ['verl.optimizer_offload', s.optimizer_offload],
      ['model.gradient_checkpointing', ckpt],
    ]
      .filter(([, v]) => v !== undefined && v !== null)
      .map(([k]) => k),
    master_dtype: 'float32',
    compute_dtype: 'bfloat16',
    reference_model: kl > 0 && !lora,
    critic_model: (config.algorithm?.name ?? 'grpo') === 'ppo',
    lora,
    rollout_engine: s.rollout,
    rollout_tensor_parallel: s.tensor_parallel,
    rollout_gpu_memory_utilization: s.gpu_memory_utilization,
    rollout_frees_memory_while_training: true,
    attention,
    micro_batch_per_gpu: config.optim?.micro_batch_size ?? 8,
    max_sequence_tokens: (config.rollout?.max_prompt_length ?? 1024) + (config.rollout?.max_response_length ?? 1024),
  };
}

/** The config with `gpus` GPUs in all (`--gpus`): devices, with verl.gpus_per_node following it. */
function withWorld(config: RunConfig, gpus: number): RunConfig {
  const verl = { ...(config.verl ?? {}) } as Record<string, unknown>;
  delete verl.gpus_per_node;
  return { ...config, devices: gpus, verl: verl as RunConfig['verl'] };
}

interface Arrangement {
  paramOffload: boolean;
  optimizerOffload: boolean;
}

const offloadText = (a: Arrangement) =>
  a.paramOffload && a.optimizerOffload
    ? 'parameters and optimizer states'
    : a.paramOffload
      ? 'parameters'
      : a.optimizerOffload
        ? 'optimizer states'
        : 'none';

/** One GPU's parts, the CPU's per machine, and what stops vLLM from starting, for one offload arrangement. */
function verlParts(
  ctx: PlanContext,
  config: RunConfig,
  inputs: Record<string, unknown>,
  s: VerlSettings,
  a: Arrangement,
): { parts: Part[]; cpu: Part[]; problems: string[]; notes: string[] } {
  const shape: ModelShape = ctx.shape;
  const p = paramCounts(shape);
  const W = inputs.world_size as number;
  const gpn = s.gpus_per_node;
  const ckpt = inputs.gradient_checkpointing as boolean;
  const recipe: Recipe = { act: 2, checkpointing: ckpt };
  const lora = config.model.lora;
  const trained = lora ? loraParams(shape, lora.r ?? 8, loraTargets(lora)) : p.total;
  const r = config.rollout!;
  const parts: Part[] = [];
  const cpu: Part[] = [];
  const problems: string[] = [];
  const notes: string[] = [];
  const add = (list: Part[], name: string, bytes: number, phase: Part['phase'], what: string) =>
    bytes > 0 && list.push({ name, bytes: Math.round(bytes), phase, what });
  const B = (n: number) => `${(n / 1e9).toFixed(2)} B`;
  const sharded = W > 1 ? ` ÷ ${W} GPUs (FSDP)` : ' (FSDP over one GPU shards nothing)';
  const ppo = inputs.critic_model as boolean;
  const train: Part['phase'] = ppo ? ['update', 'critic'] : 'update';

  // the actor's states
  const weights = (4 * (p.total + (lora ? trained : 0))) / W;
  add(
    parts,
    'weights',
    weights,
    a.paramOffload ? ['update', 'sync'] : 'all',
    `the actor's fp32 master weights${lora ? ` (the base and the LoRA adapter, ${B(trained)})` : ''}, ${B(p.total)} × 4 B${sharded}${a.paramOffload ? '; on the CPU outside the update and the weight sync (verl.param_offload)' : ''}`,
  );
  add(parts, 'gradients', (4 * trained) / W, 'update', `fp32, ${B(trained)} trained × 4 B${sharded}`);
  add(
    parts,
    'optimizer',
    (8 * trained) / W,
    a.optimizerOffload ? 'update' : 'all',
    `AdamW's two fp32 moments, ${B(trained)} × 8 B${sharded}${a.optimizerOffload ? '; on the CPU outside the update (verl.optimizer_offload)' : ''}`,
  );
  const layer1 = Object.values(layerLinears(shape)).reduce((x, [i, o, b]) => x + i * o + (b ? o : 0), 0);
  const root = p.embedding + (shape.tied ? 0 : p.outputLayer);
  add(
    parts,
    'fsdp_gathered',
    2 * (root + 2 * layer1),
    train,
    "bf16 copies FSDP gathers to compute with: the root unit's (embedding, output layer) through the forward and backward, and two decoder layers' (the one running, the one prefetched)",
  );
  if (a.paramOffload)
    add(
      cpu,
      'weights',
      weights * gpn,
      'all',
      `the actor's fp32 weights of this machine's ${gpn} GPU${gpn === 1 ? '' : 's'} (verl.param_offload)`,
    );
  if (a.optimizerOffload)
    add(
      cpu,
      'optimizer',
      ((8 * trained) / W) * gpn,
      'all',
      `the actor's AdamW moments of this machine's GPUs (verl.optimizer_offload)`,
    );
  if (inputs.reference_model) {
    add(
      cpu,
      'reference',
      ((2 * p.total) / W) * gpn,
      'all',
      'the reference: bf16, sharded, on the CPU always (veRL gives it FSDP CPUOffload), streamed to the GPU one unit at a time while it computes',
    );
  }

  // the update: one micro-batch of the longest sequences, packed
  const T = inputs.max_sequence_tokens as number;
  const mb = inputs.micro_batch_per_gpu as number;
  const N = mb * T;
  const layer = N * layerActivationBytesPerToken(shape, recipe);
  const backward = N * layerBackwardBytesPerToken(shape, recipe);
  const head = N * headActivationBytesPerToken(shape, recipe);
  const temperature = r.temperature ?? 1;
  const entropy = (config.algorithm?.entropy_coef ?? 0) !== 0;
  const flash = inputs.attention === 'flash_attention_2';
  // without flash-attn, SDPA converts the packed row's boolean block-causal mask to a copy in the query's dtype at
  // each attention call (PyTorch's convert_boolean_attn_mask, as in the builtin plan's attentionMaskBytes), which that
  // layer's backward keeps: one layer's at a time with checkpointing, every layer's without
  const maskCopy = flash ? 0 : recipe.act * N * N;
  // A full fine-tune's output-layer gradient. The root unit's parameters are views of one flat parameter, whose
  // gradient FSDP reduces once every view's has arrived (its post-backward hook sits on the flat parameter's
  // AccumulateGrad), so the output layer's bf16 gradient, made in the head's backward, waits for the embedding's at the
  // pass's end, tied or not, beside the root's bf16 parameters cast again for the backward. At the end the views'
  // gradients are concatenated into the flat one (bf16) and cast to the reduce dtype (fp32) beside the embedding's.
  // Measured on CPU through torch's FSDP1 with veRL's mixed precision (stop 67, trainer/tests/test_verl_memory.py: a
  // Qwen2 of width 64 and 64,000 tokens, micro-batches accumulated, one process; V·H = vocabulary × hidden), beyond
  // what the forward left: held through the layers' backward 4.05 V·H bytes tied and 6.05 untied — 2 B × (the root's
  // parameters + V·H), planned so —, the pass's end 8.0 tied and 12.0–16.0 untied, planned as 2 V·H + 8 B × the root's
  // parameters (10 and 18). Through veRL's own update step (trainer/tests/verl_engine/test_verl_update_memory.py)
  // the whole update phase is 0.89× (tied) and 0.98× (untied) what the step holds. Under LoRA both layers are frozen.
  const vh = shape.vocab * shape.hidden;
  const heldHead = lora ? 0 : 2 * (root + vh);
  const passEnd = lora ? 0 : 2 * vh + 8 * root;
  const copies = 1 + (temperature !== 1 ? 1 : 0) + (entropy ? 2 : 0) + (flash ? 0 : 1) + 1;
  const logits = N * shape.vocab * 2 * copies;
  const logitsWhat = [
    `the logits, ${N.toLocaleString('en-US')} tokens × ${shape.vocab.toLocaleString('en-US')} in bf16`,
    temperature !== 1 ? `÷ the temperature (${temperature}: a copy)` : '',
    entropy ? "the entropy's softmax and product (algorithm.entropy_coef ≠ 0)" : '',
    flash ? '' : "the log-softmax rows kept for the backward (veRL's row-by-row path without flash-attn)",
    'their gradient',
  ]
    .filter(Boolean)
    .join(', ');
  const held = heldHead
    ? `, with the output layer's bf16 gradient and the root unit's bf16 parameters cast again held through the backward (${gibText(heldHead)}: FSDP reduces the root unit's gradient once the embedding's arrives)`
    : '';
  const endText = (net: number) =>
    passEnd && net > 0
      ? `, and the pass's end: the embedding's gradient, the root unit's flat gradient and its fp32 cast (${gibText(passEnd)}, the activations freed by then)`
      : '';
  if (ckpt) {
    const checkpoints = N * checkpointBytesPerToken(shape, recipe) * shape.layers;
    add(
      parts,
      'activations',
      checkpoints,
      'update',
      `micro-batch ${mb} × ${T} tokens packed (remove-padding): each layer's input, bf16 (checkpointed, veRL's default)`,
    );
    const end = passEnd - checkpoints;
    add(
      parts,
      'backward_peak',
      Math.max(layer + backward + maskCopy + heldHead, logits + head + heldHead, end),
      'update',
      `the largest of one layer recomputed with its gradients${maskCopy ? " and SDPA's bf16 copy of the mask" : ''} (${gibText(layer + backward + maskCopy)}) and the micro-batch's logits with the final norm's activations (${gibText(logits + head)}: ${logitsWhat})${held}${endText(end)}`,
    );
  } else {
    const kept = shape.layers * layer + head;
    add(
      parts,
      'activations',
      kept,
      'update',
      `micro-batch ${mb} × ${T} tokens packed: every layer's (${shape.layers}) kept for the backward pass (model.gradient_checkpointing false)`,
    );
    const end = passEnd - kept;
    add(
      parts,
      'backward_peak',
      Math.max(backward + heldHead, logits + heldHead, end),
      'update',
      `the micro-batch's logits (${logitsWhat})${held}${endText(end)}`,
    );
  }
  if (!flash)
    add(
      parts,
      'attention_mask',
      N * N + (ckpt ? 0 : shape.layers * maskCopy),
      'update',
      `the packed row's block-causal mask for SDPA, ${N.toLocaleString('en-US')}² booleans${ckpt ? ' (its bf16 copy is in the backward peak)' : `, and the bf16 copy of it each of the ${shape.layers} layers keeps for its backward`} (flash-attn needs none)`,
    );

  // PPO's critic: the same model with a value head, updated in its own phase
  if (ppo) {
    const pc = p.total - (shape.tied ? 0 : p.outputLayer) + shape.hidden + 1;
    add(
      parts,
      'critic_weights',
      (4 * pc) / W,
      a.paramOffload ? 'critic' : 'all',
      `the critic's fp32 weights (the model with a value head), ${B(pc)} × 4 B${sharded}`,
    );
    add(parts, 'critic_optimizer', (8 * pc) / W, a.optimizerOffload ? 'critic' : 'all', "the critic's AdamW moments");
    add(parts, 'critic_gradients', (4 * pc) / W, 'critic', "the critic's fp32 gradients");
    const cAct = ckpt
      ? N * checkpointBytesPerToken(shape, recipe) * shape.layers + layer + backward
      : shape.layers * layer + backward;
    add(
      parts,
      'critic_activations',
      cAct + (flash ? 0 : N * N + (ckpt ? 1 : shape.layers) * maskCopy),
      'critic',
      `the critic update's activations (as the actor's, without the logits${flash ? '' : "; with SDPA's mask and its bf16 copies"})`,
    );
    if (a.paramOffload)
      add(cpu, 'critic_weights', ((4 * pc) / W) * gpn, 'all', "the critic's weights (verl.param_offload)");
    if (a.optimizerOffload)
      add(cpu, 'critic_optimizer', ((8 * pc) / W) * gpn, 'all', "the critic's moments (verl.optimizer_offload)");
  }

  // the rollout engine: vLLM's share, asleep during the update
  const util = inputs.rollout_gpu_memory_utilization as number;
  const tp = inputs.rollout_tensor_parallel as number;
  const v = vllmShare(shape, util, ctx.gpuMemoryBytes, tp, VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS);
  const engine = s.rollout === 'vllm' ? 'vLLM' : 'SGLang (planned as vLLM)';
  add(
    parts,
    'rollout_engine',
    v.share,
    'rollout',
    `${engine} at verl.gpu_memory_utilization ${util} of the GPU: bf16 weights${tp > 1 ? ` ÷ ${tp} (tensor parallel)` : ''} ${gibText(v.weights)}, its profile's activations, sampler and CUDA graphs ≈ ${gibText(v.overhead)} (estimated), KV cache ${gibText(v.kvBytes)} ≈ ${v.kvTokens.toLocaleString('en-US')} tokens`,
  );
  add(
    parts,
    'rollout_weights',
    v.weights,
    'sync',
    `${engine}'s weights, woken before the actor's are copied in (its KV cache stays freed until the actor is offloaded)`,
  );
  add(
    parts,
    'sync_buffer',
    2 * p.embedding,
    'sync',
    'one parameter gathered in bf16 at a time as it is sent (the largest: the embedding)',
  );
  add(
    parts,
    'rollout_asleep',
    VLLM_ASLEEP,
    ppo ? ['update', 'sync', 'critic'] : ['update', 'sync'],
    `what ${engine} keeps while asleep: its worker process's CUDA context and CUDA graphs (estimated)`,
  );
  if (lora)
    add(
      cpu,
      'rollout_weights',
      v.weights * gpn,
      'all',
      `${engine}'s base weights while it sleeps (level 1 under LoRA: offloaded, not discarded)`,
    );
  const maxModelLen = shape.maxPositions ?? T;
  if (v.kvTokens < maxModelLen) {
    problems.push(
      `${engine}'s share (verl.gpu_memory_utilization ${util} × ${gibText(ctx.gpuMemoryBytes)} = ${gibText(v.share)}) leaves ${v.kvTokens.toLocaleString('en-US')} tokens of KV cache after its weights (${gibText(v.weights)}) and overhead (≈ ${gibText(v.overhead)}), fewer than one sequence of max_model_len ${maxModelLen.toLocaleString('en-US')} (veRL's rollout.max_model_len: the model's max_position_embeddings): it would refuse to start`,
    );
  } else {
    const seqs = Math.floor(v.kvTokens / T);
    notes.push(
      `${engine}'s KV cache holds ≈ ${v.kvTokens.toLocaleString('en-US')} tokens: ${seqs.toLocaleString('en-US')} sequences of the longest (${T.toLocaleString('en-US')} tokens) at once per ${tp > 1 ? `${tp}-GPU replica` : 'GPU'}`,
    );
  }
  return { parts, cpu, problems, notes };
}

function peak(parts: Part[]): number {
  const phases = new Set<string>();
  for (const x of parts)
    for (const ph of Array.isArray(x.phase) ? x.phase : [x.phase]) if (ph !== 'all') phases.add(ph);
  let best = 0;
  for (const ph of phases)
    best = Math.max(
      best,
      parts
        .filter((x) => x.phase === 'all' || x.phase === ph || (Array.isArray(x.phase) && x.phase.includes(ph)))
        .reduce((t, x) => t + x.bytes, 0),
    );
  return best;
}

export function verlPlan(ctx: PlanContext): EnginePlan {
  const config = ctx.gpusGiven ? withWorld(ctx.config, ctx.gpus) : ctx.config;
  if (ctx.device !== 'cuda')
    throw new PlanError('engine "verl" trains on GPUs only (FSDP and vLLM): plan it with --device cuda');
  const s = verlSettings(config);
  const inputs = verlMemoryInputs(config);
  const usable = Math.floor(USABLE_SHARE * ctx.gpuMemoryBytes);
  // the offload arrangements to try, fastest first, keeping what the config sets
  const all: Arrangement[] = [
    { paramOffload: false, optimizerOffload: false },
    { paramOffload: false, optimizerOffload: true },
    { paramOffload: true, optimizerOffload: true },
    { paramOffload: true, optimizerOffload: false },
  ];
  // (optimizer offload frees the most of the two; with one of them set, the other is tried off first)
  const offloads = (a: Arrangement) => Number(a.paramOffload) + Number(a.optimizerOffload);
  const tries = all
    .filter(
      (a) =>
        (s.param_offload === undefined || a.paramOffload === s.param_offload) &&
        (s.optimizer_offload === undefined || a.optimizerOffload === s.optimizer_offload),
    )
    .sort((x, y) => offloads(x) - offloads(y));
  let chosen = tries[0]!;
  let planned = verlParts(ctx, config, inputs, s, chosen);
  let best = { a: chosen, planned, need: peak(planned.parts) };
  const needs: string[] = [];
  for (const a of tries) {
    const x = a === chosen ? planned : verlParts(ctx, config, inputs, s, a);
    const need = peak(x.parts);
    if (need <= usable && !x.problems.length) {
      best = { a, planned: x, need };
      break;
    }
    needs.push(`${gibText(need)} with offload ${offloadText(a)}`);
    if (need < best.need) best = { a, planned: x, need };
  }
  chosen = best.a;
  planned = best.planned;
  const picks: Chosen[] = [];
  const why = needs.length
    ? `the largest phase would need ${needs.join(', ')}: more than ${gibText(usable)} usable`
    : '';
  if (s.param_offload === undefined && chosen.paramOffload !== VERL_OWN.param_offload)
    picks.push({ key: 'verl.param_offload', value: chosen.paramOffload, why });
  if (s.optimizer_offload === undefined && chosen.optimizerOffload !== VERL_OWN.optimizer_offload)
    picks.push({ key: 'verl.optimizer_offload', value: chosen.optimizerOffload, why });
  const lora = config.model.lora;
  const adapter = lora ? loraAdapter(ctx.shape, lora.r ?? 8, loraTargets(lora)) : undefined;
  const notes = [
    ...(adapter?.notes ?? []),
    ...(adapter?.adapted.includes('lm_head')
      ? [
          "LoRA on lm_head: its adapter's parameters are counted; its output, one more tokens × vocabulary tensor beside the logits, is not planned",
        ]
      : []),
    ...planned.notes,
    s.param_offload === undefined || s.optimizer_offload === undefined
      ? picks.length
        ? `offload chosen by the plan: ${offloadText(chosen)} (the fewest offloads that fit, of none, optimizer states, parameters, both; the config leaves it to the plan)`
        : `offload: none needed (veRL's default; the config leaves it to the plan)`
      : `offload: ${offloadText(chosen)} (the config's verl.param_offload and verl.optimizer_offload)`,
    config.model.gradient_checkpointing === undefined
      ? "gradient checkpointing: veRL's default (on); the plan never turns it off"
      : `gradient checkpointing: ${config.model.gradient_checkpointing ? 'on' : 'off'} (the config's)`,
    inputs.attention === 'sdpa'
      ? `attention planned as SDPA (verl.attention ${s.attention}${s.attention === 'auto' ? ": flash-attn in veRL's Python is not known here, and without it the logits cost one copy more and SDPA a mask" : ''})`
      : 'attention flash_attention_2 (flash-attn: its cross-entropy kernel for the log-probs, no mask)',
    "the log-prob passes (old with entropy, the reference, PPO's values) run without gradients or optimizer step: less than the update",
    'read from veRL 0.9.1\'s source, not measured on a GPU (docs/engines.md, "The memory plan")',
  ];
  const W = inputs.world_size as number;
  const changes: Change[] = [];
  for (const [key, set] of [
    ['verl.param_offload', s.param_offload],
    ['verl.optimizer_offload', s.optimizer_offload],
  ] as const)
    if (set === false) changes.push({ sets: [[key, undefined]], why: 'the plan chooses the offload then' });
  const util = s.gpu_memory_utilization;
  if (planned.problems.length) {
    for (const u of [0.1, 0.2, 0.3, 0.4].map((d) => Math.round((util + d) * 100) / 100).filter((u) => u <= 0.9))
      changes.push({
        sets: [['verl.gpu_memory_utilization', u]],
        why: 'a larger share for the rollout engine',
        knob: 'verl.gpu_memory_utilization',
      });
  } else {
    for (const u of [0.1, 0.2, 0.3].map((d) => Math.round((util - d) * 100) / 100).filter((u) => u >= 0.1))
      changes.push({
        sets: [['verl.gpu_memory_utilization', u]],
        why: 'a smaller rollout share: a smaller KV cache',
        knob: 'verl.gpu_memory_utilization',
      });
  }
  // twice the GPUs, written with the keys the config uses (devices and verl.gpus_per_node must agree); not under
  // --gpus, which fixes the count
  if (!ctx.gpusGiven) {
    const given = (config.verl ?? {}) as Record<string, unknown>;
    const perNode = given.gpus_per_node !== undefined && given.gpus_per_node !== null;
    const sets: [string, unknown][] = [];
    const devices = (config.devices ?? 1) > 1; // devices of 1 (the default) is ignored beside gpus_per_node
    if (s.gpus_per_node * 2 <= 8) {
      if (devices || !perNode) sets.push(['devices', 2 * W]);
      if (perNode) sets.push(['verl.gpus_per_node', 2 * s.gpus_per_node]);
    } else {
      if (devices) sets.push(['devices', 2 * W]);
      sets.push(['verl.nodes', 2 * s.nodes]);
    }
    changes.push({ sets, why: 'FSDP shards the states over twice the GPUs' });
  }
  const summary = `${lora ? `LoRA r=${lora.r ?? 8}` : 'full fine-tune'}, FSDP over ${W} GPU${W === 1 ? '' : 's'}${s.nodes > 1 ? ` (${s.nodes} machines × ${s.gpus_per_node})` : ''}, bf16 compute over fp32 master weights, ${inputs.gradient_checkpointing ? 'gradient checkpointing' : 'no gradient checkpointing'}, offload ${offloadText(chosen)}, ${s.rollout} at ${util}, engine verl`;
  return {
    devices: [planned.parts],
    counts: [W],
    notes,
    summary,
    chosen: picks,
    cpu: planned.cpu,
    problems: planned.problems,
    changes,
  };
}
