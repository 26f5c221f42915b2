/**
 * The memory planner of engines trl and verl (src/core/plan/trl.ts, verl.ts): the settings it plans from are the
 * trainer's own — for every example config of those engines and variants of them, the planner's inputs equal what the
 * trainer package's `overrides.memory_inputs(cfg)` (veRL) and `options.memory_inputs(cfg, world, bf16)` (TRL) say,
 * run in the real Python (one source of truth for veRL's and TRL's effective defaults: VERL_OWN, GRPOConfig's) —, the
 * offload the plan chooses for veRL and how `train` applies it, and the verdicts the docs quote.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { execa } from 'execa';
import { checkRunConfig, loadRunConfig } from '../../src/core/host/runConfig';
import { checkRunHostMemory } from '../../src/core/host/runHost';
import { plannedConfig } from '../../src/core/host/verl';
import { computesInBf16 } from '../../src/core/plan/builtin';
import { checkRunMemory, MemoryPlanError } from '../../src/core/plan/check';
import { planRun } from '../../src/core/plan/plan';
import { trlMemoryInputs, trlProcesses } from '../../src/core/plan/trl';
import { verlMemoryInputs } from '../../src/core/plan/verl';
import { resolveRunConfig } from '../../src/core/run/presets';
import { scratchDir } from '../support/scratch';

const ROOT = join(__dirname, '..', '..');
const PYTHON = join(ROOT, '.venv', 'bin', 'python');
const SHAPES = join(ROOT, 'examples', 'one-gpu', 'models');
const GiB = 2 ** 30;

type Obj = Record<string, any>;

/** Every example run config of engine trl or verl: [file, config]. */
function engineExamples(): [string, Obj][] {
  const out: [string, Obj][] = [];
  for (const dir of [join(ROOT, 'examples'), join(ROOT, 'examples', 'one-gpu')]) {
    for (const f of readdirSync(dir).filter((x) => x.endsWith('.run.json'))) {
      const config = JSON.parse(readFileSync(join(dir, f), 'utf8'));
      if (config.engine === 'trl' || config.engine === 'verl') out.push([join(dir, f), config]);
    }
  }
  return out;
}

const withKeys = (config: Obj, keys: Obj): Obj => {
  const c = structuredClone(config);
  for (const [dotted, v] of Object.entries(keys)) {
    const [s, k] = dotted.split('.') as [string, string | undefined];
    if (k === undefined) {
      if (v === undefined) delete c[s];
      else c[s] = v;
    } else if (v === undefined) delete c[s]?.[k];
    else c[s] = { ...(c[s] ?? {}), [k]: v };
  }
  return c;
};

/** The examples and variants that change what decides memory. */
function cases(): { name: string; config: Obj; base: string }[] {
  const out: { name: string; config: Obj; base: string }[] = [];
  for (const [file, config] of engineExamples()) {
    const base = dirname(file);
    const name = file.slice(ROOT.length + 1);
    out.push({ name, config, base });
    if (config.engine === 'verl') {
      out.push({
        name: `${name} ppo`,
        config: withKeys(config, { 'algorithm.preset': 'search-r1-ppo', 'optim.mini_batch_size': 512 }),
        base,
      });
      out.push({
        name: `${name} lora, offload set, checkpointing off`,
        config: withKeys(config, {
          'model.lora': { r: 16, alpha: 32 },
          'verl.param_offload': true,
          'verl.optimizer_offload': false,
          'model.gradient_checkpointing': false,
        }),
        base,
      });
      out.push({
        name: `${name} kl 0, sdpa, tp 2, 2 × 8 GPUs`,
        config: withKeys(config, {
          'algorithm.kl_coef': 0,
          'verl.attention': 'sdpa',
          'verl.tensor_parallel': 2,
          'verl.nodes': 2,
          'verl.gpus_per_node': 8,
          devices: undefined,
          'optim.micro_batch_size': 3,
        }),
        base,
      });
      out.push({
        name: `${name} devices 16 over 2 nodes`,
        config: { ...withKeys(config, { 'verl.nodes': 2, 'verl.gpus_per_node': undefined }), devices: 16 },
        base,
      });
      out.push({ name: `${name} no verl section`, config: (({ verl: _v, ...rest }) => rest)(config), base });
    } else {
      out.push({
        name: `${name} our generator, max_batch_tokens, 2 processes`,
        config: withKeys(config, {
          'trl.use_vllm': false,
          'rollout.max_batch_tokens': 200000,
          'trl.num_processes': 2,
          'trl.accelerate_config': undefined,
        }),
        base,
      });
      out.push({
        name: `${name} vLLM defaults, lora`,
        config: withKeys(config, {
          'trl.vllm_gpu_memory_utilization': undefined,
          'trl.vllm_enable_sleep_mode': undefined,
          'model.lora': { r: 8 },
        }),
        base,
      });
      out.push({
        name: `${name} model_init_kwargs, fp32, checkpointing off`,
        config: withKeys(config, {
          'trl.model_init_kwargs': { dtype: 'bfloat16' },
          'model.dtype': 'fp32',
          'model.gradient_checkpointing': false,
        }),
        base,
      });
      out.push({
        name: `${name} model_init_kwargs without dtype`,
        config: withKeys(config, { 'trl.model_init_kwargs': { attn_implementation: 'sdpa' } }),
        base,
      });
    }
  }
  return out;
}

const PY = `
import json, sys
from pathlib import Path
from search_agent_trainer.config import config_from_dict
from search_agent_trainer.engines.verl.overrides import memory_inputs as verl_inputs
from search_agent_trainer.engines.trl import options
out = []
for item in json.load(sys.stdin):
    cfg = config_from_dict(item["config"], base=Path(item["base"]))
    if item["config"].get("engine") == "verl":
        out.append(verl_inputs(cfg, flash_attn=item.get("flash_attn")))
    else:
        out.append(options.memory_inputs(cfg, options.processes(cfg), bf16=item["bf16"]))
print(json.dumps(out))
`;

/** A one-GPU example as loaded by `plan`, its model.path the shape's config.json directory. */
function loadedExample(file: string, keys: Obj = {}): { config: any; base: string; file: string } {
  const config = withKeys(JSON.parse(readFileSync(file, 'utf8')), {
    'model.path': join(SHAPES, 'qwen2.5-3b'),
    ...keys,
  });
  return checkRunConfig(config, file, dirname(file), { files: false });
}

describe('memory plan: engines trl and verl', function () {
  this.timeout(120_000);

  // Qwen2.5-3B by hand from its config.json (hidden 2,048, 36 layers, 16 heads and 2 KV heads of 128, MLP 11,008,
  // vocabulary 151,936, q/k/v biases, tied embeddings): per layer q 2,048² + 2,048, k and v 2,048 × 256 + 256 each,
  // o 2,048², the MLP 3 × 2,048 × 11,008, two norms of 2,048; the embedding once; the final norm.
  const LAYER = 2048 * 2048 + 2048 + 2 * (2048 * 256 + 256) + 2048 * 2048 + 3 * 2048 * 11008;
  const P = 36 * (LAYER + 2 * 2048) + 151936 * 2048 + 2048;

  it("Qwen2.5-3B's parts against hand computation: TRL's and veRL's one-GPU recipes, part by part and phase by phase", () => {
    assert.equal(P, 3_085_938_688); // the model card's 3.09 B
    const trl = planRun(loadedExample(join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-trl.run.json')));
    assert.equal(trl.model.parameters, P);
    const t = trl.devices[0]!.parts;
    // fp32 master weights, fp32 gradients, AdamW's two fp32 moments, the reference in bf16
    assert.deepEqual([t.weights, t.gradients, t.optimizer, t.reference], [4 * P, 4 * P, 8 * P, 2 * P]);
    // vLLM's share: 0.2 of 80 GiB; checkpointed activations: micro-batch 4 × (2,048 + 4,096) tokens × a bf16 hidden state × 36 layers
    assert.equal(t.vllm, Math.floor(0.2 * 80 * GiB));
    assert.equal(t.activations, 4 * 6144 * 2048 * 2 * 36);
    // autocast's cache through the update's forward: a bf16 copy of every layer's projections
    assert.equal(t.weight_casts_update, 2 * 36 * LAYER);
    // under LoRA the reference is TRL's "ref" adapter: a frozen fp32 copy of the starting adapter (rank 16 on q, k, v, o)
    const lora = planRun(
      loadedExample(join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-trl.run.json'), {
        'model.lora': { r: 16, alpha: 32 },
      }),
    ).devices[0]!.parts;
    const adapter = 36 * 16 * (2048 + 2048 + 2 * (2048 + 256) + (2048 + 2048));
    assert.deepEqual(
      [lora.weights, lora.reference, lora.gradients, lora.optimizer],
      [2 * P + 4 * adapter, 4 * adapter, 4 * adapter, 8 * adapter],
    );
    // sleep mode: the rollout holds vLLM's share beside the weights, moments and reference; the update does not
    const tp = trl.devices[0]!.phases;
    assert.equal(tp.rollout, 4 * P + 8 * P + 2 * P + Math.floor(0.2 * 80 * GiB));
    assert.equal(
      tp.update,
      4 * P +
        4 * P +
        8 * P +
        2 * P +
        t.activations! +
        t.backward_peak! +
        t.generation_batch! +
        t.vllm_asleep! +
        t.attention_mask!,
    );
    // SDPA's mask over TRL's padded micro-batch: 4 × 6,144² booleans
    assert.equal(t.attention_mask, 4 * 6144 ** 2);

    const verl = planRun(loadedExample(join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-verl.run.json')));
    const v = verl.devices[0]!.parts;
    assert.deepEqual([v.weights, v.gradients, v.optimizer], [4 * P, 4 * P, 8 * P]); // FSDP over one GPU shards nothing
    assert.equal(v.rollout_engine, Math.floor(0.6 * 80 * GiB));
    const N = 2 * 6144; // micro-batch 2 packed
    assert.equal(v.activations, N * 2048 * 2 * 36);
    // the logits in bf16: themselves, the entropy's softmax and product (entropy_coef 0.001), the log-softmax rows
    // without flash-attn, their gradient (temperature 1: no scaled copy); the final norm's 14 B × hidden a token
    // and, held from the head's backward until FSDP reduces the root unit's flat gradient at the pass's end, the
    // output layer's bf16 gradient and the root's bf16 parameters cast again (tied: the root is the embedding alone;
    // the bound of what torch's FSDP1 held on CPU, stop 67)
    const VH = 151936 * 2048;
    assert.equal(v.backward_peak, N * 151936 * 2 * 5 + N * 14 * 2048 + 2 * (VH + VH));
    assert.match(verl.devices[0]!.what.backward_peak!, /held through the backward \(1\.16 GiB/);
    // under LoRA both layers are frozen: nothing held
    const loraPeak = planRun(
      loadedExample(join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-verl.run.json'), {
        'model.lora': { r: 16, alpha: 32 },
      }),
    ).devices[0]!.parts.backward_peak!;
    assert.equal(loraPeak, N * 151936 * 2 * 5 + N * 14 * 2048);
    // a micro-batch short enough that the pass's end is the peak: the embedding's gradient (2 V·H) and 8 B for each
    // of the root unit's parameters (its flat gradient in bf16, its fp32 cast and the sum of a tied weight's two
    // gradients: 8 B bounds what torch's FSDP1 held there, tied and untied), less the checkpoints freed by then
    const short = planRun(
      loadedExample(join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-verl.run.json'), {
        'optim.micro_batch_size': 1,
        'rollout.max_prompt_length': 64,
        'rollout.max_response_length': 64,
      }),
    ).devices[0]!;
    const end = 2 * VH + 8 * VH - 128 * 2048 * 2 * 36;
    assert.equal(short.parts.backward_peak, end);
    assert.match(
      short.what.backward_peak!,
      /the pass's end: the embedding's gradient, the root unit's flat gradient and its fp32 cast/,
    );
    assert.equal(v.attention_mask, N * N);
    // SDPA converts that mask to a bf16 copy at each attention call, which the layer's backward keeps: one layer's
    // (in the recomputed layer's peak) with checkpointing, every layer's without
    const ex = join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-verl.run.json');
    const noCkpt = planRun(loadedExample(ex, { 'model.gradient_checkpointing': false })).devices[0]!.parts;
    assert.equal(noCkpt.attention_mask, N * N + 36 * 2 * N * N);
    assert.match(
      verl.devices[0]!.what.backward_peak!,
      /one layer recomputed with its gradients and SDPA's bf16 copy of the mask/,
    );
    // the KV cache left in vLLM's share: less its bf16 weights and overhead, 36,864 B a token (36 layers × K and V × 2 heads × 128 × 2 B)
    assert.match(verl.devices[0]!.what.rollout_engine!, /bf16 weights 5\.75 GiB/);
    // optimizer offload (chosen): the moments are on the CPU in the rollout and on the GPU in the update
    const vp = verl.devices[0]!.phases;
    assert.equal(vp.rollout, 4 * P + Math.floor(0.6 * 80 * GiB));
    assert.equal(vp.update, 16 * P + v.fsdp_gathered! + v.activations! + v.backward_peak! + N * N + GiB);
    assert.equal(v.fsdp_gathered, 2 * (151936 * 2048 + 2 * LAYER));
    assert.deepEqual(verl.cpu!.parts, { optimizer: 8 * P, reference: 2 * P });
    // on 8 GPUs every state is an eighth (the 8-GPU example, micro-batch 4)
    const eight = planRun(loadedExample(join(ROOT, 'examples', 'qwen2.5-3b-grpo-verl.run.json'))).devices[0]!.parts;
    assert.deepEqual([eight.weights, eight.gradients, eight.optimizer], [(4 * P) / 8, (4 * P) / 8, (8 * P) / 8]);
  });

  it("TRL's DeepSpeed ZeRO from the accelerate config (or the DeepSpeed JSON it names): the states as ZeRO stores them, offload on the CPU", () => {
    // the 8-GPU example: ZeRO-3 (examples/accelerate/zero3-8gpu.yaml): bf16 weights and gradients and 12 B of fp32 master
    // weights and moments a parameter, every one ÷ 8
    const file = join(ROOT, 'examples', 'qwen2.5-3b-trl.run.json');
    const z3 = planRun(loadedExample(file));
    const d = z3.devices[0]!;
    assert.equal(d.count, 8);
    assert.deepEqual(
      [d.parts.weights, d.parts.gradients, d.parts.optimizer, d.parts.reference],
      [(2 * P) / 8, (2 * P) / 8, (12 * P) / 8, (2 * P) / 8].map(Math.round),
    );
    assert.match(z3.summary, /8 processes \(ZeRO-3\)/);
    // an accelerate config naming a DeepSpeed JSON: ZeRO-2 with the optimizer offloaded
    const dir = scratchDir('sas-plan-ds-');
    writeFileSync(
      join(dir, 'ds.json'),
      JSON.stringify({ zero_optimization: { stage: 2, offload_optimizer: { device: 'cpu' } } }),
    );
    writeFileSync(
      join(dir, 'acc.yaml'),
      'distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n  zero3_init_flag: false\nnum_processes: 8\n',
    );
    const z2 = planRun(loadedExample(file, { 'trl.accelerate_config': join(dir, 'acc.yaml') }));
    const e = z2.devices[0]!.parts;
    assert.deepEqual([e.weights, e.gradients, e.optimizer], [2 * P, Math.round((2 * P) / 8), undefined]);
    assert.equal(z2.cpu!.parts.optimizer, 12 * P);
    // a DeepSpeed JSON that cannot be read: not planned (as an unsharded guess would be no plan), naming both files
    writeFileSync(
      join(dir, 'acc.yaml'),
      'distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: missing.json\n',
    );
    assert.throws(
      () => planRun(loadedExample(file, { 'trl.accelerate_config': join(dir, 'acc.yaml') })),
      /acc\.yaml: deepspeed_config\.deepspeed_config_file: .*missing\.json: no such file/,
    );
  });

  it('a config that does not fit is refused naming the largest parts and the knob that makes it fit (TRL without sleep mode; veRL micro-batches of 8)', () => {
    const trlFile = join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-trl.run.json');
    const awake = checkRunMemory(
      loadedExample(trlFile, { 'trl.vllm_enable_sleep_mode': false, 'trl.vllm_gpu_memory_utilization': 0.3 }),
    );
    assert.equal(awake.plan!.fits, false);
    assert.match(
      awake.line,
      // the update's backward, since the tied output layer's fp32 gradient held through it is counted (stop 65), over
      // the forward's end by ~0.35 GiB
      /^memory: does not fit one GPU of 80\.0 GiB: .* largest in the update phase: vllm 24\.0 GiB, optimizer 23\.0 GiB/,
    );
    assert.match(awake.line, /would fit: trl\.vllm_enable_sleep_mode: true/);
    const verlFile = join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-verl.run.json');
    const big = checkRunMemory(loadedExample(verlFile, { 'optim.micro_batch_size': 8 }));
    assert.equal(big.plan!.fits, false);
    assert.match(big.line, /largest in the update phase: backward_peak \d+\.\d GiB/);
    assert.match(big.line, /would fit: optim\.micro_batch_size: [12] /);
    // the same run fits where the knob says, re-planned
    assert.equal(checkRunMemory(loadedExample(trlFile, { 'trl.vllm_gpu_memory_utilization': 0.3 })).plan!.fits, true);
  });

  it("plans from the trainer's own settings: the TS inputs equal overrides.memory_inputs / options.memory_inputs for every trl and verl example and variants", async function () {
    if (!existsSync(PYTHON)) this.skip(); // the trainer's .venv (setup.sh)
    const all = cases();
    assert.ok(all.length >= 12, `${all.length} cases`);
    const items = all.map(({ config, base }) => {
      const c = resolveRunConfig(config as any);
      return {
        config,
        base,
        bf16: computesInBf16(c, 'cuda'),
        flash_attn: config.verl?.attention === 'flash_attention_2' ? '2.8.3' : null,
      };
    });
    const r = await execa(PYTHON, ['-c', PY], {
      input: JSON.stringify(items),
      env: { PYTHONPATH: join(ROOT, 'trainer') },
      reject: false,
    });
    assert.equal(r.exitCode, 0, r.stderr);
    const python: Obj[] = JSON.parse(r.stdout);
    all.forEach(({ name, config, base }, i) => {
      const c = resolveRunConfig(config as any);
      const ts =
        c.engine === 'verl'
          ? verlMemoryInputs(c, items[i]!.flash_attn)
          : trlMemoryInputs(c, trlProcesses(c), items[i]!.bf16, base);
      assert.deepEqual(ts, python[i], name);
    });
    // the variants reach what they vary (the comparison is not of defaults only)
    const seen = (k: string) => new Set(python.map((x) => JSON.stringify(x[k])));
    for (const k of [
      'param_offload',
      'gradient_checkpointing',
      'critic_model',
      'reference_model',
      'reference_adapter',
      'generation',
      'vllm_sleep_mode',
      'reference_dtype',
      'world_size',
      'processes',
      'attention',
    ])
      assert.ok(seen(k).size >= 2, `${k}: ${[...seen(k)]}`);
  });

  it('veRL on one 80 GiB GPU: the plan chooses optimizer offload (none on an H200), never what the config sets, and says so', () => {
    const file = join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-verl.run.json');
    const plan = planRun(loadedExample(file));
    assert.equal(plan.fits, true, plan.suggestions.join('\n'));
    assert.deepEqual(
      plan.chosen.map((x) => [x.key, x.value]),
      [['verl.optimizer_offload', true]],
    );
    assert.match(plan.chosen[0]!.why, /with offload none: more than 76\.00 GiB usable/);
    const [d] = plan.devices;
    // the rollout holds vLLM's share and the weights; the moments are on the CPU then, and back for the update
    assert.equal(d!.phases.rollout, d!.parts.rollout_engine! + d!.parts.weights!);
    assert.ok(d!.phases.update! > d!.parts.weights! + d!.parts.gradients! + d!.parts.optimizer!);
    assert.equal(plan.cpu!.parts.optimizer, d!.parts.optimizer);
    assert.equal(plan.cpu!.parts.reference, 2 * plan.model.parameters); // bf16, on the CPU always
    // an H200: no offload needed
    assert.deepEqual(planRun(loadedExample(file), { gpuMemoryBytes: 141 * GiB }).chosen, []);
    // the config's own offload stands: with optimizer_offload false the plan offloads the parameters instead
    const keep = planRun(loadedExample(file, { 'verl.optimizer_offload': false }));
    assert.equal(keep.fits, true);
    assert.deepEqual(
      keep.chosen.map((x) => [x.key, x.value]),
      [['verl.param_offload', true]],
    );
    assert.equal(keep.cpu!.parts.weights, keep.devices[0]!.parts.weights);
    // both set false: it does not fit, the plan changes neither, and says which to leave to it
    const off = planRun(loadedExample(file, { 'verl.optimizer_offload': false, 'verl.param_offload': false }));
    assert.equal(off.fits, false);
    assert.deepEqual(off.chosen, []);
    assert.ok(
      off.suggestions.some(
        (s) =>
          s.startsWith('verl.optimizer_offload left out (the plan chooses the offload then)') &&
          /the plan then sets verl\.optimizer_offload: true/.test(s),
      ),
      off.suggestions.join('\n'),
    );
    // param offload asked for: the optimizer is still the plan's to choose
    const po = planRun(loadedExample(file, { 'verl.param_offload': true }));
    assert.equal(po.fits, true);
    assert.deepEqual(po.chosen, []);
    assert.match(po.notes.join('\n'), /offload: none needed|offload chosen by the plan: parameters/);
  });

  it('veRL: a micro-batch whose logits do not fit is refused with a smaller one, re-planned; vLLM without room for one sequence cannot start', () => {
    const file = join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-verl.run.json');
    const big = planRun(loadedExample(file, { 'optim.micro_batch_size': 8 }));
    assert.equal(big.fits, false);
    assert.ok(big.devices[0]!.parts.backward_peak! > 30 * GiB, 'the logits of 8 × 6,144 tokens');
    const m = /^optim\.micro_batch_size: (\d+)/.exec(big.suggestions[0]!);
    assert.ok(m, big.suggestions.join('\n'));
    assert.equal(planRun(loadedExample(file, { 'optim.micro_batch_size': Number(m[1]) })).fits, true);
    const tiny = planRun(loadedExample(file, { 'verl.gpu_memory_utilization': 0.08 }));
    assert.equal(tiny.fits, false);
    assert.match(tiny.problems.join(' '), /fewer than one sequence of max_model_len 32,768/);
    assert.ok(
      tiny.suggestions.some((s) => /^verl\.gpu_memory_utilization: 0\.\d+ \(a larger share/.test(s)),
      tiny.suggestions.join('\n'),
    );
  });

  it('the 8-GPU and two-node veRL examples: each GPU holds a shard; the verdicts docs/engines.md quotes', () => {
    const file = join(ROOT, 'examples', 'qwen2.5-3b-grpo-verl.run.json');
    const eight = planRun(loadedExample(file));
    assert.equal(eight.fits, true);
    assert.equal(eight.devices[0]!.count, 8);
    assert.deepEqual(eight.chosen, []); // no offload needed on 8 × 80 GiB
    const two = planRun(loadedExample(file, { 'verl.nodes': 2, 'verl.gpus_per_node': 8 }));
    assert.equal(two.fits, true);
    assert.equal(two.devices[0]!.count, 16);
    assert.ok(
      two.devices[0]!.parts.optimizer! * 2 === eight.devices[0]!.parts.optimizer! ||
        Math.abs(two.devices[0]!.parts.optimizer! * 2 - eight.devices[0]!.parts.optimizer!) <= 2,
    );
    // Search-R1's 8 sequences a GPU (its ppo_micro_batch_size 64 over 8 GPUs) at the longest do not fit either way
    assert.equal(planRun(loadedExample(file, { 'optim.micro_batch_size': 8 })).fits, false);
    assert.equal(
      planRun(loadedExample(file, { 'optim.micro_batch_size': 8, 'verl.nodes': 2, 'verl.gpus_per_node': 8 })).fits,
      false,
    );
    // --gpus: the same config on 4 GPUs (devices; gpus_per_node follows)
    assert.equal(planRun(loadedExample(file), { gpus: 4 }).devices[0]!.count, 4);
  });

  it('train applies what the plan chose, never over a value the config sets; the host refuses a veRL run that does not fit', async () => {
    const dir = scratchDir('sas-plan-');
    const file = join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-verl.run.json');
    const loaded = { ...loadedExample(file, { 'verl.param_offload': false }), file };
    const planned = await checkRunHostMemory(loaded, { python: '/nonexistent/python3', gpuMemoryBytes: 80 * GiB });
    assert.deepEqual(planned, { 'verl.optimizer_offload': true });
    const written = await plannedConfig({
      loaded,
      runDir: join(dir, 'run'),
      planned: { ...planned, 'verl.param_offload': true },
    });
    assert.equal(written, join(dir, 'run', 'verl', 'planned.run.json'));
    const c = JSON.parse(readFileSync(written, 'utf8'));
    assert.equal(c.verl.optimizer_offload, true);
    assert.equal(c.verl.param_offload, false, "the config's own value stands");
    assert.equal(c.data.train, join(ROOT, 'data', 'nq_hotpotqa', 'train.jsonl'), 'paths made absolute');
    assert.equal(c.verl.python, join(ROOT, '.venv-verl', 'bin', 'python'));
    assert.equal(
      await plannedConfig({ loaded, runDir: join(dir, 'run2'), planned: {} }),
      file,
      'nothing chosen: the file as it is',
    );
    const lines: string[] = [];
    await assert.rejects(
      checkRunHostMemory(
        { ...loadedExample(file, { 'optim.micro_batch_size': 16 }), file },
        { python: '/nonexistent/python3', gpuMemoryBytes: 80 * GiB, onMemoryCheck: (l) => lines.push(l) },
      ),
      (e: Error) => e instanceof MemoryPlanError && /does not fit one GPU of 80\.0 GiB/.test(e.message),
    );
    assert.match(lines[0]!, /would fit: optim\.micro_batch_size/);
  });

  it('TRL on one 80 GiB GPU: vLLM in sleep mode gives its share back for the update; without it the update holds it', async () => {
    const file = join(ROOT, 'examples', 'one-gpu', 'qwen2.5-3b-grpo-trl.run.json');
    const plan = planRun(loadedExample(file));
    assert.equal(plan.fits, true);
    const [d] = plan.devices;
    assert.ok(d!.parts.vllm === 16 * GiB && d!.phases.update! < d!.phases.rollout! + d!.parts.gradients!);
    assert.ok(d!.parts.weight_casts_update! > 5 * GiB, "autocast's cache through the update's forward");
    const awake = planRun(loadedExample(file, { 'trl.vllm_enable_sleep_mode': false }));
    assert.equal(awake.devices[0]!.phases.update! - d!.phases.update!, 16 * GiB - d!.parts.vllm_asleep!);
    // our own generator instead: its KV cache sized after TRL built the reference
    const ours = planRun(loadedExample(file, { 'trl.use_vllm': false }));
    assert.ok(ours.fits && ours.devices[0]!.parts.kv_cache! > 0 && ours.devices[0]!.parts.weight_casts! > 0);
    void (await loadRunConfig(file, { files: false }));
  });
});
