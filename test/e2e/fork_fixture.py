"""The fork e2e's rollout to fork: a held-out rollout of a tiny run whose first turn searched. A tiny policy trained
for a test's few seconds rarely searches (the warm start that teaches it takes minutes), so this one's generated
turns are scripted: the warm start's synthetic trajectory (`warmup.synthetic_trajectories`: Search-R1's format, the
env server's real results, the run's own tokenizer) for the question of the run's first held-out rollout of STEP,
recorded as the trainer records one (`rollout_record`, `token_arrays`) and added to that step's held-out rollouts as
group 99: the token store's `val-step-NNNNNN/` (the default; read and written again whole with the trainer's own
`token_store.read_step` / `records_to_step`, its metadata kept), or `val-step-NNNNNN.jsonl` when the run recorded
JSONL (`train.record.format: "jsonl"`). Prints the new record's id.

    python test/e2e/fork_fixture.py RUN_DIR STEP ENV_URL
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from search_agent_trainer import token_store
from search_agent_trainer.data import Example
from search_agent_trainer.fork import PolicyServer
from search_agent_trainer.record.tokens import token_arrays
from search_agent_trainer.run_writer import dumps, rollout_record
from search_agent_trainer.warmup import synthetic_trajectories


def main(run_dir: str, step: int, env_url: str) -> str:
    server = PolicyServer(run_dir, f"step-{step:06d}", env_url)
    rollouts = Path(run_dir) / "rollouts"
    name = f"val-step-{step:06d}"
    file, store = rollouts / f"{name}.jsonl", rollouts / name
    if (store / "rollouts.parquet").exists():
        records = token_store.read_step(store)
    elif file.exists():
        records = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        raise SystemExit(f"{run_dir}: no held-out rollouts of step {step} ({store} or {file})")
    first = records[0]
    P = first["tokens"]["role"].index("generated")
    (t,) = synthetic_trajectories(
        [(first["prompt"], first["tokens"]["ids"][:P])],
        [first["question"]],
        server.tok,
        server.env,
        server.cfg.retriever.topk,
        random.Random(0),
    )
    t.example = Example(first["meta"]["example_id"], first["question"], tuple(first["golden"]), first["data_source"])
    t.group, t.sample = 99, 0
    t.turns = sum(1 for i, r in enumerate(t.roles) if r == "generated" and (i == 0 or t.roles[i - 1] != "generated"))
    t.searches = t.valid_actions = t.turns - 1
    t.finish = "answer"
    rec = rollout_record(
        t,
        run_id=json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))["id"],
        step=step,
        split="val",
        tokens=token_arrays(server.tok, t),
    )
    if store.exists():
        import pyarrow.parquet as pq

        meta = pq.read_schema(store / "rollouts.parquet").metadata or {}
        info = json.loads(meta.get(b"sas.store", b"{}"))
        info.pop("version", None)
        info.update(recorded=info.get("recorded", len(records)) + 1, of=info.get("of", len(records)) + 1)
        token_store.records_to_step(rollouts, name, [*records, json.loads(dumps(rec))], info)
    else:
        with file.open("a", encoding="utf-8") as f:
            f.write(dumps(rec) + "\n")
    return rec["id"]


if __name__ == "__main__":
    print(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
