"""The veRL memory planner (src/core/plan/verl.ts) against veRL's own actor update, on CPU (in .venv-verl; skipped
elsewhere): verl_update_on_cpu.py runs one update mini-batch of veRL 0.9.1's FSDP engine — its model building, FSDP1
wrapping with bf16 mixed precision, AdamW, remove-padding, gradient checkpointing and `ppo_loss` with the entropy and
the KL term, on a Qwen2 of width 64 and 16,000 tokens (its vocabulary × hidden outweighs the rest of the model, as a
Qwen model's does at few layers) — after a first step that makes AdamW's moments, and counts every storage it
allocates on top of the weights and moments. The planner's update phase for the same run config (without vLLM's
asleep share: no vLLM here) is compared with that.

What it found at stop 67 (two micro-batches of two sequences of 32 + 96 tokens; storages counted by identity and
re-read as FSDP resizes them, test_memory_plan.StorageBytes: the same bytes in every run):
- the weights and AdamW's moments are the planner's sizes to the byte (but the rotary embedding's buffer);
- the output layer's gradient is held from the head's backward to the pass's end, beside the root's bf16 parameters
  cast again (counted since this stop; test_verl_memory.py measures both through torch's FSDP1 alone);
- the plan is 0.893x the step tied and 0.980x untied. What the tied step holds beyond it (about one copy of the
  logits) is in the logits' moment: without `torch.compile` the entropy's backward (`verl_F.entropy_from_logits`: a
  softmax and a product) makes temporaries of their size. veRL compiles that function by default
  (`actor.use_torch_compile: true`), which fuses them; a count of storages does not see inside a compiled kernel, so
  this runs it uncompiled, and the planner keeps the five copies it reads in veRL's source (docs/engines.md).
BAND holds both: a change of either side by a tenth fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="the veRL engine's tests run in .venv-verl (npm run test:verl)")

from conftest import NODE, cli_json, free_port  # noqa: E402
from hf_fixture import build_tiny_qwen2, demo_texts  # noqa: E402
from verl_harness import DEMO, ROOT  # noqa: E402

HERE = Path(__file__).resolve().parent
SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
VOCAB, PROMPT, RESPONSE, MICRO, MINI = 16_000, 32, 96, 2, 4
# the plan over the measured step, uncompiled entropy (above): 0.893 tied, 0.980 untied
BAND = (0.85, 1.02)


def model_dir(tmp: Path, tied: bool) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM

    d = build_tiny_qwen2(tmp / "model", demo_texts(DEMO), weights=False)
    config = json.loads((d / "config.json").read_text())
    config.pop("layer_types", None)
    config.update(SHAPE, vocab_size=VOCAB, tie_word_embeddings=tied, architectures=["Qwen2ForCausalLM"])
    (d / "config.json").write_text(json.dumps(config))
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(d)).save_pretrained(d)  # veRL loads weights
    return d


def run_config(model: Path) -> dict:
    c = json.loads((ROOT / "examples" / "one-gpu" / "qwen2.5-3b-grpo-verl.run.json").read_text())
    c["model"] = {"kind": "hf", "path": str(model), "dtype": "auto"}
    c["rollout"].update(max_prompt_length=PROMPT, max_response_length=RESPONSE, batch_size=MINI)
    c["optim"] = {"mini_batch_size": MINI, "micro_batch_size": MICRO}
    c["verl"].update(attention="sdpa", param_offload=False, optimizer_offload=False)
    return c


@pytest.mark.skipif(NODE is None, reason="the planner runs in Node")
@pytest.mark.parametrize("tying", ["tied", "untied"])
def test_the_planner_counts_what_veRLs_own_update_step_holds(tmp_path, tying):
    model = model_dir(tmp_path, tying == "tied")
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_config(model)))
    planned = cli_json("plan", "--json", str(config), ok=(0, 1))["devices"][0]
    parts = planned["parts"]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "verl_update_on_cpu.py"),
            str(model),
            str(PROMPT),
            str(RESPONSE),
            str(MICRO),
            str(MINI),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    step = json.loads(done.stdout.strip().splitlines()[-1])
    assert step["grad_norm"] > 0, "the step trained nothing"
    # fp32 weights and AdamW's two moments: the planner's sizes (the rotary embedding's few buffer bytes beside)
    assert 0 <= step["states"] - (parts["weights"] + parts["optimizer"]) < 4096, (step, parts)
    measured = step["states"] + step["peak"]
    update = planned["phases"]["update"] - parts.get("rollout_asleep", 0)
    ratio = update / measured
    print(f"{tying}: planned {update / 1e6:.2f} MB, veRL's step {measured / 1e6:.2f} MB: {ratio:.3f}x")
    assert BAND[0] <= ratio <= BAND[1], f"{tying}: the plan is {ratio:.3f}x veRL's update step, outside {BAND}"
