/**
 * A causal LM's shape from its `config.json` (no weights needed): widths, layers, heads, vocabulary, tied
 * embeddings, and from them the parameter counts the memory plan is made of. Decoder-only transformers of the Llama
 * family: qwen2 (biases on q/k/v), qwen3 (q/k norms), llama and mistral (`attention_bias`, `mlp_bias`).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PlanError } from './errors';

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

/** A model's config.json the planner cannot read (its message names the file and the field). */
export class ModelShapeError extends PlanError {
  constructor(message: string) {
    super(message);
    this.name = 'ModelShapeError';
  }
}

export const SUPPORTED_MODEL_TYPES = ['qwen2', 'qwen3', 'llama', 'mistral'] as const;

/** The largest value the planner takes for each count of a config.json: well above any released model's (Llama 3.1
 * 405B: hidden 16,384, 126 layers, 128 heads, MLP 53,248; Gemma's 262,144-entry vocabulary), so that what exceeds it
 * is a mistake (`vocab_size: 1e20`), not a model. */
export const SHAPE_LIMITS = {
  hidden_size: 2 ** 17,
  num_hidden_layers: 1024,
  num_attention_heads: 1024,
  num_key_value_heads: 1024,
  head_dim: 1024,
  intermediate_size: 2 ** 20,
  vocab_size: 2 ** 22,
} as const;

/** Qwen3Config's head_dim when config.json leaves it out (transformers: `head_dim: int = 128`); the other types derive
 * it as hidden_size ÷ num_attention_heads. */
const DEFAULT_HEAD_DIM: Partial<Record<string, number>> = { qwen3: 128 };

const isObject = (x: unknown): x is Record<string, unknown> => !!x && typeof x === 'object' && !Array.isArray(x);

/** The shape a parsed config.json describes (its `text_config` for a multimodal wrapper); `where` names it in errors.
 * Counts must be positive integers (at most SHAPE_LIMITS); heads divide the width unless head_dim is given (as
 * transformers derives it: hidden_size ÷ num_attention_heads, except Qwen3Config's default of 128), and key/value heads
 * divide the query heads (grouped-query attention). */
export function modelShape(config: Record<string, unknown>, where = 'config.json'): ModelShape {
  if (!isObject(config)) throw new ModelShapeError(`${where}: expected a JSON object`);
  const c = isObject(config.text_config) ? config.text_config : config;
  const modelType = String(c.model_type ?? config.model_type ?? '');
  if (!(SUPPORTED_MODEL_TYPES as readonly string[]).includes(modelType)) {
    throw new ModelShapeError(
      `${where}: model_type ${JSON.stringify(modelType)}: the memory planner knows ${SUPPORTED_MODEL_TYPES.join(', ')} (decoder-only transformers of the Llama family)`,
    );
  }
  const count = (key: keyof typeof SHAPE_LIMITS, fallback?: number): number => {
    const v = c[key] === undefined || c[key] === null ? fallback : c[key];
    const limit = SHAPE_LIMITS[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0 || v > limit)
      throw new ModelShapeError(
        `${where}: ${key}: expected a positive integer${typeof v === 'number' && Number.isInteger(v) && v > limit ? ` of at most ${limit.toLocaleString('en-US')} (more is no model's)` : ''}, got ${JSON.stringify(c[key]) ?? 'nothing'}`,
      );
    return v;
  };
  const hidden = count('hidden_size');
  const heads = count('num_attention_heads');
  // head_dim: as given; left out (or null where transformers then derives it: llama, mistral) the type's default
  const headDimGiven =
    c.head_dim !== undefined && (c.head_dim !== null || modelType === 'qwen2' || modelType === 'qwen3');
  let headDim: number;
  if (headDimGiven) headDim = count('head_dim');
  else if (DEFAULT_HEAD_DIM[modelType] !== undefined) headDim = DEFAULT_HEAD_DIM[modelType]!;
  else {
    if (hidden % heads)
      throw new ModelShapeError(
        `${where}: num_attention_heads: ${heads} does not divide hidden_size ${hidden}, and no head_dim is given (transformers derives it as hidden_size ÷ num_attention_heads)`,
      );
    headDim = hidden / heads;
  }
  const kvHeads = count('num_key_value_heads', heads);
  if (heads % kvHeads)
    throw new ModelShapeError(
      `${where}: num_key_value_heads: ${kvHeads} does not divide num_attention_heads ${heads} (grouped-query attention shares each key/value head among a whole number of query heads)`,
    );
  const attentionBias = c.attention_bias === true;
  return {
    modelType,
    hidden,
    layers: count('num_hidden_layers'),
    heads,
    kvHeads,
    headDim,
    intermediate: count('intermediate_size'),
    vocab: count('vocab_size'),
    tied: (c.tie_word_embeddings ?? config.tie_word_embeddings) === true,
    qkvBias: modelType === 'qwen2' || attentionBias,
    oBias: modelType !== 'qwen2' && attentionBias,
    mlpBias: c.mlp_bias === true,
    qkNorm: modelType === 'qwen3',
    dtype: typeof (c.torch_dtype ?? c.dtype) === 'string' ? String(c.torch_dtype ?? c.dtype) : undefined,
    maxPositions:
      typeof c.max_position_embeddings === 'number' &&
      Number.isInteger(c.max_position_embeddings) &&
      c.max_position_embeddings > 0
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
  if (!isObject(config)) throw new ModelShapeError(`${file}: expected a JSON object`);
  return modelShape(config, file);
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

/** One module of a causal LM of the Llama family as `model.named_modules()` lists it (transformers 5: the same tree
 * for qwen2, qwen3, llama and mistral), and what LoRA on it adds: a Linear's or an Embedding's (in, out), else null
 * (peft adapts neither a norm nor a container: it refuses the target). */
interface Module {
  name: string;
  type: string;
  dims: [number, number] | null;
}

/** Every module of the model, named as peft sees them (the root's name is ''). */
export function namedModules(s: ModelShape): Module[] {
  const cls = { qwen2: 'Qwen2', qwen3: 'Qwen3', llama: 'Llama', mistral: 'Mistral' }[s.modelType] ?? 'Model';
  const out: Module[] = [
    { name: '', type: `${cls}ForCausalLM`, dims: null },
    { name: 'model', type: `${cls}Model`, dims: null },
    { name: 'model.embed_tokens', type: 'Embedding', dims: [s.vocab, s.hidden] },
    { name: 'model.layers', type: 'ModuleList', dims: null },
  ];
  const linears = layerLinears(s);
  for (let i = 0; i < s.layers; i++) {
    const l = `model.layers.${i}`;
    out.push({ name: l, type: `${cls}DecoderLayer`, dims: null });
    out.push({ name: `${l}.self_attn`, type: `${cls}Attention`, dims: null });
    for (const p of ['q_proj', 'k_proj', 'v_proj', 'o_proj'])
      out.push({ name: `${l}.self_attn.${p}`, type: 'Linear', dims: [linears[p]![0], linears[p]![1]] });
    if (s.qkNorm)
      for (const n of ['q_norm', 'k_norm'])
        out.push({ name: `${l}.self_attn.${n}`, type: `${cls}RMSNorm`, dims: null });
    out.push({ name: `${l}.mlp`, type: `${cls}MLP`, dims: null });
    for (const p of ['gate_proj', 'up_proj', 'down_proj'])
      out.push({ name: `${l}.mlp.${p}`, type: 'Linear', dims: [linears[p]![0], linears[p]![1]] });
    out.push({ name: `${l}.mlp.act_fn`, type: 'SiLUActivation', dims: null });
    for (const n of ['input_layernorm', 'post_attention_layernorm'])
      out.push({ name: `${l}.${n}`, type: `${cls}RMSNorm`, dims: null });
  }
  out.push(
    { name: 'model.norm', type: `${cls}RMSNorm`, dims: null },
    { name: 'model.rotary_emb', type: `${cls}RotaryEmbedding`, dims: null },
    { name: 'lm_head', type: 'Linear', dims: [s.hidden, s.vocab] },
  );
  return out;
}

/** What LoRA of rank `r` on `targets` trains, as peft 0.21 matches a list of target names
 * (peft/tuners/tuners_utils.py, check_target_module_exists): a module is adapted when its name equals a target or
 * ends with "." + the target — "q_proj", "self_attn.q_proj" and "model.layers.0.self_attn.q_proj" (that layer's
 * only) all name modules; a list's names are never regular expressions (peft takes one only as a single string,
 * which `model.lora.target_modules` is not). A Linear of (in, out) adds r × (in + out) trained parameters (no bias),
 * an Embedding of (vocabulary, width) r × (vocabulary + width). `field` names the config key in errors and notes.
 * Throws PlanError where peft would refuse: a target naming a module that is neither (a norm, an attention block:
 * "Target module … is not supported"), or no target naming any module ("Target modules … not found"). */
export function loraAdapter(
  s: ModelShape,
  r: number,
  targets: string[],
  field = 'model.lora.target_modules',
): { params: number; notes: string[]; adapted: string[] } {
  const modules = namedModules(s);
  const chosen = new Map<string, Module>();
  const notes: string[] = [];
  const unmatched: string[] = [];
  for (const t of targets) {
    const hits = modules.filter((m) => m.name === t || m.name.endsWith(`.${t}`));
    if (!hits.length) {
      unmatched.push(t);
      continue;
    }
    const bad = hits.find((m) => !m.dims);
    if (bad)
      throw new PlanError(
        `${field}: ${JSON.stringify(t)} names ${bad.name || 'the model itself'} (${bad.type})${hits.length > 1 ? ` and ${hits.length - 1} more` : ''}, which LoRA cannot adapt: peft adapts Linear and Embedding layers (this model's: ${LORA_NAMES.join(', ')}) and refuses the rest`,
      );
    for (const m of hits) chosen.set(m.name, m);
  }
  const literal = (t: string) =>
    /[\\^$*+?()[\]{}|]/.test(t)
      ? " (a list's names are matched literally, as peft does: it takes a regular expression only as one string, which this field is not)"
      : '';
  if (!chosen.size)
    throw new PlanError(
      `${field}: ${targets.length ? targets.map((t) => JSON.stringify(t)).join(', ') : 'an empty list'}: no module of this ${s.modelType} model has ${targets.length === 1 ? 'that name' : 'any of those names'}${targets.map(literal).find(Boolean) ?? ''}; peft would refuse it ("Target modules … not found in the base model"). Module names: ${LORA_NAMES.join(', ')} (or a longer suffix of model.layers.N.self_attn.q_proj)`,
    );
  for (const t of unmatched)
    notes.push(
      `${field}: ${JSON.stringify(t)} names no module of this ${s.modelType} model: peft ignores it, as the plan does${literal(t)}`,
    );
  let params = 0;
  for (const m of chosen.values()) params += r * (m.dims![0] + m.dims![1]);
  const adapted = [...new Set([...chosen.keys()].map((n) => n.replace(/^model\.layers\.\d+\./, '')))];
  return { params, notes, adapted };
}

/** The last name of each module LoRA can adapt (a target may name any suffix of a module's full name). */
const LORA_NAMES = [
  'q_proj',
  'k_proj',
  'v_proj',
  'o_proj',
  'gate_proj',
  'up_proj',
  'down_proj',
  'embed_tokens',
  'lm_head',
];

/** Trainable parameters of LoRA rank `r` on the modules `targets` (loraAdapter). */
export function loraParams(s: ModelShape, r: number, targets: string[]): number {
  return loraAdapter(s, r, targets).params;
}

/** Bytes of KV cache per token (keys and values of every layer) in a dtype of `bytes` bytes. */
export function kvBytesPerToken(s: ModelShape, bytes: number): number {
  return 2 * s.layers * s.kvHeads * s.headDim * bytes;
}
