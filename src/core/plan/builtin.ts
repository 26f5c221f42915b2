/**
 * The builtin engine's memory on its one device, part by part, as the trainer stores it
 * (trainer/search_agent_trainer/precision.py; docs/trainer.md, "Memory on one GPU"):
 * - full fine-tuning: fp32 master weights (4 B/param), fp32 gradients (4 B), AdamW's two fp32 moments (8 B), a
 *   reference in bf16 where autocast computes in bf16 (the Linear and Embedding weights; 4 B otherwise);
 * - LoRA: the frozen base in bf16 under bf16 compute (2 B/param), the adapter fp32 with its gradients and moments, the
 *   reference the starting adapter (bf16 under bf16 compute: its weights are Linear layers' too);
 * - the weights bf16 autocast casts as it runs them: every projection's, cached for the whole of a generation call;
 *   one layer's (and the output layer's) at a time in the update with checkpointing, all of them without;
 * - the update's activations for one micro-batch of the longest sequences (rollout.max_prompt_length +
 *   max_response_length tokens each): the layer inputs checkpointing keeps, and at the backward pass's peak the
 *   larger of one layer's recompute with its gradients and a chunk of the log-prob computation with the final norm's
 *   activations; without checkpointing every layer's, and the chunk;
 * - the rollout's KV cache (`rollout.max_batch_tokens`, or what the trainer sizes itself: half of what the GPU has
 *   left after the weights, the moments, the cast weights and a 15 % reserve, for the cache and one copy of it while
 *   rows are selected or merged), a prefill piece and the sampler's distribution over the vocabulary.
 * The device's total is its largest phase: the rollout (no gradients; the cast weights and the KV cache) or the
 * update (the gradients and the activations).
 */
import type { RunConfig } from '../run/config';
import { PlanError } from './errors';
import { kvBytesPerToken, loraAdapter, type ModelShape, paramCounts } from './model';
import {
  AUTO_RESERVE,
  checkpointBytesPerToken,
  chunkPositions,
  DEFAULT_MAX_BATCH_TOKENS,
  headActivationBytesPerToken,
  inferenceBytesPerToken,
  layerActivationBytesPerToken,
  layerBackwardBytesPerToken,
  logitsChunkBytes,
  outputLayerGradientBytes,
  PREFILL_TOKENS,
  type Recipe,
} from './parts';

export { PlanError };

export interface PlanContext {
  config: RunConfig;
  shape: ModelShape;
  gpuMemoryBytes: number;
  gpus: number;
  /** Whether --gpus was given (engines that take their world size from the config use it only then). */
  gpusGiven?: boolean;
  device: 'cuda' | 'cpu';
  /** The directory the config's relative paths resolve against (trl.accelerate_config). */
  base?: string;
}

/** The phases of a step a part exists in: 'all' (throughout), or the named ones ('rollout', 'update', and an engine's
 * own: 'sync', 'update_forward', 'critic'). A device's total is its largest phase. */
export type Phase = string;

/** One part of a device's memory: its bytes, the phase(s) it exists in ('all': throughout), and what it is. */
export interface Part {
  name: string;
  bytes: number;
  phase: Phase | Phase[];
  what: string;
}

/** A key the plan sets in the config the run launches with (veRL's PLANNER_KEYS the config leaves unset). */
export interface Chosen {
  key: string;
  value: unknown;
  why: string;
}

/** A change to a config that may make it fit: the keys it sets (dotted, as the config file writes them:
 * `optim.micro_batch_size`; a value of undefined leaves the key out), why, and the knob it turns (a knob's candidates
 * come mildest first: the planner names the first that fits). What a suggestion prints is `changeText` of exactly
 * what `applyChange` sets. */
export interface Change {
  sets: [key: string, value: unknown][];
  why?: string;
  knob?: string;
}

/** A change as the user would write it: `optim.micro_batch_size: 2 and rollout.max_batch_tokens: 32768 (why)`. */
export function changeText(ch: Change): string {
  const sets = ch.sets.map(([k, v]) => (v === undefined ? `${k} left out` : `${k}: ${jsonText(v)}`)).join(' and ');
  return ch.why ? `${sets} (${ch.why})` : sets;
}

/** JSON with a space after each colon and comma (`{"r": 16, "alpha": 32}`), as the docs write it. */
function jsonText(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(jsonText).join(', ')}]`;
  if (v && typeof v === 'object')
    return `{${Object.entries(v)
      .filter(([, x]) => x !== undefined)
      .map(([k, x]) => `${JSON.stringify(k)}: ${jsonText(x)}`)
      .join(', ')}}`;
  return JSON.stringify(v);
}

/** `config` with the change's keys set (a copy; a value of undefined deletes the key). */
export function applyChange<T extends object>(config: T, ch: Change): T {
  const out = structuredClone(config) as Record<string, unknown>;
  for (const [key, value] of ch.sets) {
    const path = key.split('.');
    let node = out;
    for (const k of path.slice(0, -1)) {
      if (!node[k] || typeof node[k] !== 'object') node[k] = {};
      node = node[k] as Record<string, unknown>;
    }
    const last = path[path.length - 1]!;
    if (value === undefined) delete node[last];
    else node[last] = structuredClone(value);
  }
  return out as T;
}

export interface EnginePlan {
  /** One list of parts per kind of device (`counts`: how many devices each stands for; default one each). */
  devices: Part[][];
  counts?: number[];
  notes: string[];
  /** What the run trains and how (for the report's first line). */
  summary: string;
  /** Keys the plan would set in the config it launches (only where the config leaves them unset). */
  chosen?: Chosen[];
  /** CPU memory per machine for what is offloaded (summed over the machine's GPUs). */
  cpu?: Part[];
  /** Why the run cannot start however its memory adds up (e.g. vLLM's share leaves no KV cache for one sequence). */
  problems?: string[];
  /** The engine's own changes worth trying when the run does not fit (besides the micro-batch, checkpointing, LoRA). */
  changes?: Change[];
  /** Our generator's KV budget in tokens (`rollout.max_batch_tokens`, or what the trainer would size), where the
   * engine's rollout is ours. */
  kvTokens?: number;
}

/** Whether the run computes in bf16 autocast on `device` (the trainer's policy.compute_dtype; `fastest` on a GPU is
 * bf16_where_native's rule, on a CPU a measurement, counted here as fp32, the larger). */
export function computesInBf16(config: RunConfig, device: 'cuda' | 'cpu'): boolean {
  const d = config.model.dtype ?? 'auto';
  return d === 'bf16' || (device === 'cuda' && (d === 'auto' || d === 'bf16_where_native' || d === 'fastest'));
}

/** The trainer's gradient checkpointing (precision.gradient_checkpointing): on unless false, for the builtin engine. */
export function checkpointing(config: RunConfig): boolean {
  return config.model.gradient_checkpointing ?? (config.engine ?? 'builtin') === 'builtin';
}

export const LORA_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];

/** The modules LoRA targets: the config's, or the attention projections when it names none (the trainer's
 * `lora.target_modules or [...]`: an empty list too). */
export function loraTargets(lora: { target_modules?: string[] }): string[] {
  return lora.target_modules?.length ? lora.target_modules : LORA_TARGETS;
}

export function builtinPlan(ctx: PlanContext): EnginePlan {
  const { config: c, shape: s } = ctx;
  const bf16 = computesInBf16(c, ctx.device);
  const recipe: Recipe = { act: bf16 ? 2 : 4, checkpointing: checkpointing(c) };
  const p = paramCounts(s);
  const r = c.rollout!;
  const lora = c.model.lora;
  const adapter = lora ? loraAdapter(s, lora.r ?? 8, loraTargets(lora)) : undefined;
  const trained = adapter ? adapter.params : p.total;
  const parts: Part[] = [];
  const add = (name: string, bytes: number, phase: Part['phase'], what: string) =>
    bytes > 0 && parts.push({ name, bytes: Math.round(bytes), phase, what });
  const B = (n: number) => `${(n / 1e9).toFixed(2)} B`;

  // the weights, their gradients and AdamW's moments
  if (lora) {
    add(
      'weights',
      (bf16 ? 2 : 4) * p.total + 4 * trained,
      'all',
      `frozen base ${B(p.total)} × ${bf16 ? 2 : 4} B (${bf16 ? 'bf16' : 'fp32'}) + LoRA adapter ${B(trained)} × 4 B (fp32)`,
    );
  } else {
    add(
      'weights',
      4 * p.total,
      'all',
      `fp32 master weights, ${B(p.total)} × 4 B (the optimizer updates them; autocast computes with bf16 casts)`,
    );
  }
  add('gradients', 4 * trained, 'update', `fp32, ${B(trained)} trained × 4 B`);
  add('optimizer', 8 * trained, 'all', `AdamW's two fp32 moments, ${B(trained)} × 8 B`);
  if (c.algorithm!.kl_coef! > 0) {
    const ref = lora ? (bf16 ? 2 : 4) * trained : bf16 ? 2 * p.linearAndEmbedding + 4 * p.norms : 4 * p.total;
    add(
      'reference',
      ref,
      'all',
      lora
        ? `the starting adapter (${bf16 ? 'bf16' : 'fp32'}; the base is shared)`
        : bf16
          ? 'bf16 copy of the Linear and Embedding weights (fp32 norms)'
          : 'fp32 copy of every weight',
    );
  }
  if (c.algorithm!.name === 'ppo')
    add('value_head', 16 * (s.hidden + 1), 'all', 'PPO value head: weights, gradients, moments (fp32)');
  // what autocast casts to bf16 (fp32 weights only: a bf16 LoRA base is used as it is)
  const castable = lora ? trained : p.cast;
  const updateCasts = recipe.checkpointing && !lora ? Math.max(p.layerLinear, p.outputLayer) : castable;
  if (bf16) {
    add(
      'weight_casts',
      2 * castable,
      'rollout',
      `bf16 copies of ${lora ? 'the adapter' : 'every projection and the output layer'}, cached through a generation call`,
    );
    add(
      'weight_casts_update',
      2 * updateCasts,
      'update',
      lora
        ? 'bf16 copies of the adapter'
        : recipe.checkpointing
          ? "bf16 copies of one layer's (or the output layer's) weights at a time"
          : 'bf16 copies of every projection, kept for the backward pass',
    );
  }
  // the update's activations: one micro-batch of the longest sequences
  const T = r.max_prompt_length! + r.max_response_length!;
  const mb = c.optim!.micro_batch_size!;
  const tokens = mb * T;
  const layer = tokens * layerActivationBytesPerToken(s, recipe);
  const head = tokens * headActivationBytesPerToken(s, recipe);
  const positions = Math.min(chunkPositions(s.vocab), mb * r.max_response_length!);
  // LoRA on the output layer: peft adds its adapter's output to the chunk's logits (two more tensors of the chunk's
  // size in the compute dtype, alive with it)
  const headAdapter = adapter?.adapted.includes('lm_head') ? positions * s.vocab * 2 * recipe.act : 0;
  const logits = logitsChunkBytes(s, recipe, positions) + headAdapter;
  const backward = tokens * layerBackwardBytesPerToken(s, recipe);
  // (a micro-batch of one sequence is cut to its own length, `SequenceBatch.select`: no padding, no mask)
  const mask = attentionMaskBytes(mb > 1 ? mb : 0, T, recipe);
  const gibs = (n: number) => `${(n / 2 ** 30).toFixed(2)} GiB`;
  // a full fine-tune's output-layer and embedding gradients (parts.ts); the pass's end holds nothing else of the
  // micro-batch, so its moment is counted net of what the other update parts add (the casts, the activations, the mask)
  const { head: headGrad, held: heldHead, end: embeddingEnd } = outputLayerGradientBytes(s, !lora);
  const casts = bf16 ? 2 * updateCasts : 0;
  const ckptActivations = tokens * checkpointBytesPerToken(s, recipe) * s.layers;
  // (the output layer's gradient is made after the chunk's logits and their gradient are let go: the larger of the two)
  const ckptMoments = [layer + backward + mask.copy + heldHead, head + Math.max(logits, headGrad)];
  const plainMoments = [backward + heldHead, Math.max(logits, headGrad)];
  const ckptEnd = embeddingEnd - casts - ckptActivations - mask.bool;
  const plainEnd = embeddingEnd - casts - (s.layers * layer + head) - mask.bool - s.layers * mask.copy;
  const withCkpt = ckptActivations + mask.bool + Math.max(...ckptMoments, ckptEnd);
  const withoutCkpt = s.layers * (layer + mask.copy) + mask.bool + head + Math.max(...plainMoments, plainEnd);
  const held = heldHead ? ", the output layer's fp32 gradient held (tied to the embedding)" : '';
  const afterChunk = headGrad ? ` (or, after it, the output layer's fp32 gradient: ${gibs(headGrad)})` : '';
  const end = embeddingEnd
    ? `, and the pass's end: the embedding's dense gradient${s.tied ? ', the held one and their sum' : ''} (${gibs(embeddingEnd)}, with nothing else of the micro-batch left)`
    : '';
  if (recipe.checkpointing) {
    add(
      'activations',
      ckptActivations,
      'update',
      `micro-batch ${mb} × ${T} tokens: each layer's input (checkpointed; with the backward peak ${gibs(withCkpt)}, without checkpointing ${gibs(withoutCkpt)})`,
    );
    add(
      'backward_peak',
      Math.max(...ckptMoments, ckptEnd),
      'update',
      `the largest of one layer recomputed with its gradients and SDPA's ${recipe.act === 2 ? 'bf16' : 'fp32'} copy of the attention mask${held} (${gibs(ckptMoments[0]!)}), one chunk of ${positions} positions × ${s.vocab.toLocaleString('en-US')} logits with the final norm's activations${headAdapter ? " and the output layer's LoRA output" : ''}${afterChunk} (${gibs(ckptMoments[1]!)})${end}`,
    );
    add('attention_mask', mask.bool, 'update', mask.what(true));
  } else {
    add(
      'activations',
      s.layers * layer + head,
      'update',
      `micro-batch ${mb} × ${T} tokens: every layer's (${s.layers}) kept for the backward pass, and the final norm's (with the backward peak ${gibs(withoutCkpt)}; with checkpointing ${gibs(withCkpt)})`,
    );
    add(
      'backward_peak',
      Math.max(...plainMoments, plainEnd),
      'update',
      `the largest of one layer's gradients${held} (${gibs(plainMoments[0]!)}), one chunk of ${positions} positions × ${s.vocab.toLocaleString('en-US')} logits with its gradients (never the whole window)${afterChunk} (${gibs(plainMoments[1]!)})${end}`,
    );
    add('attention_mask', mask.bool + s.layers * mask.copy, 'update', mask.what(false, s.layers));
  }
  // the rollout: the KV cache and its transients
  const allPhase = parts.filter((x) => x.phase === 'all').reduce((a, x) => a + x.bytes, 0);
  const loaded = allPhase - (parts.find((x) => x.name === 'optimizer')?.bytes ?? 0);
  const notes: string[] = [...(adapter?.notes ?? [])];
  if (ctx.gpus > 1)
    notes.push(
      `the builtin engine trains on one device; --gpus ${ctx.gpus} plans one (engines trl and verl use several)`,
    );
  const kvTokens = ourGenerationParts(
    ctx,
    recipe,
    { loaded, moments: 8 * trained, casts: bf16 ? 2 * castable : 0, who: 'the trainer' },
    add,
    notes,
  );
  const summary = `${lora ? `LoRA r=${lora.r ?? 8}` : 'full fine-tune'}, ${bf16 ? 'bf16 autocast' : 'fp32'}, ${recipe.checkpointing ? 'gradient checkpointing' : 'no gradient checkpointing'}, engine builtin`;
  return { devices: [parts], notes, summary, kvTokens, changes: kvBudgetChanges(c, kvTokens) };
}

/** The padding mask of a micro-batch of `mb` sequences of `T` tokens in a forward with gradients, as the trainer's
 * attention runs it (its sas_sdpa_gqa registers transformers' `sdpa_mask`, as SDPA does; flash-attn needs none, and the
 * builtin and trl engines load the policy with SDPA): the micro-batch is left-padded, so transformers materialises a
 * (mb, 1, T, T) bool mask (masking_utils.sdpa_mask; it is skipped only when no row is padded) — and with gradient
 * checkpointing it lives until the backward ends (the checkpointed layers recompute with it) —; each attention call
 * converts it to a copy in the query's dtype (PyTorch's SDPA: convert_boolean_attn_mask, measured on CPU with torch
 * 2.15; on CUDA read in PyTorch's source for the memory-efficient kernel, not measured on a GPU), which that layer's
 * backward keeps: one layer's at a time with checkpointing, every layer's without. */
export function attentionMaskBytes(
  mb: number,
  T: number,
  r: Recipe,
): { bool: number; copy: number; what: (checkpointed: boolean, layers?: number) => string } {
  const bool = mb * T * T;
  const copy = r.act * bool;
  const dtype = r.act === 2 ? 'bf16' : 'fp32';
  return {
    bool,
    copy,
    what: (checkpointed, layers = 0) =>
      checkpointed
        ? `SDPA's padding mask over a left-padded micro-batch, ${mb} × ${T.toLocaleString('en-US')}² booleans, kept until the backward ends (the checkpointed layers recompute with it); the ${dtype} copy SDPA makes of it is in the backward peak`
        : `SDPA's padding mask over a left-padded micro-batch, ${mb} × ${T.toLocaleString('en-US')}² booleans, and the ${dtype} copy of it each of the ${layers} layers keeps for its backward`,
  };
}

/** Smaller KV budgets for our generator (`rollout.max_batch_tokens`), given the one planned (`tokens`): halves of it
 * — of the trainer's own sizing when the config leaves the key unset, which never goes below DEFAULT_MAX_BATCH_TOKENS
 * (generation.auto_max_batch_tokens) —, none below one sequence of the longest (the generator admits a row whatever
 * the budget); and, when the config sets it, leaving it to the trainer. */
export function kvBudgetChanges(c: RunConfig, tokens: number): Change[] {
  const r = c.rollout!;
  const set = r.max_batch_tokens;
  const longest = r.max_prompt_length! + r.max_response_length!;
  const out: Change[] = [];
  for (const f of [2, 4, 8]) {
    const v = Math.floor(tokens / f);
    if (v < longest) break;
    out.push({
      sets: [['rollout.max_batch_tokens', v]],
      why:
        set !== undefined
          ? 'fewer rows a wave'
          : tokens === DEFAULT_MAX_BATCH_TOKENS
            ? `fewer rows a wave; left unset the trainer sizes at least ${DEFAULT_MAX_BATCH_TOKENS.toLocaleString('en-US')} tokens`
            : `fewer rows a wave; left unset the trainer sizes ${tokens.toLocaleString('en-US')} tokens`,
      knob: 'rollout.max_batch_tokens',
    });
  }
  if (set !== undefined)
    out.push({
      sets: [['rollout.max_batch_tokens', undefined]],
      why: 'the trainer sizes the KV cache to what is left',
      knob: 'rollout.max_batch_tokens left out',
    });
  return out;
}

/** Our generator's parts in the rollout (generation.py, used by the builtin and the trl engine): the KV cache
 * (`rollout.max_batch_tokens`, or sized from what is free: autoMaxBatchTokens), a prefill piece and the sampler's
 * distribution; a note when the cache holds less than one group. */
export function ourGenerationParts(
  ctx: PlanContext,
  recipe: Recipe,
  free: { loaded: number; moments: number; casts: number; who: string },
  add: (name: string, bytes: number, phase: Part['phase'], what: string) => unknown,
  notes: string[],
): number {
  const { config: c, shape: s } = ctx;
  const r = c.rollout!;
  const kv = kvBytesPerToken(s, recipe.act);
  const maxBatchTokens =
    r.max_batch_tokens ?? autoMaxBatchTokens(ctx.device, ctx.gpuMemoryBytes, free.loaded, free.moments, free.casts, kv);
  add(
    'kv_cache',
    2 * maxBatchTokens * kv,
    'rollout',
    `${maxBatchTokens.toLocaleString('en-US')} tokens × ${kv.toLocaleString('en-US')} B (${r.max_batch_tokens ? 'rollout.max_batch_tokens' : `sized by ${free.who}`}), and one copy while rows are selected or merged`,
  );
  const prefill = Math.min(maxBatchTokens, PREFILL_TOKENS);
  add(
    'prefill',
    prefill * inferenceBytesPerToken(s, recipe),
    'rollout',
    `a prefill piece of ${prefill.toLocaleString('en-US')} tokens, one layer at a time`,
  );
  const rows = Math.max(
    1,
    Math.min(r.batch_size! * r.n!, Math.floor(maxBatchTokens / Math.max(1, r.max_turn_tokens!))),
  );
  add(
    'sampling',
    rows * s.vocab * 18,
    'rollout',
    `the next-token logits of up to ${rows} rows and the sampler's fp32 copies (logits, log-softmax, probabilities, cumulative sum)`,
  );
  const minTokens = r.n! * (r.max_prompt_length! + r.max_turn_tokens!);
  if (maxBatchTokens < minTokens)
    notes.push(
      `the KV cache holds ${maxBatchTokens.toLocaleString('en-US')} tokens, less than one group's ${r.n} rows of the longest prompt and a turn (${minTokens.toLocaleString('en-US')}): rollouts run a few rows at a time`,
    );
  return maxBatchTokens;
}

/** `rollout.max_batch_tokens` when the config leaves it out, as the trainer's generation.auto_max_batch_tokens: on
 * CUDA, the memory left after what is loaded (`loaded`), the moments, the weights cast for generation and a reserve of
 * AUTO_RESERVE of the GPU, halved (the cache and a copy), in tokens; DEFAULT_MAX_BATCH_TOKENS on CPU, and at least
 * that. */
export function autoMaxBatchTokens(
  device: 'cuda' | 'cpu',
  gpuMemoryBytes: number,
  loaded: number,
  moments: number,
  casts: number,
  kvPerToken: number,
): number {
  if (device !== 'cuda') return DEFAULT_MAX_BATCH_TOKENS;
  const free = gpuMemoryBytes - loaded;
  return Math.max(
    DEFAULT_MAX_BATCH_TOKENS,
    Math.floor((free - AUTO_RESERVE * gpuMemoryBytes - moments - casts) / (2 * kvPerToken)),
  );
}
