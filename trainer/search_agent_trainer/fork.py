"""Counterfactual replay (DESIGN §7, docs/fork.md): a recorded rollout forked at generation turn K, with the
observation before that turn as it was or edited (another query re-run against the retriever, or documents the user
wrote), and continued by the run's policy from a checkpoint.

The continuation is the protocol's own `rollout.play`, started from the recorded token ids (`recorded_prefix`: the
prompt and the turns before K, never re-tokenised text), driven by `rollout.play_all` with the trainer's generator,
later searches going to the env server (or another retriever) and the reward to the run's reward module (`/reward`).
Forking a greedy held-out rollout with nothing edited, from the checkpoint that produced it, gives it back token for
token: what a fork shows is what training would have produced.

    python -m search_agent_trainer.fork --run-dir runs/<id> --checkpoint runs/<id>/checkpoints/step-000002 --env-url URL

is the policy server: it loads the run's config and the checkpoint once, prints `{"event": "ready", …}` and answers
one JSON request per stdin line with one JSON line on stdout, until stdin closes (or the host dies):

    {"id": 1, "record": {…rollout record…}, "turn": K, "query"?: str, "documents"?: [str | {contents} | {title, text}],
     "samples"?: n, "greedy"?: bool, "retriever_url"?: str, "seed"?: int}
    → {"id": 1, "continuations": [{"response", "answer", "reward", "diverges_at", "tokens", "finish", "turns",
       "searches", "reward_parts", "retrieval"}]}   or   {"id": 1, "error": "…"}

`diverges_at` is the first token index (over the whole token array, prompt included) where the continuation differs
from the recorded rollout; null when they are the same. Turns count the generation turns from 1; the observation an
edit replaces is the one between turn K-1 and turn K (so K ≥ 2 for an edit). A `query` edit re-runs that search with
the new text (the policy's own tokens, which wrote the old query, are kept); `documents` replace its hits. The edited
observation is written exactly as the protocol writes one (`rollout.observe`): role `retrieved`, loss mask 0.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import torch

from . import cpu_env
from .checkpoint import STATE, load_trainable
from .config import Section, config_from_run_json
from .data import Example
from .dialect import ANSWER_RE, Dialect
from .env_client import EnvClient
from .generation import LMGenerator, auto_max_batch_tokens
from .policy import build_policy, compute_dtype
from .record.tokens import token_arrays
from .reward import reward_item
from .rollout import RolloutSettings, Trajectory, make_dialect, observe, play_all, take_turn


class ForkError(ValueError):
    """A fork request that cannot be served (the message says what is wrong with it)."""


def turn_runs(roles: list[str], P: int) -> list[tuple[int, int, bool]]:
    """The response (from token P) as runs (start, end, generated?): a generated run is one turn; the run after it is
    the environment's answer (retrieved / feedback tokens, and the chat template's markers in the tool-call dialect)."""
    runs: list[tuple[int, int, bool]] = []
    i = P
    while i < len(roles):
        gen = roles[i] == "generated"
        j = i
        while j < len(roles) and (roles[j] == "generated") == gen:
            j += 1
        runs.append((i, j, gen))
        i = j
    return runs


def documents_as_hits(documents: list[Any]) -> list[dict[str, Any]]:
    """The user's documents as retriever hits: a string (`Title\\ntext`, as a corpus' `contents`), `{contents}` or
    `{title, text}`."""
    hits = []
    for i, d in enumerate(documents):
        if isinstance(d, str):
            contents = d
        elif isinstance(d, dict) and isinstance(d.get("contents"), str):
            contents = d["contents"]
        elif isinstance(d, dict) and isinstance(d.get("text"), str):
            contents = f"{d.get('title', '')}\n{d['text']}"
        else:
            raise ForkError(f"documents[{i}]: expected a string, {{contents}} or {{title, text}}")
        hits.append(
            {
                "document": {
                    "id": str(d.get("id", f"edited-{i + 1}")) if isinstance(d, dict) else f"edited-{i + 1}",
                    "contents": contents,
                },
                "score": None,
            }
        )
    return hits


def recorded_prefix(
    record: dict[str, Any], turn: int, tok: Any, settings: RolloutSettings, dialect: Dialect
) -> tuple[Trajectory, int, tuple[int, int] | None]:
    """The trajectory as it stood before generation turn `turn` (from 1) of a recorded rollout: the prompt and the
    response tokens before that turn, with their roles and sampling log-probs, `turns`, `searches`, `valid_actions`
    and `retrieval` as the protocol had counted them (each recorded generated turn goes through the protocol's own
    `take_turn`; the observations after it are the recorded tokens). Also the token index where turn `turn` starts
    and the (start, end) of the observation just before it (None for turn 1)."""
    t = record.get("tokens") or {}
    ids, roles = t.get("ids"), t.get("role")
    if not isinstance(ids, list) or not isinstance(roles, list) or len(ids) != len(roles) or not ids:
        raise ForkError(
            f"rollout {record.get('id')}: no token ids and roles recorded (tokens.ids, tokens.role); only rollouts recorded with tokens can be forked"
        )
    if "generated" not in roles:
        raise ForkError(f"rollout {record.get('id')}: no generated tokens")
    P = roles.index("generated")
    runs = turn_runs(roles, P)
    turns = [r for r in runs if r[2]]
    if not 1 <= turn <= len(turns):
        raise ForkError(
            f"--turn {turn}: rollout {record.get('id')} has {len(turns)} generation turns (1..{len(turns)})"
        )
    cut = turns[turn - 1][0]
    obs = next(((s, e) for s, e, g in runs if e == cut and not g), None) if turn > 1 else None
    response = record.get("response") or ""
    logprobs = t.get("rollout_logprob") or [None] * len(ids)
    ex = Example(
        str((record.get("meta") or {}).get("example_id", record.get("id", ""))),
        record.get("question") or "",
        tuple(record.get("golden") or []),
        record.get("data_source") or "",
    )
    traj = Trajectory(
        ex, 0, 0, record.get("prompt") or "", list(ids[:P]), dialect=dialect.name, strict_actions=dialect.strict
    )
    pos = 0
    for k, (s, e, gen) in enumerate(runs):
        if s >= cut:
            break
        piece = dialect.text(tok, ids[s:e])
        if not response.startswith(piece, pos):
            # an observation whose text does not decode back exactly: it ends where the next turn's text starts
            nxt = runs[k + 1]
            at = response.find(dialect.text(tok, ids[nxt[0] : nxt[1]]), pos) if not gen else -1
            if at < 0:
                raise ForkError(
                    f"rollout {record.get('id')}: its response text does not match its tokens at token {s} (was it recorded with another tokenizer?)"
                )
            piece = response[pos:at]
        pos += len(piece)
        if gen:
            action = take_turn(traj, ids[s:e], logprobs[s:e], False, tok, settings, dialect)
            # observe's count: the observation is the recorded one
            traj.searches += len(action.queries) if action else 0
        else:
            traj.append(ids[s:e], roles[s], piece)
    traj.retrieval = list(((record.get("meta") or {}).get("retrieval") or [])[: traj.searches])
    return traj, cut, obs


def with_edited_observation(
    traj: Trajectory,
    obs: tuple[int, int] | None,
    query: str | None,
    documents: list[Any] | None,
    env: EnvClient,
    tok: Any,
    s: RolloutSettings,
    dialect: Dialect,
) -> None:
    """Replaces the observation before the fork with the answer to an edited search (`query`: re-retrieved) or to the
    user's `documents`, written by the protocol's `observe` (role `retrieved`, loss mask 0); other calls of that turn
    are answered again with their recorded queries."""
    if obs is None:
        raise ForkError(
            "an edit replaces the observation before turn K: there is none before turn 1 (use --turn 2 or later)"
        )
    # turn K-1's text (the prefix's pieces are its runs: …, turn K-1, observation)
    action = dialect.parse(traj.pieces[-2])
    if not action.queries:
        raise ForkError(
            f"turn {traj.turns} made no search: there are no documents before turn {traj.turns + 1} to edit"
        )
    # back to the end of turn K-1's generation
    keep = obs[0] - len(traj.prompt_ids)
    del traj.ids[keep:], traj.roles[keep:], traj.sample_logprobs[keep:], traj.pieces[-1], traj.piece_roles[-1]
    traj.searches -= len(action.queries)
    traj.retrieval = traj.retrieval[: traj.searches]
    queries = list(action.queries)
    if query is not None:
        queries[0] = query
        for c in action.calls:
            if c.query is not None:
                c.query = query
                break
    hits = env.retrieve(queries, s.topk)
    if documents is not None:
        hits[0] = documents_as_hits(documents)
    observe(traj, action, hits, tok, s, {"truncated": 0, "longest": 0}, dialect)


def diverges_at(a: list[int], b: list[int]) -> int | None:
    """The first index where two token sequences differ (the shorter one's length when one extends the other); None
    when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def final_answer(t: Trajectory, tok: Any, dialect: Dialect) -> str | None:
    """The last `<answer>…</answer>` the policy wrote, stripped (None when it gave none): generated turns only (the
    invalid-action message quotes the tags)."""
    found = [m for s, e, gen in turn_runs(t.roles, 0) if gen for m in ANSWER_RE.findall(dialect.text(tok, t.ids[s:e]))]
    return found[-1].strip() if found else None


def load_checkpoint_policy(cfg: Section, ckpt: Path, device: torch.device) -> tuple[Any, Any]:
    """A run's policy and tokenizer at a checkpoint: the builtin trainer's (trainable.pt over the run's model: the tiny
    policy, an HF model, a LoRA adapter), or a Hugging Face model directory (`config.json` in the checkpoint or its
    `model/`). Shared by the policy server and replay_step."""
    if (ckpt / "trainable.pt").exists():
        tok_file = ckpt / "tokenizer.json"
        policy, tok = build_policy(
            cfg, [], device, tokenizer_file=str(tok_file) if cfg.model.kind == "tiny" and tok_file.exists() else None
        )
        load_trainable(policy, ckpt / "trainable.pt")
        return policy, tok
    hf = next((d for d in (ckpt, ckpt / "model", ckpt / "huggingface") if (d / "config.json").exists()), None)
    if hf is None:
        raise ForkError(
            f"{ckpt}: neither a checkpoint of the builtin trainer (trainable.pt) nor a Hugging Face model directory (config.json)"
        )
    hf_cfg = Section(json.loads(json.dumps(cfg)))
    hf_cfg["model"].update({"kind": "hf", "path": str(hf), "lora": None, "random_init": False})
    return build_policy(hf_cfg, [], device)


class PolicyServer:
    """A run's policy at one checkpoint, loaded once and forked from many times."""

    def __init__(self, run_dir: str | Path, checkpoint: str | Path, env_url: str, device: str | None = None):
        self.run_dir = Path(run_dir)
        run_json = self.run_dir / "run.json"
        try:
            saved = json.loads(run_json.read_text(encoding="utf-8"))["config"]
        except (FileNotFoundError, KeyError, json.JSONDecodeError) as e:
            raise ForkError(f"{run_json}: cannot read the run's config ({e})") from None
        self.cfg: Section = config_from_run_json(saved, self.run_dir, source=str(run_json))
        ckpt = Path(checkpoint)
        if not ckpt.is_absolute() and not ckpt.exists():
            ckpt = self.run_dir / "checkpoints" / str(checkpoint)
        self.checkpoint = ckpt
        want = device or self.cfg.model.device
        self.device = torch.device(
            "cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu"
        )
        self.policy, self.tok = self._load(ckpt)
        self.policy.eval()
        self.dialect = make_dialect(
            self.cfg.rollout.dialect, self.tok, self.cfg.rollout.search_tool, self.cfg.rollout.strict_actions
        )
        self.stops = self.dialect.stops(self.tok)
        state = json.loads((ckpt / STATE).read_text(encoding="utf-8")) if (ckpt / STATE).exists() else None
        # the run's own numerics where its checkpoint records them (model.dtype fastest: what its machine chose)
        chosen = (state or {}).get("numerics", {}).get("dtype") if self.cfg.model.dtype == "fastest" else None
        self.dtype = (
            {"bf16": torch.bfloat16, "fp32": None}[chosen]
            if chosen in ("bf16", "fp32")
            else compute_dtype(self.cfg, self.device)
        )
        self.max_batch_tokens = self.cfg.rollout.max_batch_tokens or auto_max_batch_tokens(
            self.policy, self.device, self.dtype
        )
        self.env = EnvClient(env_url)
        self.step = int(state.get("step", 0)) if state is not None else None

    def _load(self, ckpt: Path) -> tuple[Any, Any]:
        return load_checkpoint_policy(self.cfg, ckpt, self.device)

    def _generator(self, greedy: bool, seed: int) -> LMGenerator:
        g = torch.Generator(device=self.device)
        g.manual_seed(seed)
        r = self.cfg.rollout
        autocast = (lambda: torch.autocast(self.device.type, dtype=self.dtype)) if self.dtype is not None else None
        return LMGenerator(
            self.policy,
            self.tok,
            0.0 if greedy else r.temperature,
            r.top_p,
            self.device,
            self.stops,
            g,
            autocast,
            self.max_batch_tokens,
            static_decode=bool(self.cfg.rollout.cuda_graphs) and self.device.type == "cuda",
        )

    def _settings(self, generator: LMGenerator, context: int, n: int) -> RolloutSettings:
        return RolloutSettings.of(self.cfg, generator.wave_size(context, self.cfg.rollout.max_response_length, n))

    @torch.no_grad()
    def fork(
        self,
        record: dict[str, Any],
        turn: int,
        query: str | None = None,
        documents: list[Any] | None = None,
        samples: int = 1,
        greedy: bool = True,
        retriever_url: str | None = None,
        seed: int = 0,
    ) -> list[dict[str, Any]]:
        if query is not None and documents is not None:
            raise ForkError("give a query or documents, not both")
        n = 1 if greedy else max(1, int(samples))
        retriever = EnvClient(retriever_url) if retriever_url else self.env
        gen = self._generator(greedy, seed)
        roles = (record.get("tokens") or {}).get("role") or []
        # the prompt's length
        s = self._settings(gen, roles.index("generated") if "generated" in roles else len(roles), n)
        prefix, _cut, obs = recorded_prefix(record, turn, self.tok, s, self.dialect)
        if query is not None or documents is not None:
            with_edited_observation(prefix, obs, query, documents, retriever, self.tok, s, self.dialect)
        trajs = []
        for k in range(n):
            t = copy.deepcopy(prefix)
            t.sample = k
            if len(t.ids) >= s.max_response_length:
                t.finish = "length"
            trajs.append(t)
        play_all(trajs, gen, self.tok, retriever, s, dialect=self.dialect)
        gen.release()
        results = self.env.reward([reward_item(t, self.cfg.rollout.search_tool) for t in trajs])
        recorded = list(record["tokens"]["ids"])
        out = []
        for t, res in zip(trajs, results):
            tokens = token_arrays(self.tok, t)
            out.append(
                {
                    "response": t.response,
                    "answer": final_answer(t, self.tok, self.dialect),
                    "reward": res.get("reward"),
                    "diverges_at": diverges_at(tokens["ids"], recorded),
                    "tokens": tokens,
                    "finish": t.finish,
                    "turns": t.turns,
                    "searches": t.searches,
                    "reward_parts": res.get("parts") or {},
                    "retrieval": t.retrieval,
                    **({"reward_error": res["error"]} if res.get("error") else {}),
                }
            )
        return out

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request of the stdio protocol → its reply (an error reply for a bad request; the server goes on)."""
        rid = request.get("id")
        try:
            if not isinstance(request.get("record"), dict):
                raise ForkError("record: expected the rollout record (an object)")
            turn = request.get("turn")
            if not isinstance(turn, int) or isinstance(turn, bool):
                raise ForkError("turn: expected an integer (generation turns count from 1)")
            docs = request.get("documents")
            if docs is not None and not isinstance(docs, list):
                raise ForkError("documents: expected a list")
            conts = self.fork(
                request["record"],
                turn,
                request.get("query"),
                docs,
                int(request.get("samples") or 1),
                bool(request.get("greedy", True)),
                request.get("retriever_url"),
                int(request.get("seed") or 0),
            )
            return {"id": rid, "continuations": conts}
        except Exception as e:  # noqa: BLE001 - a bad request is answered, the server keeps serving
            return {"id": rid, "error": f"{type(e).__name__}: {e}" if not isinstance(e, ForkError) else str(e)}


def serve(server: PolicyServer, stdin: TextIO, stdout: TextIO) -> None:
    """The stdio protocol: one request per line, one reply per line, until stdin closes. A line that is not JSON gets
    an error reply naming its line number."""
    for n, line in enumerate(stdin, 1):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("expected an object")
        except ValueError as e:
            reply: dict[str, Any] = {"id": None, "error": f"stdin line {n}: not a JSON request ({e})"}
        else:
            reply = server.answer(request)
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


def main(argv: list[str] | None = None) -> int:
    cpu_env.apply()
    parser = argparse.ArgumentParser(
        prog="python -m search_agent_trainer.fork",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-dir", required=True, help="the run directory (its run.json holds the config)")
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a checkpoint directory, or its name under <run-dir>/checkpoints (step-NNNNNN)",
    )
    parser.add_argument(
        "--env-url",
        required=True,
        help="the env server (its /reward is the run's reward; /retrieve serves later searches)",
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: the run's model.device")
    args = parser.parse_args(argv)
    from .watchdog import watch_parent

    watch_parent(lambda _pid: os._exit(0))  # the host has gone (even while the model loads): nothing is left to answer
    try:
        server = PolicyServer(args.run_dir, args.checkpoint, args.env_url, args.device)
    except Exception as e:  # noqa: BLE001 - reported as the protocol's error event
        print(
            json.dumps(
                {"event": "error", "message": f"{type(e).__name__}: {e}" if not isinstance(e, ForkError) else str(e)}
            ),
            flush=True,
        )
        return 2
    print(
        json.dumps(
            {
                "event": "ready",
                "checkpoint": str(server.checkpoint),
                "step": server.step,
                "model": server.cfg.model.kind,
                "device": str(server.device),
            }
        ),
        flush=True,
    )
    serve(server, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
