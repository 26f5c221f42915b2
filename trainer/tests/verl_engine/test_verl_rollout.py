"""The veRL engine's rollouts, reward and recording on CPU (in .venv-verl; skipped elsewhere), with veRL's own code
wherever it runs without a GPU: its AgentLoopWorker drives our agent loops (the model behind vLLM/SGLang is a
scripted TEST DOUBLE), against the REAL env server (BM25 over the demo corpus, reward builtin:em) through veRL's own
reward loop worker and reward manager; the recorder turns veRL's DataProto into records that must validate and pass
the mask audit — and catch a planted mask disagreement."""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl", reason="the veRL engine's tests run in .venv-verl (npm run test:verl)")

import torch  # noqa: E402

from hf_fixture import build_tiny_qwen2, demo_texts  # noqa: E402
from search_agent_trainer.data import load_dataset, render_prompt  # noqa: E402
from search_agent_trainer.engines.verl.agent_loop import our_tokenizer  # noqa: E402
from search_agent_trainer.engines.verl.batching import env_batchers  # noqa: E402
from search_agent_trainer.engines.verl.main import compose_config  # noqa: E402
from search_agent_trainer.engines.verl.overrides import prepare  # noqa: E402
from search_agent_trainer.engines.verl.recorder import StepRecorder  # noqa: E402
from search_agent_trainer.engines.verl.reward import batcher, compute_score  # noqa: E402
from search_agent_trainer.env_client import EnvClient  # noqa: E402
from search_agent_trainer.rollout import INVALID_ACTION_FEEDBACK, RolloutSettings, observation, run_rollouts  # noqa: E402
from test_train import SCHEMAS, audit_rollout, jsonschema, lines  # noqa: E402
from verl_harness import DEMO, ScriptedLLMServer, ScriptedModel, ScriptedTurnGenerator, run_config  # noqa: E402

EXAMPLES = load_dataset(str(DEMO / "train.jsonl"))[:2]
Q0, Q1 = (e.question for e in EXAMPLES)
LONG = "<think> " + "hmm " * 80 + "</think>"
SCRIPTS = {
    Q0: [
        # a search; a search whose turn runs on past </search> (the server stops there); the forced final answer
        [
            "<think> first the person </think> <search> Kriltre Fehan </search>",
            "<search> Torneind river </search> and then more text",
            f"<answer> {EXAMPLES[0].golden[0]} </answer>",
        ],
        # no action, ended by the end-of-turn token: Search-R1's feedback; then a wrong answer
        ["I am not sure what to do.<|im_end|>", "<answer> nowhere </answer>"],
    ],
    Q1: [
        # searches until the turns run out, the last one too long for its budget
        ["<search> Fidan Brovofei </search>", "<search> Zekrouv </search>", LONG],
        ["<answer> Zekrouv </answer>"],
    ],
}


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("hf") / "tiny-qwen2", demo_texts(DEMO))


@pytest.fixture(scope="module")
def setup(tmp_path_factory, qwen_dir, demo_env):
    """A prepared run (our files, veRL's config) and the scripted model."""
    from transformers import AutoTokenizer

    tmp = tmp_path_factory.mktemp("verl")
    cfg = run_config(qwen_dir, retriever={"kind": "demo", "topk": 2}, rollout={"max_response_length": 800})
    plan = prepare(cfg, tmp / "run", demo_env.url)
    plan.write_files()
    config = compose_config(plan.overrides + ["reward.num_workers=1"])
    tokenizer = AutoTokenizer.from_pretrained(str(qwen_dir))
    model = ScriptedModel(tokenizer, SCRIPTS, sorted(our_tokenizer(tokenizer).eos_ids))
    return types.SimpleNamespace(
        cfg=cfg,
        config=config,
        tokenizer=tokenizer,
        model=model,
        server=ScriptedLLMServer(model),
        env=EnvClient(demo_env.url),
        run_dir=tmp / "run",
    )


def gen_batch(s, n: int = 2):
    """veRL's batch for two prompts of our parquet, as the trainer hands it to the rollout (uid per prompt, × n)."""
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    ds = RLHFDataset(str(s.run_dir / "verl" / "train.parquet"), s.tokenizer, s.config.data)
    batch = DataProto.from_single_dict(collate_fn([ds[0], ds[1]]))
    batch.non_tensor_batch["uid"] = np.array(["uid-a", "uid-b"], dtype=object)
    return batch.repeat(repeat_times=n, interleave=True)


@pytest.fixture(scope="module")
def rollout(setup):
    """veRL's AgentLoopWorker over the scripted model, its reward loop worker calling our compute_score (both made in
    the event loop they run in, as in their Ray actors)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    async def run():
        reward_worker = RewardLoopWorker(setup.config)
        # TEST DOUBLE for a Ray actor handle: `.compute_score.remote(data)` on the real worker, in this process
        handle = types.SimpleNamespace(compute_score=types.SimpleNamespace(remote=reward_worker.compute_score))
        worker = AgentLoopWorker(setup.config, setup.server, reward_loop_worker_handles=[handle])
        out = await worker.generate_sequences(gen_batch(setup))
        searches = env_batchers(setup.env.url).retriever(setup.cfg.retriever.topk)
        setup.searched = (searches.items, searches.requests)  # what went through the worker's /retrieve coalescer
        return out

    out = asyncio.run(run())
    # veRL plays a group's samples concurrently, so which sample got which of its question's scripts depends on the
    # order their first calls reached the scripted server: put each group's rows in the order of their scripts.
    live = [c for c, _ in setup.model.live]
    rows = [row(out, i) for i in range(len(out))]
    first = {}
    group = [first.setdefault(tuple(r["prompt"]), i) for i, r in enumerate(rows)]
    played = [
        next(
            k
            for k, c in enumerate(live)
            if (r["prompt"] + r["ids"])[: len(c)] == c
            or c[: len(r["prompt"]) + len(r["ids"])] == r["prompt"] + r["ids"]
        )
        for r in rows
    ]
    out.reorder(torch.tensor(sorted(range(len(out)), key=lambda i: (group[i], played[i]))))
    return out


def row(out, i: int):
    P = out.batch["prompts"].shape[1]
    attn = out.batch["attention_mask"][i]
    L = int(attn[P:].sum())
    return {
        "prompt": out.batch["prompts"][i][attn[:P].bool()].tolist(),
        "ids": out.batch["responses"][i, :L].tolist(),
        "mask": out.batch["response_mask"][i, :L].tolist(),
        "lp": out.batch["rollout_log_probs"][i, :L].tolist(),
        "sas": out.non_tensor_batch["sas"][i],
    }


def spans(roles: list[str]) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for k, r in enumerate(roles):
        if out and out[-1][0] == r:
            out[-1] = (r, out[-1][1], k + 1)
        else:
            out.append((r, k, k + 1))
    return out


def test_the_agent_loop_plays_search_r1_token_by_token(setup, rollout):
    tok = setup.tokenizer
    s = setup.cfg
    rows = [row(rollout, i) for i in range(4)]
    # the prompt: the chat template over Search-R1's prompt, as the builtin trainer renders it
    for r, ex in zip(rows, [EXAMPLES[0], EXAMPLES[0], EXAMPLES[1], EXAMPLES[1]]):
        text = tok.apply_chat_template(
            [{"role": "user", "content": render_prompt(s.data.prompt_template, ex.question)}],
            add_generation_prompt=True,
            tokenize=False,
        )
        assert r["prompt"] == tok.encode(text, add_special_tokens=False)
    # every turn generated from the context as it was: prompt + the response's ids so far (never re-tokenised)
    for context, _budget in setup.model.calls:
        r = next(
            r
            for r in rows
            if context[: len(r["prompt"])] == r["prompt"] and (r["prompt"] + r["ids"])[: len(context)] == context
        )
        assert r is not None
    # the stops and budget went to the server: Search-R1's stop strings, the end-of-turn ids, the turn budget
    assert all(
        p["stop"] == ["</search>", "</answer>"] and p["stop_token_ids"] and p["max_tokens"] <= s.rollout.max_turn_tokens
        for p in setup.server.params
    )

    a = rows[0]  # search, search (stopped at </search>), answer
    roles = a["sas"]["roles"]
    assert [r for r, _, _ in spans(roles)] == ["generated", "retrieved", "generated", "retrieved", "generated"]
    assert a["mask"] == [1 if r == "generated" else 0 for r in roles]
    (_, g0, g1), (_, r0, r1), (_, g2, g3), _, _ = spans(roles)
    turn1 = tok.decode(a["ids"][g2:g3])
    assert turn1.endswith("</search>") and "more text" not in turn1
    hits = setup.env.retrieve(["Kriltre Fehan"], 2)[0]
    obs = tok.decode(a["ids"][r0:r1])
    assert (
        a["ids"][r0:r1] == tok.encode(observation(hits), add_special_tokens=False)[: setup.cfg.rollout.max_obs_length]
    )
    assert obs.startswith("\n\n<information>Doc 1(Title: ") and hits[0]["document"]["contents"].split("\n")[0] in obs
    # the sampler's log-probs
    assert a["lp"][g0:g1] == [-(j + 1) / 64 for j in range(g1 - g0)] and set(a["lp"][r0:r1]) == {0.0}
    assert a["sas"]["finish"] == "answer" and a["sas"]["searches"] == 2 and a["sas"]["turns"] == 3
    assert [x["query"] for x in a["sas"]["retrieval"]] == ["Kriltre Fehan", "Torneind river"]

    b = rows[1]  # no action (ended by <|im_end|>, which stays in the response), feedback, answer
    (_, _, f0), (_, _, f1), _ = spans(b["sas"]["roles"])
    assert [r for r, _, _ in spans(b["sas"]["roles"])] == ["generated", "feedback", "generated"]
    assert b["ids"][f0 - 1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.decode(b["ids"][f0:f1]) == INVALID_ACTION_FEEDBACK and b["sas"]["finish"] == "answer"

    c = rows[2]  # out of turns: the forced final turn is cut at the turn budget, no observation after it
    assert (
        c["sas"]["finish"] == "max_turns" and c["sas"]["turns"] == s.rollout.max_turns + 1 and c["sas"]["searches"] == 2
    )
    assert (
        spans(c["sas"]["roles"])[-1][0] == "generated"
        and spans(c["sas"]["roles"])[-1][2] - spans(c["sas"]["roles"])[-1][1] == s.rollout.max_turn_tokens
    )

    d = rows[3]
    assert set(d["sas"]["roles"]) == {"generated"} and d["sas"]["finish"] == "answer"


def test_the_same_scripts_through_the_builtin_rollout_give_the_same_tokens(setup, rollout, demo_env):
    """One protocol: veRL's agent loop and the builtin trainer's run_rollouts produce identical ids, roles, masks."""
    tok = our_tokenizer(setup.tokenizer)
    rows = [row(rollout, i) for i in range(4)]
    model = ScriptedModel(setup.tokenizer, SCRIPTS, sorted(tok.eos_ids))
    r = setup.cfg.rollout
    trajs = run_rollouts(
        EXAMPLES,
        [(tok.decode(rows[0]["prompt"]), rows[0]["prompt"]), (tok.decode(rows[2]["prompt"]), rows[2]["prompt"])],
        2,
        ScriptedTurnGenerator(model),
        tok,
        EnvClient(demo_env.url),
        RolloutSettings(r.max_turns, r.max_turn_tokens, r.max_response_length, r.max_obs_length, 2),
    )
    for t, x in zip(trajs, rows):
        assert (
            t.ids == x["ids"]
            and t.roles == x["sas"]["roles"]
            and t.finish == x["sas"]["finish"]
            and t.response == x["sas"]["response"]
        )
        assert t.spans == x["sas"]["spans"]  # who wrote what, for the reward (issue 40)


def test_the_reward_goes_through_veRLs_reward_loop_to_our_reward_module(setup, rollout):
    scores = rollout.batch["rm_scores"].sum(-1).tolist()
    # builtin:em on the real server: the golden answer, a wrong one, none, the golden
    assert scores == [
        1.0,
        0.0,
        0.0,
        1.0,
    ]
    detail = [json.loads(x) for x in rollout.non_tensor_batch["sas_reward"]]
    assert [d["reward"] for d in detail] == [d["metrics"]["em"] for d in detail] == scores


def test_compute_score_batches_concurrent_calls_into_one_request(setup):
    items = [(EXAMPLES[i % 2], f"<answer> {EXAMPLES[i % 2].golden[0] if i % 3 else 'no'} </answer>") for i in range(6)]

    async def score_all():
        b = batcher(setup.env.url)
        before = b.requests
        out = await asyncio.gather(
            *[
                compute_score(
                    ex.data_source, resp, {"target": list(ex.golden)}, {"question": ex.question}, env_url=setup.env.url
                )
                for ex, resp in items
            ]
        )
        return out, b.requests - before

    out, requests = asyncio.run(score_all())
    assert requests == 1
    assert [o["score"] for o in out] == [0.0 if i % 3 == 0 else 1.0 for i in range(6)]  # each item its own result


def test_a_workers_concurrent_searches_go_out_as_one_retrieve_request(setup):
    queries = ["Kriltre Fehan", "Torneind river", "Zekrouv", "Fidan Brovofei", "Kriltre Fehan"]

    async def search_all():
        b = env_batchers(setup.env.url)
        out = await asyncio.gather(*[b.retrieve([q], 2) for q in queries])
        return out, b.retriever(2).requests

    out, requests = asyncio.run(search_all())
    assert requests == 1
    assert [o[0] for o in out] == setup.env.retrieve(queries, 2)  # each query its own hits, in its caller's order


def test_the_agent_loops_searches_went_through_the_coalescer(setup, rollout):
    searched, requests = setup.searched
    assert searched == sum(int(s["searches"]) for s in rollout.non_tensor_batch["sas"]) == 4
    assert 1 <= requests <= searched


def training_batch(setup, rollout):
    """The batch as RayPPOTrainer.fit has it when it logs rollout data: the prompts' batch (uid, data_source,
    reward_model, extra_info…) joined with veRL's rollout output, plus the tensors its later phases add (here
    synthetic, as no policy runs: old and reference log-probs, values, advantages)."""
    from verl import DataProto

    rollout = gen_batch(setup).union(rollout)
    B, R = rollout.batch["responses"].shape
    g = torch.Generator().manual_seed(0)
    extra = {
        k: torch.randn(B, R, generator=g) * rollout.batch["response_mask"]
        for k in ("old_log_probs", "ref_log_prob", "values", "advantages")
    }
    extra["token_level_scores"] = rollout.batch["rm_scores"].clone()
    batch = rollout.union(DataProto.from_single_dict(extra))
    return batch


def jsonl_config(setup) -> dict:
    """The run config with train.record.format "jsonl": the records as the JSONL has them (numbers to 6 decimals)."""
    cfg = dict(setup.cfg)
    return {**cfg, "train": {**(cfg.get("train") or {}), "record": {"format": "jsonl"}}}


def recorded(rec: StepRecorder, path: Path) -> list[dict]:
    """What the recorder's writer thread wrote (a JSONL file or a token-store step)."""
    assert rec.flush(60)
    return lines(path)


def test_the_recorder_writes_records_that_validate_and_pass_the_mask_audit(setup, rollout, tmp_path):
    batch = training_batch(setup, rollout)
    rec = StepRecorder(tmp_path / "run", jsonl_config(setup), total_steps=3, tokenizer=setup.tokenizer)
    rec.rollouts(batch, 1)
    records = recorded(rec, tmp_path / "run" / "rollouts" / "step-000001.jsonl")
    assert [(r["group"], r["sample"]) for r in records] == [
        ("train:1:0", 0),
        ("train:1:0", 1),
        ("train:1:1", 0),
        ("train:1:1", 1),
    ]
    for i, r in enumerate(records):
        audit_rollout(r)  # schema, lengths, loss_mask 1 exactly on generated tokens, prompt first
        t, x = r["tokens"], row(rollout, i)
        P = len(x["prompt"])
        assert (
            t["ids"] == x["prompt"] + x["ids"]
            and t["loss_mask"][P:] == x["mask"]
            and t["role"][P:] == x["sas"]["roles"]
        )
        assert t["rollout_logprob"][P:] == [
            round(v, 6) if role == "generated" else None for v, role in zip(x["lp"], x["sas"]["roles"])
        ]
        for ours, theirs in (
            ("logprob", "old_log_probs"),
            ("ref_logprob", "ref_log_prob"),
            ("value", "values"),
            ("advantage", "advantages"),
        ):
            assert t[ours] == [None] * P + [
                round(float(v), 6) if m else None for v, m in zip(batch.batch[theirs][i, : len(x["ids"])], x["mask"])
            ]
        assert (
            r["reward"] == float(batch.batch["token_level_scores"][i].sum())
            and r["question"] == EXAMPLES[i // 2].question
        )
        assert (
            r["dialect"] == "searchr1"
            and r["finish"] == x["sas"]["finish"]
            and r["meta"].get("retrieval", []) == x["sas"]["retrieval"]
        )
    # the token store (the default format) holds the same records, numbers as float32
    store = StepRecorder(tmp_path / "store" / "run", dict(setup.cfg), total_steps=3, tokenizer=setup.tokenizer)
    store.rollouts(batch, 1)
    for a, b in zip(recorded(store, tmp_path / "store" / "run" / "rollouts" / "step-000001.jsonl"), records):
        assert (
            a["tokens"]["ids"] == b["tokens"]["ids"]
            and a["tokens"]["role"] == b["tokens"]["role"]
            and a["tokens"]["loss_mask"] == b["tokens"]["loss_mask"]
        )
        for k, x in b["tokens"].items():
            if k not in ("text", "ids", "role", "loss_mask"):
                # float32 (the store) against 6 decimals (JSONL): half a unit of the 6th decimal plus float32's rounding,
                # which for a log-prob past 8 is itself ~1e-6 (issue 48: round-off compared at its scale)
                assert all(
                    (p is None) == (q is None) and (p is None or abs(p - q) <= 5e-7 + abs(q) * 2**-23)
                    for p, q in zip(a["tokens"][k], x)
                ), k
        assert {k: v for k, v in a.items() if k != "tokens"} == {k: v for k, v in b.items() if k != "tokens"}
    # veRL's metrics for the step (Tracking.log) join ours: metrics.jsonl, a metrics event, run.json's step
    rec.metrics(
        1, {"critic/score/mean": np.float64(0.5), "actor/pg_clipfrac": 0.1, "timing_s/step": 2.0, "not a number": "x"}
    )
    m = lines(tmp_path / "run" / "metrics.jsonl")[-1]
    jsonschema.validate(m, SCHEMAS["metrics"])
    assert (
        m["critic/score/mean"] == 0.5
        and m["mask/leaked_tokens"] == 0
        and m["env/number_of_valid_search"] == 1.0
        and "not a number" not in m
    )
    events = lines(tmp_path / "run" / "events.jsonl")
    for e in events:
        jsonschema.validate(e, SCHEMAS["event"])
    assert events[-1]["event"] == "metrics" and events[-1]["metrics"]["critic/score/mean"] == 0.5
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    jsonschema.validate(run, SCHEMAS["run"])
    assert run["step"] == 1 and run["engine"] == "verl" and run["versions"]["verl"] == "0.9.1"


def test_a_planted_mask_disagreement_is_caught(setup, rollout, tmp_path):
    batch = training_batch(setup, rollout)
    roles = list(rollout.non_tensor_batch["sas"][0]["roles"])
    k = roles.index("retrieved")
    batch.batch["response_mask"][0, k] = 1  # as if veRL had trained on a retrieved token
    rec = StepRecorder(tmp_path / "run", dict(setup.cfg), total_steps=3, tokenizer=setup.tokenizer)
    rec.rollouts(batch, 1)
    records = recorded(rec, tmp_path / "run" / "rollouts" / "step-000001.jsonl")
    assert rec.pending[1]["record/flagged/leak"] == 1  # the in-run check flagged it (a leak): always recorded
    with pytest.raises(AssertionError):
        audit_rollout(records[0])
    for r in records[1:]:
        audit_rollout(r)
    warnings = [e for e in lines(tmp_path / "run" / "events.jsonl") if e["event"] == "warning"]
    assert warnings and warnings[0]["leaks"] == 1 and records[0]["id"] in warnings[0]["message"]
    rec.metrics(1, {})
    assert lines(tmp_path / "run" / "metrics.jsonl")[-1]["mask/leaked_tokens"] == 1


def test_validation_batches_padded_by_veRL_are_recorded_once_per_sample(setup, rollout, tmp_path):
    from verl import DataProto

    inputs = gen_batch(setup)
    padded = DataProto.concat([rollout, rollout[:2]])  # veRL pads a validation batch with its first rows
    padded_inputs = DataProto.concat([inputs, inputs[:2]])
    rec = StepRecorder(tmp_path / "run", dict(setup.cfg), total_steps=3, tokenizer=setup.tokenizer)
    rec.rollouts(padded, 0, "val", inputs=padded_inputs.non_tensor_batch, max_per_group=2)
    records = recorded(rec, tmp_path / "run" / "rollouts" / "val-step-000000.jsonl")
    assert len(records) == 4 and all(r["split"] == "val" for r in records)
    assert (tmp_path / "run" / "rollouts" / "val-step-000000" / "rollouts.parquet").exists()
    evaluation = [e for e in lines(tmp_path / "run" / "events.jsonl") if e["event"] == "eval"][0]["metrics"]
    assert evaluation["val/em"] == 0.5
    # The dataset's meta (hops, kind, bridge) went through veRL's parquet and back: the held-out metrics by hops that
    # the builtin trainer writes. Q0 (two hops, bridge Krotous): searched Kriltre Fehan then Torneind river and
    # answered (the second query names the river, not the town), or answered wrong without searching; Q1 (one hop):
    # searched twice and ran out of turns, or answered right without searching.
    assert [r["meta"].get("hops") for r in records] == [2, 2, 1, 1] and records[0]["meta"]["bridge"] == ["Krotous"]
    assert evaluation["val/em_by_hops/2"] == 0.5 and evaluation["val/searches_by_hops/2"] == 1.0
    assert evaluation["val/bridge_searched_by_hops/2"] == 0.0 and "val/bridge_searched_by_hops/1" not in evaluation
    assert evaluation["val/em_by_hops/1"] == 0.5 and evaluation["val/searches_by_hops/1"] == 1.0
    assert {k for k in evaluation if k.startswith("val/em_by_kind/")} == {
        "val/em_by_kind/birthplace",
        "val/em_by_kind/birthplace-river",
    }


TOOL_SCRIPTS = {
    Q0: [
        [
            '<tool_call>\n{"name": "search", "arguments": {"query": "Kriltre Fehan"}}\n</tool_call><|im_end|>',
            f"<answer> {EXAMPLES[0].golden[0]} </answer><|im_end|>",
        ],
        [
            '<tool_call>\n{"name": "lookup", "arguments": {"query": "Kriltre Fehan"}}\n</tool_call><|im_end|>',
            "<answer> nowhere </answer><|im_end|>",
        ],
    ],
}


def test_the_tool_call_dialect_runs_veRLs_tool_agent_loop_with_our_search_tool_and_roles(setup, tmp_path, demo_env):
    """veRL's ToolAgentLoop (hermes calls) with our SearchTool on the real /retrieve; our subclass adds the roles:
    the call generated, the tool turn's template markers prompt, the passages retrieved, an error reply feedback."""
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from search_agent_trainer.engines.verl.recorder import mask_leaks, records_from_batch
    from search_agent_trainer.env_client import passages_to_string

    cfg = json.loads(json.dumps(setup.cfg))
    cfg["rollout"]["dialect"] = "toolcall"
    plan = prepare(cfg, tmp_path / "run", demo_env.url)
    plan.write_files()
    config = compose_config(plan.overrides)
    model = ScriptedModel(setup.tokenizer, TOOL_SCRIPTS, sorted(our_tokenizer(setup.tokenizer).eos_ids))
    ds = RLHFDataset(str(tmp_path / "run" / "verl" / "train.parquet"), setup.tokenizer, config.data)
    batch = DataProto.from_single_dict(collate_fn([ds[0]]))
    batch.non_tensor_batch["uid"] = np.array(["uid-t"], dtype=object)
    batch = batch.repeat(repeat_times=2, interleave=True)

    async def run():
        return await AgentLoopWorker(config, ScriptedLLMServer(model)).generate_sequences(batch)

    out = batch.union(asyncio.run(run()))
    tok = setup.tokenizer
    hits = setup.env.retrieve(["Kriltre Fehan"], 2)[0]
    a, b = row(out, 0), row(out, 1)
    assert [r for r, _, _ in spans(a["sas"]["roles"])] == ["generated", "prompt", "retrieved", "prompt", "generated"]
    (_, _, g), (_, _, p), (_, _, r), _, _ = spans(a["sas"]["roles"])
    assert tok.decode(a["ids"][:g]).startswith("<tool_call>") and a["ids"][g - 1] == tok.convert_tokens_to_ids(
        "<|im_end|>"
    )
    assert tok.decode(a["ids"][p:r]).strip() == passages_to_string(hits).strip()  # Search-R1's document lines
    assert a["mask"] == [1 if x == "generated" else 0 for x in a["sas"]["roles"]]
    assert (
        a["sas"]["finish"] == "answer"
        and a["sas"]["searches"] == 1
        and a["sas"]["retrieval"][0]["query"] == "Kriltre Fehan"
        and a["sas"]["dialect"] == "toolcall"
    )
    assert [r for r, _, _ in spans(b["sas"]["roles"])] == ["generated", "prompt", "feedback", "prompt", "generated"]
    fb = spans(b["sas"]["roles"])[2]
    assert (
        tok.decode(b["ids"][fb[1] : fb[2]]).strip().startswith("Unknown function 'lookup'")
        and b["sas"]["searches"] == 0
    )
    # Who wrote what (issue 40): the response piece by piece, one per run of one role, tiles the text.
    for x in (a, b):
        assert [r for r, _n in x["sas"]["spans"]["runs"]] == [r for r, _, _ in spans(x["sas"]["roles"])]
        assert sum(n for _r, n in x["sas"]["spans"]["runs"]) == len(x["sas"]["response"])
    records, _ = records_from_batch(out, tok, run_id="t", step=1, split="train")
    for rec in records:
        jsonschema.validate(rec, SCHEMAS["rollout"])
        assert rec["dialect"] == "toolcall"
        assert rec["spans"]["v"] == 1 and sum(n for _r, n in rec["spans"]["runs"]) == len(rec["response"])
    assert mask_leaks(records) == (0, [])


def test_the_recording_trainer_hooks_write_the_run_and_stop_after_a_checkpoint(setup, rollout, tmp_path, monkeypatch):
    """RecordingTrainer's hooks in the order RayPPOTrainer.fit calls them (ray_trainer.py, 0.9.1); the GPU parts
    (workers, checkpoints, the loop itself) are a TEST DOUBLE. A stop file ends the run after the step, checkpointed."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from search_agent_trainer.engines.verl import STOP_FILE
    from search_agent_trainer.engines.verl.recorder import RecordingTrainer

    batch = training_batch(setup, rollout)
    saved: list[int] = []

    def fit_double(self):  # TEST DOUBLE for RayPPOTrainer.fit: its calls into the hooks, no GPU work
        import verl.utils.tracking as tracking

        logger = tracking.Tracking(project_name="p", experiment_name="e", default_backend=[])
        self.global_steps = 0
        self._load_checkpoint()
        self.global_steps = 1
        while True:
            self._get_gen_batch(batch)
            self._compute_old_log_prob(batch)
            if self.global_steps % self.config.trainer.save_freq == 0:
                self._save_checkpoint()
            self._log_rollout_data(batch, {}, {}, self.config.trainer.rollout_data_dir)
            logger.log(data={"critic/score/mean": 0.5, "actor/entropy": 1.25}, step=self.global_steps)
            if self.global_steps >= self.total_training_steps:
                return
            self.global_steps += 1

    monkeypatch.setattr(RayPPOTrainer, "fit", fit_double)
    monkeypatch.setattr(RayPPOTrainer, "_load_checkpoint", lambda self: 0)
    monkeypatch.setattr(RayPPOTrainer, "_save_checkpoint", lambda self: saved.append(self.global_steps))
    monkeypatch.setattr(RayPPOTrainer, "_get_gen_batch", lambda self, b: b)
    monkeypatch.setattr(RayPPOTrainer, "_compute_old_log_prob", lambda self, b: (b, 0.0))
    run_dir = tmp_path / "run"
    (tmp_path / "cfg.json").write_text(json.dumps(setup.cfg))

    def trainer(total: int) -> RecordingTrainer:
        t = RecordingTrainer.__new__(RecordingTrainer)  # RayPPOTrainer.__init__ builds datasets and GPU worker groups
        t.config = OmegaConf.create(
            {
                "sas": {"run_dir": str(run_dir), "config": str(tmp_path / "cfg.json")},
                "trainer": {
                    "save_freq": 2,
                    "default_local_dir": str(run_dir / "checkpoints" / "verl"),
                    "rollout_data_dir": str(run_dir / "rollouts"),
                },
                "actor_rollout_ref": {"model": {"path": "m"}},
            }
        )
        t.tokenizer, t.total_training_steps, t.train_dataset, t.val_dataset = setup.tokenizer, total, [0] * 8, None
        RecordingTrainer.__init__.__wrapped__(t) if hasattr(RecordingTrainer.__init__, "__wrapped__") else None
        t.run_dir = run_dir
        from search_agent_trainer.engines.verl.recorder import StepRecorder

        t.recorder = StepRecorder(run_dir, setup.cfg, total, setup.tokenizer)
        t._validating, t._saved_step = False, -1
        return t

    trainer(3).fit()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "finished" and run["step"] == 3 and saved == [2]
    events = lines(run_dir / "events.jsonl")
    for e in events:
        jsonschema.validate(e, SCHEMAS["event"])
    kinds = [e["event"] for e in events]
    assert (
        kinds[0] == "started"
        and kinds[-1] == "finished"
        and kinds.count("metrics") == 3
        and kinds.count("checkpoint") == 1
    )
    assert [(e["step"], e["phase"]) for e in events if e["event"] == "progress"][:2] == [(1, "rollout"), (1, "update")]
    metrics = lines(run_dir / "metrics.jsonl")
    assert (
        [m["step"] for m in metrics] == [1, 2, 3]
        and metrics[0]["critic/score/mean"] == 0.5
        and metrics[0]["mask/generated_tokens"] > 0
    )
    # the token store's steps
    assert sorted(p.name for p in (run_dir / "rollouts").iterdir()) == [
        "step-000001",
        "step-000002",
        "step-000003",
    ]
    assert json.loads((run_dir / "run.json").read_text())["record"]["recorded"]["steps"] == 3

    # a stop asked for during step 1 of a new run: the step is recorded, a checkpoint saved, the run `stopped`
    saved.clear()
    (run_dir / STOP_FILE).write_text("signal")
    trainer(3).fit()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "stopped" and run["stop_reason"] == "signal" and saved == [1]
    assert lines(run_dir / "events.jsonl")[-1] == {
        **lines(run_dir / "events.jsonl")[-1],
        "event": "finished",
        "status": "stopped",
        "step": 1,
    }
