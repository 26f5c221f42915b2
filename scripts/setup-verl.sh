#!/usr/bin/env bash
# veRL's own Python environment, .venv-verl (docs/engines.md): veRL 0.9.1 pins transformers <5.11 and Ray, .venv
# pins a newer transformers. Idempotent (a stamp of the requirements files).
#   bash scripts/setup-verl.sh         CPU: veRL, its pinned transformers and Ray (tests, `export verl`, config checks)
#   bash scripts/setup-verl.sh --gpu   also vLLM 0.24.0 with the torch 2.11.0 it pins (a veRL training run)
# .venv-verl sees .venv's site-packages after its own (a .pth file), so what trainer/requirements-verl.txt pins wins
# and the rest (torch and its CUDA wheels, numpy, pandas, pyarrow, peft, pytest…) is reused, not downloaded twice.
# pip sees those packages as installed; when a pin replaces one (transformers) it installs the pinned one into
# .venv-verl and leaves .venv's alone ("Not uninstalling …: outside environment").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
MODE=cpu
[[ "${1:-}" == "--gpu" ]] && MODE=gpu
die() { printf '\nsetup-verl: %s\n' "$*" >&2; exit 1; }
sha() { cat "$@" | sha256sum | cut -d' ' -f1; }

[[ -x .venv/bin/python ]] || die ".venv is missing: run bash scripts/setup.sh first (.venv-verl reuses its torch)."
# The interpreter .venv was made with (same Python, so .venv's compiled packages load in .venv-verl too).
BASE="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
MAIN_SITE="$(cd "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" && pwd -P)"
REQ=trainer/requirements-verl.txt
[[ $MODE == gpu ]] && REQ=trainer/requirements-verl-gpu.txt
want="$(sha trainer/requirements-verl*.txt)-$MODE-$MAIN_SITE"
if [[ -x .venv-verl/bin/python && "$(cat .venv-verl/.sas-stamp 2>/dev/null)" == "$want" ]]; then
  printf '\n\033[1m==> veRL venv .venv-verl is up to date\033[0m\n'
  exit 0
fi
printf '\n\033[1m==> veRL venv .venv-verl: pip install -r %s\033[0m\n' "$REQ"
t=$SECONDS
[[ -x .venv-verl/bin/python ]] || "$BASE" -m venv .venv-verl
OWN_SITE="$(.venv-verl/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# "zz-": .pth files are read in name order; a path line is appended to sys.path, after .venv-verl's own site-packages.
echo "$MAIN_SITE" > "$OWN_SITE/zz-sas-main-venv.pth"
.venv-verl/bin/python -m pip install -q --disable-pip-version-check -r "$REQ"
# What the reuse must give: veRL importable, the pinned transformers from .venv-verl, torch from .venv on CPU.
.venv-verl/bin/python - "$MODE" "$MAIN_SITE" "$OWN_SITE" <<'PY'
import sys, importlib.metadata as md
mode, main_site, own_site = sys.argv[1:]
import torch, transformers, verl, ray
import verl.trainer.main_ppo, verl.trainer.main_ppo_v0, verl.experimental.agent_loop  # the entry points we use
pinned = {l.split("==")[0].lower(): l.split("==")[1].strip() for l in open("trainer/requirements-verl.txt") if "==" in l and not l.startswith("#")}
assert verl.__version__ == pinned["verl"], f"verl {verl.__version__}, pinned {pinned['verl']}"
assert transformers.__version__ == pinned["transformers"], f"transformers {transformers.__version__} imported, {pinned['transformers']} pinned"
assert transformers.__file__.startswith(own_site), f"transformers imported from {transformers.__file__}, not {own_site}"
if mode == "cpu":
    assert torch.__file__.startswith(main_site), f"torch imported from {torch.__file__}, expected .venv's ({main_site})"
print(f"    verl {verl.__version__}, transformers {transformers.__version__}, ray {ray.__version__}, torch {torch.__version__} ({'.venv' if torch.__file__.startswith(main_site) else '.venv-verl'})")
PY
.venv-verl/bin/python -m pip check -q --disable-pip-version-check >/dev/null || die "pip check found broken requirements in .venv-verl: .venv-verl/bin/python -m pip check"
echo "$want" > .venv-verl/.sas-stamp
echo "    ($((SECONDS - t)) s, $(du -sh .venv-verl | cut -f1) in .venv-verl)"
