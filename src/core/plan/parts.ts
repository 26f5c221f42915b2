/**
 * The parts a training process's GPU memory is made of, as functions of the model's shape and the run config, for
 * every engine's plan to use: an engine's planner (builtin.ts, and later veRL's and TRL's) says what it stores in
 * which dtype and where (a `Recipe`) and adds the parts of its own (a rollout engine's share, FSDP's gathered layers).
 *
 * The activation counts are per token, for the layer of the Llama family (pre-norm, GQA, SwiGLU MLP) as
 * transformers runs it: the tensors autograd keeps for the backward pass of one layer, with bf16 autocast over a bf16
 * residual stream, or in fp32. They were checked against the bytes torch really allocates for small Qwen2 models on
 * CPU (trainer/tests/test_memory_plan.py; docs/trainer.md, "Memory on one GPU").
 */
import { kvBytesPerToken, type ModelShape, paramCounts } from './model';

/** The share of a device's memory a plan may fill: the CUDA context and the caching allocator's fragmentation take
 * the rest. */
export const USABLE_SHARE = 0.95;
export const DEFAULT_GPU_MEMORY = 80 * 2 ** 30;

/** Logits a chunk of the log-prob computation holds (positions × vocabulary), as the trainer's logprobs.CHUNK_ELEMENTS. */
export const CHUNK_ELEMENTS = 2 ** 26;
/** The generator's prefill piece (generation.PREFILL_TOKENS) and its default budget on CPU (DEFAULT_MAX_BATCH_TOKENS). */
export const PREFILL_TOKENS = 16384;
export const DEFAULT_MAX_BATCH_TOKENS = 65536;
/** The share of the GPU the trainer leaves out of the KV cache when it sizes it itself (generation.AUTO_RESERVE). */
export const AUTO_RESERVE = 0.15;

/** What an engine stores in which dtype, per trained parameter and per activation. */
export interface Recipe {
  /** Bytes per element of the activations, the residual stream and the KV cache: 2 under bf16 autocast, 4 in fp32. */
  act: 2 | 4;
  /** Activation checkpointing of every layer. */
  checkpointing: boolean;
  /** A device's share of the sharded state (FSDP, ZeRO): 1 on one device. */
  shards?: number;
}

/** Bytes one layer keeps for its backward pass, per token (see the module's docstring). Per token, with H the width,
 * Q the query heads' width and I the MLP's:
 * - bf16 autocast over a bf16 residual stream: each RMSNorm's fp32 copy (4H) and normalised bf16 state (2H), and the
 *   bf16 cast of its fp32 output each projection after it saves (q, k, v: 3 × 2H; gate, up: 2 × 2H); the rotary
 *   query, the keys and values repeated to every query head (SDPA with a mask), the attention output and o_proj's
 *   input (5 × 2Q); the MLP's gate, up, SiLU and product (4 × 2I): 22H + 10Q + 8I;
 * - fp32: the norms' input and normalised states (8H and 12H, no casts), 5 × 4Q, 4 × 4I: 20H + 20Q + 16I. */
export function layerActivationBytesPerToken(s: ModelShape, r: Recipe): number {
  const Q = s.heads * s.headDim;
  return r.act === 2 ? 22 * s.hidden + 10 * Q + 8 * s.intermediate : 20 * s.hidden + 20 * Q + 16 * s.intermediate;
}

/** Bytes a checkpointed layer keeps per token: its input, in the residual stream's dtype. */
export function checkpointBytesPerToken(s: ModelShape, r: Recipe): number {
  return s.hidden * r.act;
}

/** Bytes per token outside the layers in the update: the final norm (fp32 copy, normalised state, fp32 output) and
 * the selected positions' hidden states the output layer reads (alive with the log-prob chunks, freed before the
 * layers' backward). */
export function headActivationBytesPerToken(s: ModelShape, r: Recipe): number {
  return (r.act === 2 ? 4 + 2 + 4 + 4 : 4 + 4 + 4) * s.hidden;
}

/**
 * The fp32 gradients of a trained output layer and embedding (full fine-tuning; vocabulary × hidden each: the weights
 * are fp32), by moment of the backward pass: `head`, the output layer's as the head's backward makes it (under bf16
 * its bf16 product, then its fp32 cast, the layer's bf16 cast freed by then: 4 B beyond that cast); `held`, what
 * every layer's backward holds besides its own — a tied output layer is one weight with two contributions, and
 * autograd keeps the head's until the embedding's arrives; `end`, the pass's end: the embedding's dense gradient, and
 * tied the held one and their sum, which autograd makes out of place (three copies at once). Measured on CPU at
 * Qwen2.5-3B's width and vocabulary through both engines' update steps: 12 B per vocabulary × hidden beyond the
 * gradients, tied (docs/trainer.md; test_memory_plan.py's wide-head cases keep it). Nothing when not `trained`.
 */
export function outputLayerGradientBytes(s: ModelShape, trained: boolean): { head: number; held: number; end: number } {
  if (!trained) return { head: 0, held: 0, end: 0 };
  const vh = s.vocab * s.hidden;
  return { head: 4 * vh, held: s.tied ? 4 * vh : 0, end: (s.tied ? 12 : 4) * vh };
}

/** Bytes of the gradients in flight while one layer's backward runs, per token (its outputs' and inputs' gradients). */
export function layerBackwardBytesPerToken(s: ModelShape, r: Recipe): number {
  return r.act * (2 * s.intermediate + 4 * s.hidden);
}

/** Bytes per token of a forward without autograd (a prefill, a log-prob pass): one layer's transient tensors. */
export function inferenceBytesPerToken(s: ModelShape, r: Recipe): number {
  return r.act * (6 * s.hidden + 2 * s.heads * s.headDim + 3 * s.intermediate) + 4 * s.hidden;
}

/** Positions of one log-prob chunk (logprobs.chunk_positions). */
export function chunkPositions(vocab: number): number {
  return Math.max(1, Math.floor(CHUNK_ELEMENTS / Math.max(1, vocab)));
}

/** Bytes one chunk of the log-prob computation holds: the chunk's logits (bf16 under autocast), their fp32 copy,
 * the log-sum-exp's and the entropy's softmax temporaries, and in the backward pass their gradients. */
export function logitsChunkBytes(s: ModelShape, r: Recipe, positions: number): number {
  return positions * s.vocab * (r.act === 2 ? 16 : 17);
}

/** The model's parameter counts and KV bytes, re-exported for engines. */
export function shapeNumbers(s: ModelShape, r: Recipe): { params: ReturnType<typeof paramCounts>; kvPerToken: number } {
  return { params: paramCounts(s), kvPerToken: kvBytesPerToken(s, r.act) };
}

/** vLLM's memory besides its weights and KV cache, inside its `gpu_memory_utilization` share, estimated from vLLM's
 * memory profile (not measured here: no GPU with vLLM was available): the profile run's activations for
 * `max_num_batched_tokens` tokens (a forward without autograd, one layer at a time), the sampler's fp32 logits and
 * their softmax for `max_num_seqs` rows, and 0.5 GiB of CUDA graphs. */
export function vllmOverheadBytes(s: ModelShape, maxBatchedTokens: number, maxSeqs: number): number {
  return (
    maxBatchedTokens * inferenceBytesPerToken(s, { act: 2, checkpointing: false }) +
    maxSeqs * s.vocab * 8 +
    0.5 * 2 ** 30
  );
}

/** A colocated vLLM at `utilization` of a GPU of `gpuBytes`: its share, its bf16 weights (÷ tensor parallel), its
 * overhead, and the KV cache that is left (bytes and tokens). vLLM refuses to start when that cache cannot hold one
 * sequence of `maxModelLen` tokens. */
export function vllmShare(
  s: ModelShape,
  utilization: number,
  gpuBytes: number,
  tensorParallel: number,
  maxBatchedTokens: number,
  maxSeqs: number,
): { share: number; weights: number; overhead: number; kvBytes: number; kvTokens: number } {
  const share = Math.floor(utilization * gpuBytes);
  const weights = Math.ceil((2 * paramCounts(s).total) / tensorParallel);
  const overhead = vllmOverheadBytes(s, maxBatchedTokens, maxSeqs);
  const kvBytes = Math.max(0, share - weights - overhead);
  const kvPerToken = (kvBytesPerToken(s, 2) * Math.max(1, s.kvHeads / tensorParallel)) / s.kvHeads; // KV heads split over the tensor-parallel ranks
  return { share, weights, overhead, kvBytes, kvTokens: Math.floor(kvBytes / kvPerToken) };
}

export const gibText = (n: number): string => `${(n / 2 ** 30).toFixed(2)} GiB`;
