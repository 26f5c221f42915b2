"""One update mini-batch of veRL 0.9.1's own actor engine (FSDPEngineWithLMHead: FSDP1, bf16 mixed precision,
remove-padding, gradient checkpointing, its `ppo_loss` with the entropy and the KL term) on the CPU, every storage it
allocates counted: a process of its own (it sets veRL's platform and a process group), run by
test_verl_update_memory.py as `python verl_update_on_cpu.py MODEL_DIR PROMPT RESPONSE MICRO MINI`; prints one JSON line.

What stands in for a GPU (TEST DOUBLE): `CPUPlatform`, veRL's platform interface answered by the CPU (veRL 0.9.1
registers NVIDIA, Ascend and ROCm only); and FSDP's refusal of `sync_module_states` (veRL sets it) for parameters on
the CPU is lifted — on one process the broadcast it guards changes nothing. Everything else is veRL's and torch's:
the engine builds the model, wraps it, makes the optimizer and trains as veRL's actor worker does (`train_batch` with
`partial(ppo_loss, config=actor_config)` on a TensorDict made by veRL's `left_right_2_no_padding`). The entropy runs
uncompiled (`use_torch_compile: false`): a count of storages sees each operation's outputs, and a compiled kernel's
are not operations it sees."""

from __future__ import annotations

import json
import os
import sys
import types
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS.parent)]

from verl.plugin.platform import platform_manager  # noqa: E402
from verl.plugin.platform.platform_cuda import PlatformCUDA  # noqa: E402


class CPUPlatform(PlatformCUDA):
    """TEST DOUBLE for the GPU: veRL's platform interface answered by the CPU."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def device_module(self):
        m = types.SimpleNamespace(**{k: getattr(torch.cpu, k) for k in dir(torch.cpu) if not k.startswith("_")})
        for name in ("empty_cache", "reset_peak_memory_stats", "synchronize", "set_device"):
            setattr(m, name, lambda *a, **k: None)
        for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
            setattr(m, name, lambda *a, **k: 0)
        m.mem_get_info = lambda *a: (0, 0)
        m.is_available = lambda: True
        m.manual_seed = m.manual_seed_all = torch.manual_seed
        m.current_device = lambda: torch.device("cpu")
        m.device_count = lambda: 1
        return m

    def is_available(self) -> bool:
        return True

    def current_device(self):
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        pass

    def synchronize(self, device_index=None) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def communication_backend_name(self) -> str:
        return "gloo"


def main(model: str, prompt: int, response: int, micro: int, mini: int) -> dict:
    platform_manager.set_platform(CPUPlatform())
    dist.init_process_group("gloo", rank=0, world_size=1)
    import torch.distributed.fsdp._init_utils as fsdp_init

    fsdp_init._check_module_states_for_sync_module_states = lambda states: None  # TEST DOUBLE (above)

    from search_agent_trainer.engines.verl import worker_setup

    worker_setup.setup()  # as our Ray workers set up veRL's process
    from tensordict import TensorDict
    from verl.trainer.config import CheckpointConfig
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import FSDPActorConfig, FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding

    from test_memory_plan import StorageBytes, _storage_bytes

    engine = FSDPEngineWithLMHead(
        model_config=HFModelConfig(
            path=model,
            use_remove_padding=True,
            enable_gradient_checkpointing=True,
            override_config={"attn_implementation": "sdpa"},  # what our overrides set without flash-attn
        ),
        engine_config=FSDPEngineConfig(strategy="fsdp", model_dtype="fp32", use_torch_compile=False),
        optimizer_config=FSDPOptimizerConfig(lr=1e-6, total_training_steps=4),
        checkpoint_config=CheckpointConfig(),
    )
    engine.initialize()
    actor = FSDPActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_mini_batch_size=mini,
        ppo_micro_batch_size_per_gpu=micro,
        entropy_coeff=0.001,
        use_kl_loss=True,
        kl_loss_coef=0.001,
        kl_loss_type="low_var_kl",
        loss_agg_mode="token-mean",
    )
    V = engine.model_config.hf_config.vocab_size
    g = torch.Generator().manual_seed(0)
    T = prompt + response

    def batch() -> TensorDict:
        # every sequence as long as the budget (the planner's worst case), as veRL's trainer hands the actor a batch
        prompts = torch.randint(5, V, (mini, prompt), generator=g)
        responses = torch.randint(5, V, (mini, response), generator=g)
        td = TensorDict(
            {
                "prompts": prompts,
                "responses": responses,
                "input_ids": torch.cat([prompts, responses], 1),
                "attention_mask": torch.ones(mini, T, dtype=torch.long),
                "position_ids": torch.arange(T).repeat(mini, 1),
                "response_mask": torch.ones(mini, response, dtype=torch.long),
                "old_log_probs": -torch.rand(mini, response, generator=g),
                "ref_log_prob": -torch.rand(mini, response, generator=g),
                "advantages": torch.randn(mini, response, generator=g),
            },
            batch_size=[mini],
        )
        td = left_right_2_no_padding(td)
        tu.assign_non_tensor(
            td,
            calculate_entropy=True,
            distillation_use_topk=False,
            distillation_only=False,
            global_batch_size=mini,
            compute_loss=True,
            temperature=1.0,
            use_remove_padding=True,
            use_dynamic_bsz=False,
            max_token_len_per_gpu=T * micro,
            micro_batch_size_per_gpu=micro,
            use_fused_kernels=False,
        )
        return td

    loss = partial(ppo_loss, config=actor)
    with engine.train_mode():
        engine.train_batch(batch(), loss_function=loss)  # the first step makes AdamW's moments
        engine.optimizer_zero_grad()
        td = batch()
        held = list(engine.module.parameters()) + list(engine.module.buffers())
        for state in engine.optimizer.state.values():
            held += [v for v in state.values() if isinstance(v, torch.Tensor)]
        live = StorageBytes({t.untyped_storage()._cdata for t in held})
        with live:
            out = engine.train_batch(td, loss_function=loss)
    grad_norm = float(out["metrics"]["grad_norm"])
    dist.destroy_process_group()
    return {"states": _storage_bytes(held), "peak": live.peak, "grad_norm": grad_norm}


if __name__ == "__main__":
    model_dir, prompt, response, micro, mini = sys.argv[1], *map(int, sys.argv[2:6])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    print(json.dumps(main(model_dir, prompt, response, micro, mini)))
