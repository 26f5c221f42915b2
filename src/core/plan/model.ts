/**
 * A causal LM's shape from its `config.json` (no weights needed): widths, layers, heads, vocabulary, tied
 * embeddings, and from them the parameter counts the memory plan is made of. Decoder-only transformers of the Llama
 * family: qwen2 (biases on q/k/v), qwen3 (q/k norms), llama and mistral (`attention_bias`, `mlp_bias`).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface ModelShape {
  modelType: string;
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  intermediate: number;
  vocab: number;
  tied: boolean;
  /** Biases on the q, k, v projections (qwen2; llama's attention_bias also on o). */
  qkvBias: boolean;
  oBias: boolean;
  mlpBias: boolean;
  /** Per-head RMSNorm of q and k (qwen3). */
  qkNorm: boolean;
  /** config.json's dtype of the released weights (what `model/` is written in at the end). */
  dtype?: string;
  /** max_position_embeddings: the longest sequence (vLLM's max_model_len when the engine does not set one). */
  maxPositions?: number;
}

export class ModelShapeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ModelShapeError';
  }
}

export const SUPPORTED_MODEL_TYPES = ['qwen2', 'qwen3', 'llama', 'mistral'] as const;

/** The shape a parsed config.json describes (its `text_config` for a multimodal wrapper); `where` names it in errors. */
export function modelShape(config: Record<string, unknown>, where = 'config.json'): ModelShape {
  const c = (config.text_config && typeof config.text_config === 'object' ? config.text_config : config) as Record<
    string,
    unknown
  >;
  const modelType = String(c.model_type ?? config.model_type ?? '');
  if (!(SUPPORTED_MODEL_TYPES as readonly string[]).includes(modelType)) {
    throw new ModelShapeError(
      `${where}: model_type ${JSON.stringify(modelType)}: the memory planner knows ${SUPPORTED_MODEL_TYPES.join(', ')} (decoder-only transformers of the Llama family)`,
    );
  }
  const num = (key: string, fallback?: number): number => {
    const v = c[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0)
      throw new ModelShapeError(`${where}: ${key}: expected a positive number, got ${JSON.stringify(c[key])}`);
    return v;
  };
  const hidden = num('hidden_size');
  const heads = num('num_attention_heads');
  const headDim = typeof c.head_dim === 'number' && c.head_dim > 0 ? c.head_dim : hidden / heads;
  const attentionBias = c.attention_bias === true;
  return {
    modelType,
    hidden,
    layers: num('num_hidden_layers'),
    heads,
    kvHeads: num('num_key_value_heads', heads),
    headDim,
    intermediate: num('intermediate_size'),
    vocab: num('vocab_size'),
    tied: (c.tie_word_embeddings ?? config.tie_word_embeddings) === true,
    qkvBias: modelType === 'qwen2' || attentionBias,
    oBias: modelType !== 'qwen2' && attentionBias,
    mlpBias: c.mlp_bias === true,
    qkNorm: modelType === 'qwen3',
    dtype: typeof (c.torch_dtype ?? c.dtype) === 'string' ? String(c.torch_dtype ?? c.dtype) : undefined,
    maxPositions:
      typeof c.max_position_embeddings === 'number' && c.max_position_embeddings > 0
        ? c.max_position_embeddings
        : undefined,
  };
}

/** The shape of the model directory `dir` (its config.json). */
export function readModelShape(dir: string): ModelShape {
  const file = join(dir, 'config.json');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ModelShapeError(
      `${file}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file (model.path must be a model directory with its config.json)' : (e as Error).message}`,
    );
  }
  let config: unknown;
  try {
    config = JSON.parse(text);
  } catch (e) {
    throw new ModelShapeError(`${file}: not valid JSON: ${(e as Error).message}`);
  }
  if (!config || typeof config !== 'object') throw new ModelShapeError(`${file}: expected a JSON object`);
  return modelShape(config as Record<string, unknown>, file);
}

/** The projections of one layer by their module name: [in, out, bias]. */
export function layerLinears(s: ModelShape): Record<string, [number, number, boolean]> {
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  return {
    q_proj: [s.hidden, q, s.qkvBias],
    k_proj: [s.hidden, kv, s.qkvBias],
    v_proj: [s.hidden, kv, s.qkvBias],
    o_proj: [q, s.hidden, s.oBias],
    gate_proj: [s.hidden, s.intermediate, s.mlpBias],
    up_proj: [s.hidden, s.intermediate, s.mlpBias],
    down_proj: [s.intermediate, s.hidden, s.mlpBias],
  };
}

export interface ParamCounts {
  total: number;
  /** The weights and biases of Linear and Embedding layers (what bf16 autocast computes with; the embedding and the
   * output layer counted once when tied). */
  linearAndEmbedding: number;
  /** Of them, what autocast casts to bf16 as it runs: the projections and the output layer (an embedding is looked up,
   * not cast). */
  cast: number;
  /** Norm weights (1-D, kept in their dtype). */
  norms: number;
  /** The largest layer's projections (what one checkpointed layer's recompute casts). */
  layerLinear: number;
  embedding: number;
  outputLayer: number;
}

export function paramCounts(s: ModelShape): ParamCounts {
  const layerLinear = Object.values(layerLinears(s)).reduce((a, [i, o, b]) => a + i * o + (b ? o : 0), 0);
  const layerNorms = 2 * s.hidden + (s.qkNorm ? 2 * s.headDim : 0);
  const embedding = s.vocab * s.hidden;
  const outputLayer = s.vocab * s.hidden;
  const norms = s.layers * layerNorms + s.hidden;
  const linearAndEmbedding = s.layers * layerLinear + embedding + (s.tied ? 0 : outputLayer);
  return {
    total: linearAndEmbedding + norms,
    linearAndEmbedding,
    cast: s.layers * layerLinear + outputLayer,
    norms,
    layerLinear,
    embedding,
    outputLayer,
  };
}

/** Trainable parameters of LoRA rank `r` on the modules `targets` (peft's default for our config: the attention
 * projections); throws for a target the planner does not know. */
export function loraParams(s: ModelShape, r: number, targets: string[]): number {
  const linears = layerLinears(s);
  let per = 0;
  for (const t of targets) {
    const m = linears[t];
    if (!m)
      throw new ModelShapeError(
        `model.lora.target_modules: ${JSON.stringify(t)}: the memory planner knows ${Object.keys(linears).join(', ')}`,
      );
    per += r * (m[0] + m[1]);
  }
  return s.layers * per;
}

/** Bytes of KV cache per token (keys and values of every layer) in a dtype of `bytes` bytes. */
export function kvBytesPerToken(s: ModelShape, bytes: number): number {
  return 2 * s.layers * s.kvHeads * s.headDim * bytes;
}
