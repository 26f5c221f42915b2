#!/usr/bin/env bash
# engine "trl" on a GPU: two GRPO steps of a random model with Qwen2.5-0.5B's layers, bf16, through the real run path
# (TRL 1.16's GRPOTrainer, our multi-turn rollout and sampler, the env server, a bf16 reference), then the
# rollout-vs-trainer log-prob gap over trained tokens (goal: mean |Δ| < 0.01 on-policy). Prints one JSON line; with
# $OUT set (the device machine's output folder) the result and the trainer's log go there too. scripts/gpu-check.sh
# (the one-GPU issue's) calls it as a step; trainer/search_agent_trainer/engines/trl/gpu_check.py does the work.
#
#   bash scripts/gpu-check-trl.sh              # on the GPU machine
#   bash scripts/gpu-check-trl.sh --cpu-smoke  # toy size on CPU (trl-tiny's model): what any machine can run
#
# The GPU machine (docs/engines.md) has python3 3.12 with torch 2.11, transformers, accelerate 1.15, peft, pandas,
# pyarrow, xxhash — and no network, no TRL, no datasets, no node. Carry them (≤ 64 MiB a call, the working tree
# included), made here once:
#   echo /.whl/ >> .git/info/exclude; echo /.node/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19     # 1.8 MB together (checked)
#   # only if its pyarrow is older than datasets' >= 24: + pyarrow==26.0.1 (55 MB: then carry no node below)
#   mkdir -p .node && curl -fsSL https://nodejs.org/dist/v20.20.2/node-v20.20.2-linux-x64.tar.xz -o .node/node.tar.xz
#   # or, without nodejs.org, this machine's own node (Debian's links only the C and C++ runtimes): 24 MB
#   mkdir -p .node && xz -T0 -c "$(command -v node)" > .node/node.xz
#   npm run build                                                              # dist/ (9 MB with its maps)
# and run with carry [".whl", ".node", "dist"]. The env server is node dist/server.js (the demo corpus, builtin:em);
# SAS_NODE names another node, SAS_ENV_URL an env server already running.
#
# veRL cannot run there: its rollouts need vLLM, which that machine lacks (and ~1 GB of wheels is over the limit).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# the carried wheels, where this Python lacks TRL (a machine that has it keeps its own)
if ! "$PY" -c 'import trl' >/dev/null 2>&1 && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sas-site .whl/*.whl
  export PYTHONPATH="/tmp/sas-site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -z "${SAS_NODE:-}" ] && ! command -v node >/dev/null 2>&1; then
  if [ -f .node/node.tar.xz ]; then # nodejs.org's tarball
    mkdir -p /tmp/sas-node && tar -xJf .node/node.tar.xz -C /tmp/sas-node --strip-components=1
    export SAS_NODE=/tmp/sas-node/bin/node
  elif [ -f .node/node.xz ]; then # a node binary, xz-compressed (`xz -T0 -c "$(command -v node)" > .node/node.xz`)
    mkdir -p /tmp/sas-node/bin
    "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      .node/node.xz /tmp/sas-node/bin/node
    chmod +x /tmp/sas-node/bin/node
    export SAS_NODE=/tmp/sas-node/bin/node
  fi
fi
# what it cannot run without: said, and a skipped result, not a failure (the GPU check goes on)
skip() {
  echo "gpu-check-trl: skipped: $1" >&2
  line="{\"check\": \"trl\", \"status\": \"skipped\", \"reason\": \"$1\"}"
  [ -n "${OUT:-}" ] && echo "$line" >"$OUT/gpu-check-trl.json"
  echo "$line"
  exit 0
}
"$PY" -c 'import trl' >/dev/null 2>&1 || skip "TRL is not importable (carry its wheels in .whl/, as above)"
[ -n "${SAS_ENV_URL:-}" ] || [ -n "${SAS_NODE:-}" ] || command -v node >/dev/null 2>&1 ||
  skip "no node for the env server (carry one in .node/, as above, or set SAS_ENV_URL)"
args=("$@")
[ -n "${SAS_ENV_URL:-}" ] && args+=(--env-url "$SAS_ENV_URL")
[ -n "${OUT:-}" ] && args+=(--out "$OUT")
export PYTHONPATH="$PWD/trainer${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PY" -m search_agent_trainer.engines.trl.gpu_check "${args[@]}"
