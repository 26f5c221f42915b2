/**
 * The memory planner's inputs and what it says back (src/core/plan): LoRA targets as peft matches them (checked
 * against peft itself, on the modules transformers builds), the config.json values it refuses, accelerate configs and
 * command-line sizes it cannot plan (exit 2, naming the file and the field; never a refusal of `train --force`), the
 * attention mask of a padded micro-batch, the KV budget it suggests when the trainer would size it, and every change
 * it suggests — applied to the config file exactly as printed and planned again, it fits with the bytes printed.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { execa } from 'execa';
import { loadRunConfig } from '../../src/core/host/runConfig';
import { checkRunHostMemory } from '../../src/core/host/runHost';
import { applyChange } from '../../src/core/plan/builtin';
import { checkRunMemory } from '../../src/core/plan/check';
import { loraAdapter, type ModelShape, modelShape, namedModules, readModelShape } from '../../src/core/plan/model';
import { type MemoryPlan, PlanError, parseBytes, planRun, readShapeAt } from '../../src/core/plan/plan';
import { verlPlan } from '../../src/core/plan/verl';
import { resolveRunConfig } from '../../src/core/run/presets';
import { scratchDir } from '../support/scratch';

const ROOT = join(__dirname, '..', '..');
const PYTHON = join(ROOT, '.venv', 'bin', 'python');
const SHAPES = join(ROOT, 'examples', 'one-gpu', 'models');
const GiB = 2 ** 30;
const cli = (...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
    reject: false,
  });

type Obj = Record<string, any>;

/** Qwen3-4B's config.json (its model card's numbers). */
const QWEN3_4B = {
  architectures: ['Qwen3ForCausalLM'],
  model_type: 'qwen3',
  hidden_size: 2560,
  intermediate_size: 9728,
  num_hidden_layers: 36,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  head_dim: 128,
  vocab_size: 151936,
  tie_word_embeddings: true,
  max_position_embeddings: 40960,
  attention_bias: false,
};

/** `obj` with the dotted `key` set (undefined: left out), as a user edits a config file. */
function setKey(obj: Obj, key: string, value: unknown): void {
  const path = key.split('.');
  let node = obj;
  for (const k of path.slice(0, -1)) {
    if (!node[k] || typeof node[k] !== 'object') node[k] = {};
    node = node[k];
  }
  if (value === undefined) delete node[path[path.length - 1]!];
  else node[path[path.length - 1]!] = value;
}

const dir = scratchDir('sas-plan-inputs-');
let written = 0;

/** A copy of an example run config in a scratch directory, its model the shape `model` (a shipped one's name or a
 * directory), its relative accelerate config made absolute, with `keys` (dotted) set. */
function runConfig(example: string, model: string, keys: Obj = {}): { file: string; raw: Obj } {
  const source = join(ROOT, 'examples', example);
  const raw = JSON.parse(readFileSync(source, 'utf8'));
  raw.model.path = isAbsolute(model) ? model : join(SHAPES, model);
  const acc = raw.trl?.accelerate_config;
  if (acc && !isAbsolute(acc)) raw.trl.accelerate_config = resolve(dirname(source), acc);
  for (const [k, v] of Object.entries(keys)) setKey(raw, k, v);
  const file = join(dir, `c${written++}.run.json`);
  writeFileSync(file, JSON.stringify(raw));
  return { file, raw };
}

async function plan(file: string, options: Parameters<typeof planRun>[1] = {}): Promise<MemoryPlan> {
  return planRun(await loadRunConfig(file, { files: false }), options);
}

function qwen3Dir(): string {
  const d = join(dir, 'qwen3-4b');
  mkdirSync(d, { recursive: true });
  writeFileSync(join(d, 'config.json'), JSON.stringify(QWEN3_4B));
  return d;
}

/** A printed suggestion as the user reads it: `key: value` (JSON) or `key left out`, joined by " and ", each maybe
 * followed by a parenthesised why, then " → N GiB of M GiB …". */
function parseSuggestion(text: string): { changes: { key: string; value?: unknown }[]; gib: number } {
  const [head, tail] = text.split(' → ') as [string, string];
  let depth = 0;
  let bare = '';
  for (const ch of head) {
    if (ch === '(') depth++;
    else if (ch === ')') depth--;
    else if (!depth) bare += ch;
  }
  const changes = bare
    .split(' and ')
    .map((s) => s.trim())
    .map((s) => {
      const out = /^([\w.]+) left out$/.exec(s);
      if (out) return { key: out[1]! };
      const m = /^([\w.]+): (.+)$/.exec(s);
      assert.ok(m, `not a change: ${JSON.stringify(s)} in ${text}`);
      return { key: m[1]!, value: JSON.parse(m[2]!) };
    });
  return { changes, gib: Number(/^([\d.]+) GiB/.exec(tail)![1]) };
}

describe('memory plan: inputs, and suggestions applied as printed', function () {
  this.timeout(300_000);

  it("plans LoRA targets by peft's rule (a name or a suffix after a dot): full names, lm_head, one layer; a target it cannot size is not planned and never blocks --force", async () => {
    const ex = 'one-gpu/qwen2.5-7b-lora-grpo.run.json';
    const at = async (targets: string[]) =>
      plan(runConfig(ex, 'qwen2.5-7b', { 'model.lora.target_modules': targets, 'model.lora.r': 16 }).file);
    const short = await at(['q_proj', 'v_proj']);
    const full = await at(['self_attn.q_proj', 'self_attn.v_proj']);
    assert.deepEqual(full.devices, short.devices);
    assert.equal(full.fits, true);
    const s = readModelShape(join(SHAPES, 'qwen2.5-7b'));
    const q = 16 * (s.hidden + s.heads * s.headDim);
    const v = 16 * (s.hidden + s.kvHeads * s.headDim);
    assert.equal(short.devices[0]!.parts.gradients, 4 * s.layers * (q + v));
    // lm_head is a Linear peft adapts (once: vocabulary × width); a full name names that layer only
    const head = await at(['q_proj', 'lm_head']);
    assert.equal(head.devices[0]!.parts.gradients, 4 * (s.layers * q + 16 * (s.hidden + s.vocab)));
    assert.equal((await at(['model.layers.0.self_attn.q_proj'])).devices[0]!.parts.gradients, 4 * q);
    // an empty list is the trainer's default (`target_modules or [...]`)
    const none = await at([]);
    const dflt = await at(['q_proj', 'k_proj', 'v_proj', 'o_proj']);
    assert.deepEqual(none.devices, dflt.devices);
    // a name no module has, beside one that does: peft ignores it, and the plan says so
    assert.match((await at(['q_proj', 'qproj'])).notes.join('\n'), /"qproj" names no module of this qwen2 model/);

    // a target peft refuses: not planned (exit 2 for plan), naming the config file and the field
    const { file } = runConfig(ex, 'qwen2.5-7b', { 'model.lora.target_modules': ['self_attn'] });
    await assert.rejects(
      plan(file),
      (e: Error) =>
        e instanceof PlanError &&
        e.message.startsWith(`${file}: model.lora.target_modules: "self_attn" names model.layers.0.self_attn`),
    );
    await assert.rejects(
      plan(runConfig(ex, 'qwen2.5-7b', { 'model.lora.target_modules': ['.*_proj'] }).file),
      /model\.lora\.target_modules: "\.\*_proj": no module .* matched literally, as peft does/,
    );
    const loaded = await loadRunConfig(file, { files: false });
    const check = checkRunMemory(loaded);
    assert.equal(check.plan, undefined);
    assert.match(check.line, /^memory: not planned: .*model\.lora\.target_modules: "self_attn"/);
    assert.ok(check.line.includes(file));
    // train's check (the run host's): a line, never a refusal, forced or not
    const lines: string[] = [];
    for (const force of [false, true])
      assert.deepEqual(
        await checkRunHostMemory(loaded, {
          python: '/nonexistent/python3',
          gpuMemoryBytes: 80 * GiB,
          force,
          onMemoryCheck: (l) => lines.push(l),
        }),
        {},
      );
    assert.match(lines[0]!, /^memory: not planned: /);
    const r = await cli('plan', file);
    assert.equal(r.exitCode, 2);
    assert.match(
      r.stderr,
      /model\.lora\.target_modules: "self_attn" names model\.layers\.0\.self_attn \(Qwen2Attention\)/,
    );
  });

  it("matches LoRA targets as peft itself does (check_target_module_exists over the modules transformers builds), and sizes the adapters as peft's layers", async function () {
    if (!existsSync(PYTHON)) this.skip();
    const configs: Obj = {
      qwen2: { hidden_size: 64, intermediate_size: 96, num_attention_heads: 4, num_key_value_heads: 2 },
      qwen3: { hidden_size: 64, intermediate_size: 96, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 24 },
      llama: { hidden_size: 64, intermediate_size: 96, num_attention_heads: 8, num_key_value_heads: 4 },
      mistral: { hidden_size: 48, intermediate_size: 80, num_attention_heads: 4, num_key_value_heads: 1 },
    };
    for (const c of Object.values(configs)) Object.assign(c, { num_hidden_layers: 2, vocab_size: 200 });
    const targets = [
      ['q_proj', 'v_proj'],
      ['self_attn.q_proj', 'mlp.down_proj'],
      ['q_proj', 'lm_head'],
      ['model.layers.1.mlp.down_proj'],
      ['layers.0.self_attn.o_proj', 'gate_proj', 'nothing'],
      ['embed_tokens', 'up_proj'],
      ['k_proj', 'k_proj', 'self_attn.k_proj'],
      ['self_attn'],
      ['input_layernorm'],
      ['q_norm'],
      ['.*_proj'],
      ['nothing'],
    ];
    const py = `
import json, sys, torch, transformers
from peft import LoraConfig
from peft.tuners.tuners_utils import check_target_module_exists
req = json.load(sys.stdin)
out = {}
for mt, kw in req["configs"].items():
    cfg = transformers.AutoConfig.for_model(mt, **kw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    mods = list(model.named_modules())
    res = []
    for t in req["targets"]:
        lc = LoraConfig(r=8, target_modules=list(t))
        hit = [(n, m) for n, m in mods if check_target_module_exists(lc, n)]
        bad = [n for n, m in hit if not isinstance(m, (torch.nn.Linear, torch.nn.Embedding))]
        params = sum(8 * ((m.in_features + m.out_features) if isinstance(m, torch.nn.Linear) else (m.num_embeddings + m.embedding_dim)) for n, m in hit if not bad)
        res.append({"matched": len(hit), "unsupported": bad[0] if bad else None, "params": params})
    out[mt] = {"modules": [[n, type(m).__name__] for n, m in mods], "targets": res}
print(json.dumps(out))
`;
    const r = await execa(PYTHON, ['-c', py], { input: JSON.stringify({ configs, targets }), reject: false });
    assert.equal(r.exitCode, 0, r.stderr);
    const got = JSON.parse(r.stdout);
    for (const [mt, kw] of Object.entries(configs)) {
      const shape: ModelShape = modelShape({ model_type: mt, ...kw }, mt);
      // the module tree, name by name and type by type
      assert.deepEqual(
        namedModules(shape).map((m) => [m.name, m.type]),
        got[mt].modules,
        mt,
      );
      targets.forEach((t, i) => {
        const want = got[mt].targets[i];
        let params: number | undefined;
        let error = '';
        try {
          params = loraAdapter(shape, 8, t).params;
        } catch (e) {
          error = (e as Error).message;
        }
        if (want.unsupported) assert.match(error, /LoRA cannot adapt/, `${mt} ${t}`);
        else if (!want.matched) assert.match(error, /peft would refuse it/, `${mt} ${t}`);
        else assert.equal(params, want.params, `${mt} ${JSON.stringify(t)}: ${error}`);
      });
    }
  });

  it('refuses config.json values no model has, naming the file and the field; derives head_dim as transformers does', () => {
    const base = JSON.parse(readFileSync(join(SHAPES, 'qwen2.5-3b', 'config.json'), 'utf8'));
    const bad = (keys: Obj, message: RegExp) =>
      assert.throws(() => modelShape({ ...base, ...keys }, 'x/config.json'), message, JSON.stringify(keys));
    bad({ num_hidden_layers: 36.5 }, /x\/config\.json: num_hidden_layers: expected a positive integer, got 36\.5/);
    bad({ num_attention_heads: 3 }, /x\/config\.json: num_attention_heads: 3 does not divide hidden_size 2048/);
    bad({ head_dim: -1 }, /x\/config\.json: head_dim: expected a positive integer, got -1/);
    bad({ head_dim: null }, /x\/config\.json: head_dim: expected a positive integer, got null/); // qwen2 reads it as given
    bad({ num_key_value_heads: 64 }, /num_key_value_heads: 64 does not divide num_attention_heads 16/);
    bad({ num_key_value_heads: 3 }, /num_key_value_heads: 3 does not divide num_attention_heads 16/);
    bad(
      { vocab_size: 1e20 },
      /vocab_size: expected a positive integer of at most 4,194,304 .*got 100000000000000000000/,
    );
    bad({ intermediate_size: '11008' }, /intermediate_size: expected a positive integer, got "11008"/);
    bad({ num_hidden_layers: 0 }, /num_hidden_layers: expected a positive integer, got 0/);
    bad({ text_config: [1], hidden_size: -5 }, /hidden_size: expected a positive integer, got -5/); // not an object: not the text config
    // head_dim given: the heads need not divide the width (Qwen3-4B: 32 × 128 ≠ 2,560)
    assert.equal(modelShape(QWEN3_4B).headDim, 128);
    // left out: qwen3's default is 128 (Qwen3Config), the others derive it; null is "left out" for llama
    const { head_dim: _, ...noHeadDim } = QWEN3_4B;
    assert.equal(modelShape(noHeadDim).headDim, 128);
    assert.equal(modelShape({ ...base, model_type: 'llama', head_dim: null }).headDim, 128);
    assert.equal(modelShape({ ...base, model_type: 'mistral', hidden_size: 1024 }).headDim, 64);
    // a config.json that is not an object
    const d = join(dir, 'array-model');
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, 'config.json'), '[1, 2]');
    assert.throws(() => readModelShape(d), /array-model\/config\.json: expected a JSON object/);
    writeFileSync(join(dir, 'shape.json'), '[1, 2]');
    assert.throws(() => readShapeAt(join(dir, 'shape.json')), /shape\.json: expected a JSON object/);
    assert.throws(() => modelShape([1, 2] as any, 'y.json'), /y\.json: expected a JSON object/);
  });

  it('suggests a smaller KV budget when the trainer would size it (its floor of 65,536 tokens is what does not fit), before LoRA', async () => {
    const { file } = runConfig('one-gpu/qwen2.5-3b-grpo.run.json', qwen3Dir(), {
      'model.dtype': 'bf16',
      'model.device': 'cuda',
    });
    const p = await plan(file);
    assert.equal(p.fits, false);
    // the trainer's automatic sizing stops at 65,536 tokens: the rollout phase is over
    assert.match(p.devices[0]!.what.kv_cache!, /^65,536 tokens .*sized by the trainer/);
    assert.equal(p.devices[0]!.peak.phase, 'rollout');
    assert.match(
      p.suggestions[0]!,
      /^optim\.micro_batch_size: 2 and rollout\.max_batch_tokens: 32768 \(fewer rows a wave; left unset the trainer sizes at least 65,536 tokens\) → /,
    );
    assert.match(p.suggestions.at(-1)!, /^model\.lora: /);
    // the budget the config sets: halves, and leaving it to the trainer
    const set = await plan(
      runConfig('one-gpu/qwen2.5-3b-grpo.run.json', 'qwen2.5-3b', { 'rollout.max_batch_tokens': 900000 }).file,
    );
    assert.equal(set.fits, false);
    // (450,000 is not enough: the mildest that fits is named, not every smaller one)
    assert.match(set.suggestions[0]!, /^rollout\.max_batch_tokens: 225000 \(fewer rows a wave\) → /);
    assert.match(
      set.suggestions[1]!,
      /^rollout\.max_batch_tokens left out \(the trainer sizes the KV cache to what is left\) → /,
    );
  });

  it("counts SDPA's mask of a padded micro-batch (mb × T² booleans, and its bf16 copy in a layer's backward): builtin and TRL", async () => {
    const long = runConfig('one-gpu/qwen2.5-3b-grpo.run.json', 'qwen2.5-3b', {
      'rollout.max_prompt_length': 16384,
      'rollout.max_response_length': 16384,
      'optim.micro_batch_size': 16,
    });
    const p = await plan(long.file);
    assert.equal(p.devices[0]!.parts.attention_mask, 16 * 32768 ** 2);
    // micro-batches of 2 held 74.4 GiB without the mask: with its 2 GiB and the 4 GiB copy they do not fit; 1 does
    assert.deepEqual(
      p.suggestions.map((x) => x.split(' → ')[0]),
      ['optim.micro_batch_size: 1'],
    );
    const two = await plan(
      runConfig('one-gpu/qwen2.5-3b-grpo.run.json', 'qwen2.5-3b', {
        'rollout.max_prompt_length': 16384,
        'rollout.max_response_length': 16384,
        'optim.micro_batch_size': 2,
      }).file,
    );
    assert.equal(two.fits, false);
    assert.match(two.devices[0]!.what.backward_peak!, /SDPA's bf16 copy of the attention mask/);
    // without checkpointing every layer keeps its copy for the backward
    const s = readModelShape(join(SHAPES, 'qwen2.5-3b'));
    const noCkpt = await plan(
      runConfig('one-gpu/qwen2.5-3b-grpo.run.json', 'qwen2.5-3b', { 'model.gradient_checkpointing': false }).file,
    );
    assert.equal(noCkpt.devices[0]!.parts.attention_mask, 4 * 6144 ** 2 * (1 + 2 * s.layers));
    // TRL's padded batch, through the update's forward and backward
    const trl = await plan(runConfig('one-gpu/qwen2.5-3b-grpo-trl.run.json', 'qwen2.5-3b').file);
    const d = trl.devices[0]!;
    assert.equal(d.parts.attention_mask, 4 * 6144 ** 2);
    assert.match(d.what.attention_mask!, /\(update_forward, update\)$/);
  });

  it('every suggestion it prints is the change it plans: applied to the config file as printed and planned again, it fits with the bytes printed', async () => {
    const q3 = qwen3Dir();
    const cases: [string, string, Obj][] = [
      ['one-gpu/qwen2.5-3b-grpo.run.json', 'qwen2.5-3b', { 'optim.micro_batch_size': 64 }],
      ['one-gpu/qwen2.5-3b-grpo.run.json', 'qwen2.5-3b', { 'rollout.max_batch_tokens': 900000 }],
      ['one-gpu/qwen2.5-3b-grpo.run.json', 'qwen2.5-3b', { 'model.gradient_checkpointing': false }],
      ['one-gpu/qwen2.5-3b-grpo.run.json', q3, {}],
      ['one-gpu/qwen2.5-7b-lora-grpo.run.json', 'qwen2.5-7b', { 'model.lora': undefined }],
      [
        'one-gpu/qwen2.5-3b-grpo-trl.run.json',
        'qwen2.5-3b',
        { 'trl.vllm_enable_sleep_mode': false, 'optim.micro_batch_size': 16 },
      ],
      ['one-gpu/qwen2.5-3b-grpo-trl.run.json', 'qwen2.5-3b', { 'trl.use_vllm': false, 'optim.micro_batch_size': 16 }],
      ['qwen2.5-3b-trl.run.json', 'qwen2.5-7b', { 'optim.micro_batch_size': 32 }],
      ['one-gpu/qwen2.5-3b-grpo-verl.run.json', 'qwen2.5-3b', { 'optim.micro_batch_size': 8 }],
      ['one-gpu/qwen2.5-3b-grpo-verl.run.json', 'qwen2.5-3b', { 'verl.gpu_memory_utilization': 0.08 }],
      ['one-gpu/qwen2.5-3b-grpo-verl.run.json', 'qwen2.5-7b', { devices: undefined, 'verl.gpus_per_node': 2 }],
      ['one-gpu/qwen2.5-3b-grpo-verl.run.json', 'qwen2.5-7b', { devices: 2 }],
      ['one-gpu/qwen2.5-3b-grpo-verl.run.json', 'qwen2.5-7b', { devices: 2, 'verl.gpus_per_node': 2 }],
      [
        'one-gpu/qwen2.5-3b-grpo-verl.run.json',
        'qwen2.5-7b',
        { 'verl.param_offload': false, 'verl.optimizer_offload': false },
      ],
      ['qwen2.5-3b-grpo-verl.run.json', 'qwen2.5-7b', { 'optim.micro_batch_size': 16 }],
    ];
    let applied = 0;
    const printed: string[] = [];
    const checks: (() => void)[] = [];
    for (const [example, model, keys] of cases) {
      const { file, raw } = runConfig(example, model, keys);
      const p = await plan(file);
      const name = `${example} ${JSON.stringify(keys)}`;
      assert.equal(p.fits, false, name);
      const withChange = p.suggestions.filter((s) => s.includes(' → '));
      assert.ok(withChange.length, `${name}: ${p.suggestions.join('\n')}`);
      for (const [i, text] of withChange.entries()) {
        printed.push(text);
        // the change as printed, written into the config file
        const parsed = parseSuggestion(text);
        const changed = structuredClone(raw);
        for (const c of parsed.changes) setKey(changed, c.key, c.value);
        const again = join(dir, `applied${applied++}.run.json`);
        writeFileSync(again, JSON.stringify(changed));
        const q = await plan(again).catch((e: Error) => assert.fail(`${name}: ${text}: ${e.message}`));
        const need = Math.max(...q.devices.map((d) => d.total_bytes));
        assert.equal(q.fits, true, `${name}: ${text}: ${need / GiB} GiB`);
        assert.equal((need / GiB).toFixed(1), parsed.gib.toFixed(1), `${name}: ${text}`);
        checks.push(() => {
          // and the JSON's, key for key
          assert.deepEqual(parsed.changes, p.suggested_changes[i]!.changes, `${name}: ${text}`);
          assert.equal(need, p.suggested_changes[i]!.total_bytes, `${name}: ${text}`);
        });
      }
      checks.push(() => assert.equal(withChange.length, p.suggested_changes.length, name));
    }
    for (const check of checks) check();
    // veRL's GPUs as the config counts them: gpus_per_node where it sets that (devices alone disagreed with it)
    assert.ok(
      printed.some((t) => /^verl\.gpus_per_node: 4 \(FSDP shards/.test(t)),
      printed.join('\n'),
    );
    assert.ok(
      printed.some((t) => /^devices: 4 \(FSDP shards/.test(t)),
      printed.join('\n'),
    );
    assert.ok(
      printed.some((t) => /^devices: 4 and verl\.gpus_per_node: 4 /.test(t)),
      printed.join('\n'),
    );
    assert.ok(
      printed.some((t) => / and verl\.param_offload left out /.test(t)),
      printed.join('\n'),
    );
    // eight GPUs a machine already: twice the machines (devices, where the config sets it, with them)
    const eight = runConfig('qwen2.5-3b-grpo-verl.run.json', 'qwen2.5-7b');
    const ctx = (raw: Obj) => ({
      config: resolveRunConfig(raw as any),
      shape: readModelShape(join(SHAPES, 'qwen2.5-7b')),
      gpuMemoryBytes: 80 * GiB,
      gpus: 1,
      device: 'cuda' as const,
    });
    const nodes = (raw: Obj) => verlPlan(ctx(raw)).changes!.find((c) => c.sets.some(([k]) => k === 'verl.nodes'))!;
    assert.deepEqual(nodes(eight.raw).sets, [['verl.nodes', 2]]);
    assert.equal(verlPlan(ctx(applyChange(eight.raw, nodes(eight.raw)))).counts![0], 16);
    const withDevices = { ...eight.raw, devices: 8, verl: { ...eight.raw.verl, gpus_per_node: undefined } };
    assert.deepEqual(nodes(withDevices).sets, [
      ['devices', 16],
      ['verl.nodes', 2],
    ]);
  });

  it('refuses what it cannot plan with exit 2: a GPU under 1 GiB (a unit left out), --gpus that is not a count, an accelerate config missing or malformed', async () => {
    assert.equal(parseBytes('80GiB'), 80 * GiB);
    assert.equal(parseBytes('141 GB'), 141e9);
    assert.equal(parseBytes('85899345920'), 80 * GiB);
    for (const t of ['0', '80', '80KB', '512MiB', '0.5GiB'])
      assert.throws(
        () => parseBytes(t),
        /less than 1 GiB: no GPU's memory \(a unit left out\? 80GiB is 80 GiB; units: KiB/,
        t,
      );
    const { file } = runConfig('one-gpu/qwen2.5-3b-grpo.run.json', 'qwen2.5-3b');
    const small = await cli('plan', file, '--gpu-memory', '80');
    assert.equal(small.exitCode, 2);
    assert.match(small.stderr, /--gpu-memory: "80" is 80 bytes, less than 1 GiB/);
    const gpus = await cli('plan', file, '--gpus', 'abc');
    assert.equal(gpus.exitCode, 2);
    assert.match(gpus.stderr, /--gpus: expected a positive integer \(the GPUs the run has\), got "abc"/);

    const trl = (acc: string) =>
      runConfig('qwen2.5-3b-trl.run.json', 'qwen2.5-3b', { 'trl.accelerate_config': join(dir, acc) }).file;
    const missing = trl('nope.yaml');
    await assert.rejects(
      plan(missing),
      (e: Error) =>
        e instanceof PlanError &&
        e.message ===
          `${missing}: trl.accelerate_config: ${join(dir, 'nope.yaml')}: no such file (an accelerate config, as \`accelerate config\` writes it)`,
    );
    const check = checkRunMemory(await loadRunConfig(missing, { files: false }));
    assert.equal(check.plan, undefined);
    assert.match(check.line, /^memory: not planned: .*trl\.accelerate_config: .*nope\.yaml: no such file/);
    const yaml = (name: string, text: string) => {
      writeFileSync(join(dir, name), text);
      return trl(name);
    };
    for (const [stage, shown] of [
      ['[3', '"[3"'],
      ["'three'", '"three"'],
      ['4', '"4"'],
    ] as const)
      await assert.rejects(
        plan(yaml('stage.yaml', `distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: ${stage}\n`)),
        new RegExp(
          `stage\\.yaml: deepspeed_config\\.zero_stage: expected a ZeRO stage, 0, 1, 2 or 3, got ${shown.replace(/[[\]]/g, '\\$&')}`,
        ),
      );
    await assert.rejects(
      plan(
        yaml(
          'off.yaml',
          'distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: gpu\n',
        ),
      ),
      /off\.yaml: deepspeed_config\.offload_optimizer_device: expected none, cpu or nvme, got "gpu"/,
    );
    await assert.rejects(
      plan(yaml('json.yaml', 'distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n')),
      /json\.yaml: deepspeed_config\.deepspeed_config_file: .*ds\.json: no such file/,
    );
    writeFileSync(join(dir, 'ds.json'), JSON.stringify({ zero_optimization: { stage: 'three' } }));
    await assert.rejects(
      plan(trl('json.yaml')),
      /ds\.json: zero_optimization\.stage: expected a ZeRO stage, 0, 1, 2 or 3, got "three"/,
    );
    await assert.rejects(
      plan(yaml('fsdp.yaml', 'distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULLSHARD\n')),
      /fsdp\.yaml: fsdp_config\.fsdp_sharding_strategy: expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD/,
    );
    // what accelerate writes still plans
    writeFileSync(join(dir, 'ds.json'), JSON.stringify({ zero_optimization: { stage: 2 } }));
    assert.match((await plan(trl('json.yaml'))).summary, /ZeRO-2/);
    assert.match(
      (await plan(yaml('quoted.yaml', "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: '3'\n"))).summary,
      /ZeRO-3/,
    );
  });
});
