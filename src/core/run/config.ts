/**
 * The run config (`*.run.json`), one source for everyone who reads it: the TypeScript type, the JSON Schema the
 * editor validates `*.run.json` with (docs/schema/run-config.schema.json, contributed through jsonValidation),
 * and the copy the Python trainer validates with and takes its defaults from
 * (trainer/search_agent_trainer/run_config.schema.json). Strict: an unknown key is an error naming it.
 * Names follow veRL / Search-R1 where they have one.
 */

import type { RunStage } from '../protocol/dashboard';
import { S, type Static } from '../schema/schema';
import { ENGINES, engineIssues } from './engines';

const strict = { additional: false } as const;

export const SEARCH_R1_BASE_TEMPLATE =
  'Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new information. ' +
  'After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> and it will return the top searched results between <information> and </information>. ' +
  'You can search as many times as your want. If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. ' +
  'For example, <answer> Beijing </answer>. Question: {question}\n';

export const RunConfigSchema = S.object(
  {
    $schema: S.optional(S.string({ description: 'The JSON Schema of this file (editors use it).' })),
    name: S.optional(S.string({ description: 'A name for runs made from this config.' })),
    engine: S.optional(
      S.enum(
        ENGINES,
        'What trains (docs/engines.md): builtin, our single-process PyTorch trainer; trl, Hugging Face TRL’s GRPOTrainer through accelerate (multi-GPU, multi-node); verl, veRL on Ray. The run directory is the same for all three.',
        'builtin',
      ),
    ),
    devices: S.optional(
      S.integer({
        minimum: 1,
        default: 1,
        description:
          'Training processes, one per GPU (> 1: engine trl or verl). trl: accelerate launch --num_processes (trl.num_processes or trl.accelerate_config override it). verl: verl.gpus_per_node × verl.nodes (gpus_per_node defaults to devices ÷ nodes; given both, they must agree).',
      }),
    ),
    seed: S.optional(S.integer({ minimum: 0, default: 1, description: 'Seeds Python, torch and the data order.' })),
    output_dir: S.optional(
      S.string({
        description:
          'Where runs made from this config go (<output_dir>/<name>-<time>), relative to this file. Default: runs/ in the workspace folder (the CLI: the current directory).',
      }),
    ),
    data: S.object(
      {
        train: S.string({
          minLength: 1,
          description:
            'Training dataset: JSONL of {id, question, golden, data_source} (relative to this file), or builtin:demo/train (the demo task that ships with the extension).',
        }),
        eval: S.optional(S.string({ description: 'Held-out dataset, same format; or builtin:demo/eval.' })),
        eval_size: S.optional(
          S.integer({ minimum: 1, description: 'Evaluate on at most this many held-out examples (all by default).' }),
        ),
        hops_mix: S.optional(
          S.record(
            S.number({ minimum: 0 }),
            'Each training batch\'s share of questions by the searches they need (the dataset\'s meta.hops), e.g. {"1": 1, "2": 3}: a quarter one-hop, three quarters two-hop; a kind left out or at 0 is not trained on. Default: the data\'s own mix (batches drawn from one shuffled epoch).',
          ),
        ),
        prompt_template: S.optional(
          S.string({
            default: SEARCH_R1_BASE_TEMPLATE,
            description:
              'The user prompt; `{question}` is replaced. Default: Search-R1’s base template; with rollout.dialect toolcall, the same instructions written for the search tool (<tool_call>, <tool_response>).',
          }),
        ),
        chat_template: S.optional(S.boolean('Apply the tokenizer’s chat template when it has one.', true)),
      },
      { ...strict, description: 'Datasets and the prompt.' },
    ),
    model: S.object(
      {
        kind: S.enum(
          ['tiny', 'hf'] as const,
          'tiny: the built-in tiny causal transformer (CPU tests, the demo); hf: a Hugging Face causal LM from a local directory.',
          'tiny',
        ),
        path: S.optional(
          S.string({
            description: 'hf: the model directory (config.json, weights, tokenizer). Nothing is downloaded.',
          }),
        ),
        init: S.optional(
          S.string({
            description:
              'A checkpoint directory to start from (e.g. a warm start), instead of the model’s initial weights.',
          }),
        ),
        random_init: S.optional(
          S.boolean(
            'hf: build the model from model.path’s config.json with random weights (seeded) instead of loading weights; the directory needs config.json and the tokenizer only (tests, examples, benchmarks).',
            false,
          ),
        ),
        tiny: S.optional(
          S.object(
            {
              layers: S.optional(S.integer({ minimum: 1, default: 2 })),
              d_model: S.optional(S.integer({ minimum: 8, default: 128 })),
              heads: S.optional(S.integer({ minimum: 1, default: 4 })),
              max_len: S.optional(
                S.integer({
                  minimum: 16,
                  default: 2048,
                  description: 'Positions; at least the longest prompt plus rollout.max_response_length.',
                }),
              ),
              vocab: S.optional(
                S.array(S.string(), {
                  description:
                    'Extra texts whose words join the tiny tokenizer’s vocabulary (corpus files, datasets; builtin:demo/corpus).',
                }),
              ),
            },
            strict,
          ),
        ),
        lora: S.optional(
          S.object(
            {
              r: S.optional(S.integer({ minimum: 1, default: 8 })),
              alpha: S.optional(S.number({ minimum: 0, default: 16 })),
              dropout: S.optional(
                S.number({
                  minimum: 0,
                  maximum: 1,
                  default: 0,
                  description: 'LoRA dropout; above 0 it needs model.dropout: true.',
                }),
              ),
              target_modules: S.optional(S.array(S.string(), { description: 'Default: the attention projections.' })),
            },
            { ...strict, description: 'hf only, when peft is installed.' },
          ),
        ),
        dtype: S.optional(
          S.enum(
            ['auto', 'bf16', 'bf16_where_native', 'fastest', 'fp32'] as const,
            "Compute precision; the weights the optimizer updates are always fp32 (master weights). bf16: bf16 autocast (on CPU too, where a CPU without native bf16 is several times slower than fp32: the run warns); bf16_where_native: bf16 autocast where the device multiplies bf16 natively (a CUDA GPU with bf16; a CPU with AVX512-BF16, AMX or arm64 BF16), fp32 elsewhere; fastest (the demo's): on a CPU with native bf16 the builtin trainer times the run's own model in both at the start of the run and computes in bf16 unless it is more than 10% slower there, the first measurement kept for the machine (run.json `numerics` says what, why and the seconds; docs/trainer.md), fp32 on a CPU without native bf16 and where nothing measures (the other engines on CPU), bf16_where_native's rule on a GPU; auto: bf16 autocast on CUDA, fp32 on CPU. Under LoRA with bf16 compute, the frozen base is stored in bf16.",
            'auto',
          ),
        ),
        dropout: S.optional(
          S.boolean(
            'Keep the model’s and LoRA’s dropout in training. Off by default: with dropout the update’s log-probs differ from the sampler’s and an on-policy ratio is not 1.',
            false,
          ),
        ),
        gradient_checkpointing: S.optional(
          S.boolean(
            'hf: recompute each layer\'s activations in the backward pass instead of keeping them (less memory, about a third more compute; docs/trainer.md, "Memory on one GPU"). Unset: the engine’s own default (builtin: on; trl: TRL’s, on; verl: veRL’s, on); a memory plan may set it.',
          ),
        ),
        device: S.optional(S.enum(['auto', 'cpu', 'cuda'] as const, undefined, 'auto')),
      },
      { ...strict, description: 'The policy.' },
    ),
    retriever: S.optional(
      S.object(
        {
          kind: S.enum(
            ['demo', 'bm25', 'dense', 'remote', 'none'] as const,
            'demo: BM25 over the demo corpus; none: /retrieve returns nothing (the ablation).',
            'demo',
          ),
          corpus: S.optional(S.string()),
          index: S.optional(S.string()),
          model: S.optional(S.string({ description: 'dense: the E5 encoder directory.' })),
          url: S.optional(S.string({ description: 'remote: a Search-R1-compatible /retrieve URL.' })),
          topk: S.optional(S.integer({ minimum: 1, maximum: 100, default: 3 })),
        },
        {
          ...strict,
          description: 'The env server’s retriever (started by the host; the trainer only calls /retrieve).',
        },
      ),
    ),
    reward: S.optional(
      S.object(
        {
          module: S.optional(
            S.string({ default: 'builtin:em', description: 'A reward module or builtin:em|subem|f1|em-format.' }),
          ),
        },
        strict,
      ),
    ),
    rollout: S.optional(
      S.object(
        {
          batch_size: S.optional(S.integer({ minimum: 1, default: 8, description: 'Prompts per step.' })),
          n: S.optional(S.integer({ minimum: 1, default: 5, description: 'Samples per prompt (a GRPO group).' })),
          max_turns: S.optional(
            S.integer({
              minimum: 1,
              default: 4,
              description: 'Turns with actions; then one forced final turn (Search-R1).',
            }),
          ),
          max_turn_tokens: S.optional(S.integer({ minimum: 1, default: 128, description: 'New tokens per turn.' })),
          max_response_length: S.optional(
            S.integer({ minimum: 1, default: 1024, description: 'Tokens after the prompt, observations included.' }),
          ),
          max_obs_length: S.optional(
            S.integer({
              minimum: 1,
              default: 512,
              description: 'An observation longer than this is truncated (with a warning event).',
            }),
          ),
          max_prompt_length: S.optional(S.integer({ minimum: 1, default: 1024 })),
          temperature: S.optional(S.number({ minimum: 0, default: 1 })),
          top_p: S.optional(S.number({ minimum: 0, maximum: 1, default: 1 })),
          dialect: S.optional(
            S.enum(
              ['searchr1', 'toolcall'] as const,
              'How the model acts (docs/trajectory-format.md). searchr1: Search-R1’s <search>/<answer> tags and <information> observations; toolcall: the model’s own chat template with the search tool declared (hf models whose template supports tools), <tool_call> blocks (several per turn: parallel searches) answered in a tool turn of <tool_response> blocks, the answer in <answer>. The built-in tiny policy speaks searchr1 only.',
              'searchr1',
            ),
          ),
          strict_actions: S.optional(
            S.boolean(
              'searchr1: a turn acts with the first <search> or <answer> it opens, which must close before another opens; otherwise the turn is an invalid action (Search-R1’s message answers it) and an answer inside it does not count. Default false: Search-R1’s postprocess_predictions, the first complete <search>…</search> or <answer>…</answer> anywhere in the turn, so `<search> X <answer> Y </answer>` answers Y — a policy can learn to write that instead of a second search (docs/demo.md). The reward reads the answer the same way (/reward’s strict_actions).',
              false,
            ),
          ),
          search_tool: S.optional(
            S.string({
              minLength: 1,
              default: 'search',
              description:
                'toolcall: the search tool’s name (its one argument is the string `query`); the inspector’s --search-tool.',
            }),
          ),
          max_batch_tokens: S.optional(
            S.integer({
              minimum: 1,
              description:
                'A decode batch holds at most this many tokens of KV cache (rows × (the widest context + the turn budget), as the rows hold them); rows that do not fit are admitted as others finish. Default: 65,536 on CPU; on CUDA, half of what the GPU has free after loading the model, less AdamW’s moments, the bf16 weight copies generation caches and 15 % of the GPU, divided by the cache’s bytes per token (search-agent-studio plan shows it).',
            }),
          ),
          cuda_graphs: S.optional(
            S.boolean(
              'On CUDA, a decode batch keeps its KV cache in buffers as wide as its turns can grow and each decode step is replayed as one CUDA graph (trainer static_decode.py: one launch a token instead of hundreds; finished rows are not parked; new buffers and a new capture when continuous batching drops or admits rows). Hugging Face decoders with full attention under SDPA; other models, CPU, and false: the cache grows a column a step (the decode before stop 53). A step or capture that fails goes back to that, with a warning (cause static-decode-fallback).',
              true,
            ),
          ),
        },
        strict,
      ),
    ),
    algorithm: S.optional(
      S.object(
        {
          preset: S.optional(
            S.enum(
              ['search-r1-ppo', 'search-r1-grpo'] as const,
              'Search-R1’s training settings (train_ppo.sh / train_grpo.sh, docs/trainer.md “Presets”); keys set in this file win. search-r1-ppo: PPO, KL in the reward (k1, 0.001), GAE γ = λ = 1, critic lr 1e-5 with its own warm-up (1.5 %) and clip; search-r1-grpo: GRPO n = 5, KL loss (k3, 0.001). Both: lr 1e-6 warmed up over 28.5 % of the steps, entropy 0.001, clip 0.2, top_p 0.95, mini-batches of 256 sequences (GRPO: 10 optimizer steps a step), 512 prompts a step, 4 turns of 500 tokens, 500-token observations, responses cut at 4,096 tokens, prompts of at most 2,048.',
            ),
          ),
          name: S.optional(S.enum(['grpo', 'ppo', 'reinforce++'] as const, undefined, 'grpo')),
          norm_adv_by_std: S.optional(
            S.boolean('GRPO: divide by the group’s standard deviation (false: Dr. GRPO).', true),
          ),
          gamma: S.optional(S.number({ minimum: 0, maximum: 1, default: 1 })),
          lam: S.optional(S.number({ minimum: 0, maximum: 1, default: 1, description: 'GAE λ (PPO).' })),
          clip_ratio_low: S.optional(S.number({ minimum: 0, default: 0.2 })),
          clip_ratio_high: S.optional(
            S.number({ minimum: 0, default: 0.2, description: 'DAPO’s clip-higher uses 0.28.' }),
          ),
          clip_ratio_c: S.optional(
            S.number({
              minimum: 1,
              description:
                'Dual-clip PPO (Ye et al. 2020; veRL’s clip_ratio_c, 3 there by default): for Â < 0 the loss is at most c·|Â|. Off when absent. Must be > 1.',
            }),
          ),
          value_clip: S.optional(S.number({ minimum: 0, default: 0.5, description: 'PPO value clipping range.' })),
          vf_coef: S.optional(S.number({ minimum: 0, default: 0.5 })),
          kl_coef: S.optional(
            S.number({ minimum: 0, default: 0.001, description: 'β; 0 disables the reference model.' }),
          ),
          kl_estimator: S.optional(S.enum(['k1', 'k2', 'k3'] as const, 'k3 is veRL’s low_var_kl.', 'k3')),
          kl_in_reward: S.optional(
            S.boolean('Penalise KL in the reward (PPO-style) instead of as a loss term.', false),
          ),
          entropy_coef: S.optional(S.number({ minimum: 0, default: 0 })),
          loss_agg_mode: S.optional(
            S.enum(
              ['token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum', 'seq-mean-token-sum-norm'] as const,
              undefined,
              'token-mean',
            ),
          ),
          loss_masking: S.optional(
            S.boolean(
              'Mask prompt, retrieved and feedback tokens out of the loss (DESIGN §6). false: the ablation.',
              true,
            ),
          ),
          mask_advantages: S.optional(
            S.boolean(
              'Compute advantages/values only over generated tokens (veRL) instead of the whole response (Search-R1).',
              false,
            ),
          ),
          skip_zero_std_groups: S.optional(
            S.boolean(
              'GRPO: the groups whose rewards are all equal (advantage 0 on every token; reward/frac_zero_std_groups) skip the reference pass and the update, but for rollout.n of their sequences drawn at random, which carry the KL and entropy terms for all of them (weighted: an unbiased estimate). The policy-gradient term is exactly the whole batch’s. The skipped sequences’ records carry no trainer log-probs. Not DAPO’s dynamic sampling: nothing is resampled.',
              false,
            ),
          ),
          zero_std_keep: S.optional(
            S.number({
              minimum: 0,
              maximum: 1,
              default: 0,
              description:
                'With skip_zero_std_groups: the share of the sequences with advantage 0 kept for the KL and entropy terms (at least rollout.n of them), each weighted by how many it stands for. 0: rollout.n of them; 1: all of them (nothing is skipped). A larger share is a less noisy anchor and a dearer step.',
            }),
          ),
        },
        strict,
      ),
    ),
    optim: S.optional(
      S.object(
        {
          lr: S.optional(S.number({ minimum: 0, default: 1e-6 })),
          critic_lr: S.optional(S.number({ minimum: 0, description: 'PPO value head; default: 10 × lr.' })),
          warmup_steps: S.optional(S.integer({ minimum: 0, default: 0 })),
          critic_warmup_steps: S.optional(
            S.integer({ minimum: 0, description: 'PPO value head’s linear LR warm-up; default: warmup_steps.' }),
          ),
          lr_schedule: S.optional(
            S.enum(
              ['constant', 'cosine'] as const,
              'After the warm-up: constant, or a cosine down to min_lr_ratio × lr at the last step (veRL’s warmup_style).',
              'constant',
            ),
          ),
          min_lr_ratio: S.optional(
            S.number({
              minimum: 0,
              maximum: 1,
              default: 0,
              description: 'cosine: the final learning rate as a fraction of lr.',
            }),
          ),
          weight_decay: S.optional(S.number({ minimum: 0, default: 0 })),
          grad_clip: S.optional(
            S.number({
              minimum: 0,
              default: 1,
              description:
                'Gradient-norm clip, applied to the policy’s parameters and (PPO) to the value head’s separately.',
            }),
          ),
          ppo_epochs: S.optional(S.integer({ minimum: 1, default: 1 })),
          mini_batch_size: S.optional(
            S.integer({ minimum: 1, default: 64, description: 'Sequences per optimizer step.' }),
          ),
          micro_batch_size: S.optional(
            S.integer({
              minimum: 1,
              default: 8,
              description: 'Sequences per forward/backward (gradient accumulation).',
            }),
          ),
        },
        strict,
      ),
    ),
    train: S.optional(
      S.object(
        {
          steps: S.optional(
            S.integer({
              minimum: 0,
              default: 100,
              description: 'RL steps. With train.stages: their sum (leave it out, or give the same number).',
            }),
          ),
          stages: S.optional(
            S.array(
              S.object(
                {
                  steps: S.integer({ minimum: 1, description: "This stage's RL steps." }),
                  hops_mix: S.optional(S.union(S.record(S.number({ minimum: 0 })), S.null())),
                },
                {
                  ...strict,
                  description:
                    "A stage: its steps, and its batches' mix of one- and multi-hop questions (hops_mix, as data.hops_mix; null: the data's own mix; left out: data.hops_mix).",
                },
              ),
              {
                minItems: 1,
                description:
                  'A curriculum in one run (builtin engine). The stages run one after another; each after the first starts as a new run with model.init at the previous stage\'s last policy would: the KL reference becomes that policy, and the optimizer (AdamW state), the LR schedule (optim.warmup_steps, then the decay over the stage\'s steps), the batch sampler and the step-keyed seeds restart. Steps, metrics and checkpoints keep counting over the whole run; a stage\'s last step is always checkpointed. E.g. [{"steps": 200}, {"steps": 320, "hops_mix": {"1": 1, "2": 3}}].',
              },
            ),
          ),
          eval_every: S.optional(
            S.integer({ minimum: 0, default: 10, description: '0: only before the first update and at the end.' }),
          ),
          checkpoint_every: S.optional(S.integer({ minimum: 0, default: 10 })),
          checkpoint_keep: S.optional(
            S.integer({
              minimum: 1,
              description:
                "builtin: keep only the last this many checkpoints (older ones are deleted as new ones are written; step-000000 — the warm start — and each curriculum stage's last step are always kept: a resume needs them). Default: all of them for the tiny policy, 3 for a Hugging Face model (a 3B full fine-tune's checkpoint is ~37 GB). A finished run with a Hugging Face model also writes model/ (Hugging Face format; LoRA merged into the base, the adapter in model/adapter/), which transformers and vLLM load.",
            }),
          ),
          save_rollouts: S.optional(
            S.boolean(
              'Record training rollouts (train.record says which and how); false: only held-out evaluations are recorded.',
              true,
            ),
          ),
          record: S.optional(
            S.object(
              {
                format: S.optional(
                  S.enum(
                    ['store', 'jsonl'] as const,
                    'How rollouts are recorded: the token store (Parquet columns, rollouts/step-NNNNNN/: ~8 bytes a token, written off the training step) or v2 JSONL (rollouts/step-NNNNNN.jsonl: ~60-80 bytes a token, every number as text). Both are read by every view; `search-agent-studio export jsonl` converts a store.',
                    'store',
                  ),
                ),
                every: S.optional(
                  S.integer({
                    minimum: 1,
                    default: 1,
                    description:
                      'Record the sampled groups of every k-th step (steps divisible by k). Flagged rollouts and held-out evaluations are recorded on every step.',
                  }),
                ),
                groups: S.optional(
                  S.describe(
                    S.union(S.integer({ minimum: 0 }), S.null()),
                    'Whole GRPO groups a recorded step keeps, drawn by the step (never part of a group); null: all of them. The groups of flagged rollouts are always kept.',
                  ),
                ),
                queue: S.optional(
                  S.integer({
                    minimum: 1,
                    default: 2,
                    description:
                      'Steps the background writer may hold; when it is this far behind, a step records only its flagged groups and says so (a warning, record/dropped_rollouts, run.json record.dropped).',
                  }),
                ),
              },
              {
                ...strict,
                description:
                  "What of each step's rollouts is recorded, and how (docs/trainer.md#recording-rollouts). Metrics always cover every rollout; run.json's `record` says what was recorded. Always recorded: held-out evaluations, and the rollouts an in-run check flags (a leak: loss mask against role; a non-finite number; a trained token whose log-prob ratio lies outside [0.5, 2]), with their whole groups.",
              },
            ),
          ),
          supervised_warmup: S.optional(
            S.object(
              {
                steps: S.optional(S.integer({ minimum: 0, default: 0 })),
                lr: S.optional(S.number({ minimum: 0, default: 1e-3 })),
                batch_size: S.optional(S.integer({ minimum: 1, default: 16 })),
                second_query: S.optional(
                  S.enum(
                    ['any_name', 'new_name'] as const,
                    "The second search of a two-search synthetic trajectory: a random name of the first search's results (any_name), or one sharing no word with the first query (new_name: what a second hop looks like; still uniformly random, so the second-hop entity only by chance).",
                    'any_name',
                  ),
                ),
                two_searches: S.optional(
                  S.number({
                    minimum: 0,
                    maximum: 1,
                    default: 0.5,
                    description: 'The share of synthetic trajectories that search twice (the others search once).',
                  }),
                ),
                answer_from: S.optional(
                  S.enum(
                    ['last', 'any'] as const,
                    "Where a synthetic trajectory's random answer is copied from: a name of the last search's results (last), or of any search's results (any: so a second search does not move where the answer is read).",
                    'last',
                  ),
                ),
              },
              {
                ...strict,
                description:
                  'A short supervised phase on format only (random queries and answers) before RL, so a tiny model can emit the tags.',
              },
            ),
          ),
        },
        strict,
      ),
    ),
    trl: S.optional(
      S.object(
        {
          num_processes: S.optional(
            S.integer({
              minimum: 1,
              description:
                'Processes accelerate launches (one per GPU; on CPU, gloo). Default: devices, or the accelerate config’s.',
            }),
          ),
          accelerate_config: S.optional(
            S.string({
              description:
                'An accelerate config file (`accelerate config`) for multi-GPU, DeepSpeed/FSDP or multi-node launches (relative to this file); docs/engines.md has a two-node example.',
            }),
          ),
          use_vllm: S.optional(
            S.boolean(
              'Generate the rollout’s turns with TRL’s colocated vLLM (weights synced every step); its sampling log-probs become the records’ rollout_logprob. Needs a GPU and vllm.',
              false,
            ),
          ),
          vllm_mode: S.optional(
            S.enum(
              ['colocate', 'server'] as const,
              'colocate only: every process calls its own vLLM once per turn (server mode would need the same number of calls on every process).',
              'colocate',
            ),
          ),
          vllm_gpu_memory_utilization: S.optional(
            S.number({
              minimum: 0,
              maximum: 1,
              description: 'The GPU memory share of the colocated vLLM (TRL’s default 0.3).',
            }),
          ),
        },
        {
          additional: true,
          description:
            'engine "trl": options of TRL’s GRPOConfig that no shared key sets, passed through and checked against the installed TRL (an unknown name, or one a shared key sets, is an error naming it), plus the launch (num_processes, accelerate_config).',
        },
      ),
    ),
    verl: S.optional(
      S.object(
        {
          python: S.optional(
            S.string({
              description:
                'veRL’s Python (its own environment: scripts/setup-verl.sh makes .venv-verl), relative to this file. Default: the setting searchAgent.verlPythonPath, then .venv-verl.',
            }),
          ),
          rollout: S.optional(
            S.enum(
              ['vllm', 'sglang'] as const,
              'The inference engine of the rollouts (actor_rollout_ref.rollout.name).',
              'vllm',
            ),
          ),
          tensor_parallel: S.optional(
            S.integer({
              minimum: 1,
              default: 1,
              description: 'GPUs per vLLM/SGLang replica (rollout.tensor_model_parallel_size); divides gpus_per_node.',
            }),
          ),
          gpu_memory_utilization: S.optional(
            S.number({
              minimum: 0,
              maximum: 1,
              default: 0.5,
              description: 'The rollout engine’s share of GPU memory (colocated with FSDP).',
            }),
          ),
          gpus_per_node: S.optional(
            S.integer({
              minimum: 1,
              description:
                "trainer.n_gpus_per_node. Default: devices ÷ nodes (devices, the shared key, is veRL's world size).",
            }),
          ),
          nodes: S.optional(
            S.integer({
              minimum: 1,
              default: 1,
              description: 'trainer.nnodes (a Ray cluster: RAY_ADDRESS, docs/engines.md).',
            }),
          ),
          strategy: S.optional(
            S.enum(['fsdp', 'fsdp2'] as const, 'veRL’s FSDP version for actor, reference and critic.', 'fsdp'),
          ),
          param_offload: S.optional(
            S.boolean(
              'FSDP parameter offload to CPU (actor, reference, critic). Unset: veRL’s default (off); a memory plan may set it.',
            ),
          ),
          optimizer_offload: S.optional(
            S.boolean(
              'FSDP optimizer-state offload to CPU (actor, critic). Unset: veRL’s default (off); a memory plan may set it.',
            ),
          ),
          attention: S.optional(
            S.enum(
              ['auto', 'flash_attention_2', 'sdpa'] as const,
              'Attention of veRL’s FSDP models (actor, reference, critic; model.override_config.attn_implementation): auto is flash_attention_2 when flash-attn imports in veRL’s Python, else PyTorch’s SDPA (veRL’s own default, flash_attention_2, fails to start without flash-attn). run.json says which (verl.attention).',
              'auto',
            ),
          ),
          agent_workers: S.optional(
            S.integer({
              minimum: 1,
              default: 8,
              description: 'veRL’s agent-loop workers (Ray actors running the trajectories).',
            }),
          ),
          reward_workers: S.optional(
            S.integer({ minimum: 1, default: 8, description: 'veRL’s reward-loop workers (calling our /reward).' }),
          ),
          overrides: S.optional(
            S.array(S.string(), {
              description:
                'Raw Hydra overrides of veRL’s ppo_trainer config, applied last (checked by veRL’s config like ours), e.g. "actor_rollout_ref.rollout.max_num_batched_tokens=8192".',
            }),
          ),
        },
        {
          ...strict,
          description:
            'engine "verl": what veRL 0.9.1 needs that the shared keys do not say (docs/engines.md has the whole mapping).',
        },
      ),
    ),
    test: S.optional(
      S.object(
        {
          crash_at_step: S.optional(
            S.integer({ minimum: 0, description: 'Raise an error at this step (tests of crash handling).' }),
          ),
          crash_rank: S.optional(
            S.integer({
              minimum: 0,
              description:
                'With crash_at_step, engine "trl" on several processes: only the process of this rank raises (tests of one process failing while the others wait in a collective); every process when not set.',
            }),
          ),
          step_delay_s: S.optional(
            S.number({ minimum: 0, description: 'Sleep this long each step (tests of cancellation).' }),
          ),
          device_memory_rows: S.optional(
            S.integer({
              minimum: 1,
              description:
                'A stand-in for a GPU’s memory limit (tests of running out of memory): the policy’s forward raises torch.OutOfMemoryError on a batch of more than this many sequences, from the first RL step on.',
            }),
          ),
          update_memory_rows: S.optional(
            S.integer({
              minimum: 1,
              description:
                'The same stand-in for the update alone (forwards that keep gradients): the GPU check runs the update’s recovery on a GPU with it, the rollout and log-prob passes as they are.',
            }),
          ),
          disk_full: S.optional(
            S.object(
              {
                at: S.string({
                  minLength: 1,
                  description:
                    'The disk fills while a file whose path contains this is written (e.g. `checkpoints/step-000002`, `events.jsonl`).',
                }),
                after_bytes: S.integer({ minimum: 0, description: 'How many bytes of those writes fit first.' }),
              },
              {
                ...strict,
                description:
                  'Simulate a full disk (tests of ENOSPC handling): from then on every write that needs a new block fails, as on a real file system.',
              },
            ),
          ),
        },
        { ...strict, description: 'For tests only.' },
      ),
    ),
  },
  {
    ...strict,
    description: 'A Search Agent Studio run config (*.run.json).',
    refine: (v) => [...engineIssues(v), ...stageIssues(v)],
  },
);
export type RunConfig = Static<typeof RunConfigSchema>;

/** The stages of a run config (run.json's `config`, or a *.run.json); [] without train.stages. A stage without its
 * own hops_mix takes data.hops_mix (as the trainer's curriculum.py). */
export function runStages(config: unknown): RunStage[] {
  const c = config as { data?: { hops_mix?: unknown }; train?: { stages?: unknown } } | null | undefined;
  if (!c || !Array.isArray(c.train?.stages)) return [];
  const mixOf = (v: unknown) => (v && typeof v === 'object' ? (v as Record<string, number>) : null);
  let start = 0;
  const out: RunStage[] = [];
  for (const s of c.train.stages as { steps?: unknown; hops_mix?: unknown }[]) {
    const steps = typeof s?.steps === 'number' ? s.steps : 0;
    out.push({ start, steps, hopsMix: mixOf(s && 'hops_mix' in s ? s.hops_mix : c.data?.hops_mix) });
    start += steps;
  }
  return out;
}

/** train.steps, when given beside train.stages, must be their sum (the trainer checks the same). */
function stageIssues(config: unknown): { path: string; message: string }[] {
  const train = (config as { train?: { steps?: unknown; stages?: unknown } } | null)?.train;
  if (!train || !Array.isArray(train.stages) || typeof train.steps !== 'number') return [];
  const sum = train.stages.reduce(
    (a: number, s: { steps?: unknown }) => a + (typeof s?.steps === 'number' ? s.steps : 0),
    0,
  );
  return train.steps === sum
    ? []
    : [
        {
          path: 'train.steps',
          message: `${train.steps} is not the sum of train.stages' steps (${sum}): leave train.steps out, or make it ${sum}`,
        },
      ];
}
