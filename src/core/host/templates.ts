/**
 * Run configs from a few answers ("Search Agent: New Training Run…"): the CPU demo, or a local Hugging Face model in
 * Search-R1's settings (`algorithm.preset` search-r1-grpo or search-r1-ppo: GRPO n=5 or PPO, KL 0.001, lr 1e-6; top-k 3,
 * max_turns 4), trained by the builtin engine or TRL's (engine "trl": GRPO only; its CPU choice is the trl-tiny
 * example's random Qwen2-style model). Pure; the extension asks the questions and writes the file.
 */
import { type RunConfig, SEARCH_R1_BASE_TEMPLATE } from '../run/config';

export interface NewRunAnswers {
  name: string;
  /** What trains (default builtin). trl: GRPO only. */
  engine?: 'builtin' | 'trl';
  model: { kind: 'tiny' } | { kind: 'hf'; path: string; lora?: boolean };
  data: { kind: 'demo' } | { kind: 'files'; train: string; eval?: string };
  retriever:
    | { kind: 'demo' }
    | { kind: 'bm25'; index?: string; corpus?: string }
    | { kind: 'dense'; index: string; model: string }
    | { kind: 'remote'; url: string };
  algorithm: 'grpo' | 'ppo';
  /** Paths in the answers are made relative to this directory (where the config is written). */
  relativeTo?: (p: string) => string;
}

const DEMO_PROMPT =
  'Answer the question. Search with <search> query </search> when you need facts, then answer with <answer> answer </answer>. Question: {question}\n';

/**
 * The config a user's answers describe. The demo task is named by its stable built-in names (`builtin:demo/train`,
 * …; src/core/paths.ts), never by a path into the installed extension (which changes with every update).
 */
export function newRunConfig(a: NewRunAnswers): RunConfig {
  const rel = a.relativeTo ?? ((p: string) => p);
  const trl = a.engine === 'trl';
  const tiny = a.model.kind === 'tiny' && !trl;
  const hf = a.model.kind === 'hf' ? a.model : undefined;
  if (trl && a.model.kind === 'tiny') return trlTinyConfig(a, rel);
  const config: RunConfig = {
    name: a.name,
    ...(trl ? { engine: 'trl' as const } : {}),
    seed: 1,
    data:
      a.data.kind === 'demo'
        ? { train: 'builtin:demo/train', eval: 'builtin:demo/eval', ...(tiny ? { prompt_template: DEMO_PROMPT } : {}) }
        : {
            train: rel(a.data.train),
            ...(a.data.eval ? { eval: rel(a.data.eval) } : {}),
            ...(tiny ? { prompt_template: DEMO_PROMPT } : { prompt_template: SEARCH_R1_BASE_TEMPLATE }),
          },
    model: tiny
      ? {
          kind: 'tiny',
          tiny: {
            layers: 2,
            d_model: 128,
            heads: 4,
            max_len: 1024,
            vocab: a.data.kind === 'demo' ? ['builtin:demo/corpus'] : [],
          },
        }
      : {
          kind: 'hf',
          path: rel(hf?.path ?? ''),
          dtype: 'auto',
          gradient_checkpointing: true,
          ...(hf?.lora ? { lora: { r: 16, alpha: 32 } } : {}),
        },
    retriever:
      a.retriever.kind === 'demo'
        ? { kind: 'demo', topk: 3 }
        : a.retriever.kind === 'bm25'
          ? {
              kind: 'bm25',
              ...(a.retriever.index ? { index: rel(a.retriever.index) } : { corpus: rel(a.retriever.corpus ?? '') }),
              topk: 3,
            }
          : a.retriever.kind === 'dense'
            ? { kind: 'dense', index: rel(a.retriever.index), model: rel(a.retriever.model), topk: 3 }
            : { kind: 'remote', url: a.retriever.url, topk: 3 },
    reward: { module: 'builtin:em' },
    rollout: tiny
      ? { batch_size: 8, n: 8, max_turns: 3, max_turn_tokens: 24, max_response_length: 600, max_obs_length: 256 }
      : {
          batch_size: 512,
          max_turns: 4,
          max_turn_tokens: 500,
          max_response_length: 4096,
          max_obs_length: 500,
          max_prompt_length: 4096,
        },
    algorithm: tiny
      ? a.algorithm === 'grpo'
        ? { name: 'grpo', kl_coef: 0.02 }
        : { name: 'ppo', kl_coef: 0.02, gamma: 1, lam: 1 }
      : { preset: a.algorithm === 'grpo' || trl ? 'search-r1-grpo' : 'search-r1-ppo' },
    optim: tiny
      ? { lr: 3e-4, warmup_steps: 20, ppo_epochs: 2, mini_batch_size: 64, micro_batch_size: 8 }
      : // the rest (lr 1e-6 warmed up over 28.5 % of the steps, mini-batches of 256 prompts, the critic's) is the preset's
        { micro_batch_size: 8 },
    train: tiny
      ? {
          steps: 120,
          eval_every: 20,
          checkpoint_every: 40,
          supervised_warmup: { steps: 300, lr: 1e-3, batch_size: 32 },
        }
      : { steps: 1005, eval_every: 50, checkpoint_every: 100 },
  };
  return config;
}

/** engine "trl" on CPU: examples/trl-tiny.run.json's settings (a random Qwen2-style model from a config.json, shipped as builtin:trl-tiny/model). */
function trlTinyConfig(a: NewRunAnswers, rel: (p: string) => string): RunConfig {
  const data =
    a.data.kind === 'demo'
      ? { train: 'builtin:demo/train', eval: 'builtin:demo/eval', eval_size: 8 }
      : { train: rel(a.data.train), ...(a.data.eval ? { eval: rel(a.data.eval), eval_size: 8 } : {}) };
  const base = newRunConfig({ ...a, engine: 'builtin' });
  return {
    name: a.name,
    engine: 'trl',
    seed: 1,
    data: { ...data, prompt_template: DEMO_PROMPT },
    model: { kind: 'hf', path: 'builtin:trl-tiny/model', random_init: true, device: 'cpu' },
    retriever: base.retriever,
    reward: { module: 'builtin:em' },
    rollout: { batch_size: 4, n: 4, max_turns: 1, max_turn_tokens: 16, max_response_length: 400, max_obs_length: 200 },
    algorithm: { name: 'grpo', kl_coef: 0.02 },
    optim: { lr: 1e-3, mini_batch_size: 16, micro_batch_size: 8 },
    train: { steps: 10, eval_every: 5, checkpoint_every: 5 },
  };
}
