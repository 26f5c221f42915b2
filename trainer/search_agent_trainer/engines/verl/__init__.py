"""The `verl` engine: veRL 0.9.1 (Ray, FSDP, vLLM/SGLang rollouts) with our protocol, retriever, reward and recording.
Importable only in veRL's own environment (.venv-verl, scripts/setup-verl.sh); docs/engines.md has the whole map.

  dataset.py      our JSONL datasets as veRL's RL parquet (Search-R1's columns), and a row back as our Example
  agent_loop.py   `search_r1_agent`: Search-R1's tags protocol (rollout.play) on veRL's LLM server,
                  ids as generated, per-token roles; `sas_tool_agent`: veRL's tool agent loop with roles
  tool.py         `SearchTool`, the `search(query)` BaseTool on our /retrieve (the tool-call dialect)
  reward.py       `compute_score` for reward.custom_reward_function: our /reward, concurrent calls batched
  recorder.py     `RecordingTrainer` (a RayPPOTrainer): the run directory each step from veRL's own batch
  overrides.py    our resolved run config → veRL's Hydra overrides and the files they name
  main.py         `python -m search_agent_trainer.engines.verl.main OVERRIDES…`: veRL's main_ppo with the recorder
"""

# Names the host, the exported launch scripts and the modules here share (no veRL import: overrides.py runs anywhere).
SEARCH_R1_AGENT = "search_r1_agent"  # our Search-R1 agent loop's name in veRL's registry
TOOL_AGENT = "sas_tool_agent"  # veRL's tool agent loop with our roles
ENV_URL_VAR = "SAS_ENV_URL"  # the env server's URL when a config file does not name it
STOP_FILE = ".stop"  # in the run directory: finish the step, checkpoint, stop (main.py writes it on SIGTERM)

# the search tool as every engine declares it (one definition: a veRL-trained tool-call model sees the builtin's prompt)
from ...tool_schema import search_tool_schema  # noqa: E402,F401
