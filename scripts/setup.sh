#!/usr/bin/env bash
# Sets up Search Agent Studio on this machine. Idempotent: steps whose inputs did not change are skipped.
#   bash scripts/setup.sh          what the main job needs: the trainer's Python venv (.venv), npm ci, the build
#   bash scripts/setup.sh --test   also what the tests need: system packages (apt, when root on Debian; otherwise
#                                  it says exactly what is missing), pytest and ruff in the venv, code-server for e2e, and
#                                  veRL's own venv (.venv-verl, scripts/setup-verl.sh) for the veRL engine's tests
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
MODE=main
[[ "${1:-}" == "--test" ]] && MODE=test

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf '\nsetup: %s\n' "$*" >&2; exit 1; }
sha() { cat "$@" | sha256sum | cut -d' ' -f1; }
timed() { local t=$SECONDS; "$@"; echo "    ($((SECONDS - t)) s)"; }

# ---- 0. what must already be here
command -v node >/dev/null || die "Node.js 20.19+ is required (not found)."
node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' ||
  die "Node.js 20.19+ is required; found $(node --version)."
PYTHON="${SAS_BASE_PYTHON:-python3}"
command -v "$PYTHON" >/dev/null || die "Python 3.10+ is required ($PYTHON not found)."
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || die "Python 3.10+ is required; found $("$PYTHON" --version)."

# ---- 1. system packages
# main: python3-venv when the Python lacks venv/ensurepip (Debian's system Python).
# test: code-server's native-module build (g++, make, pkg-config, -dev headers), ripgrep, Chromium.
pkgs=()
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || pkgs+=(python3-venv)
if [[ $MODE == test ]]; then
  pkgs+=(g++ make pkg-config libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev ripgrep chromium openjdk-17-jdk-headless maven unzip)
fi
missing=()
if command -v dpkg-query >/dev/null; then
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
else
  # Not Debian: check for the commands and headers by what they provide.
  for p in "${pkgs[@]}"; do
    case $p in
      chromium) [[ -n "${SAS_CHROMIUM:-}" ]] || command -v chromium >/dev/null || missing+=("chromium (or set SAS_CHROMIUM)") ;;
      ripgrep) command -v rg >/dev/null || missing+=(ripgrep) ;;
      g++|make|pkg-config|unzip) command -v "$p" >/dev/null || missing+=("$p") ;;
      openjdk-17-jdk-headless) command -v javac >/dev/null || missing+=("a JDK 17+ (javac)") ;;
      maven) command -v mvn >/dev/null || missing+=(maven) ;;
      python3-venv) missing+=("python venv/ensurepip module") ;;
      *) pkg-config --exists "${p#lib}" 2>/dev/null || true ;;  # headers: the code-server build will say
    esac
  done
fi
if ((${#missing[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    step "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    timed bash -c "apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends ${missing[*]} >/dev/null"
  else
    die "missing system packages: ${missing[*]}
  On Debian/Ubuntu run:  sudo apt-get install -y --no-install-recommends ${missing[*]}
  then run this script again."
  fi
fi

# ---- 3 and 4 (a function: with --test they run beside the Python steps, which mostly wait on downloads)
node_side() {
  # ---- 3. npm packages and the build
  export ONNXRUNTIME_NODE_INSTALL=skip   # its install script would download CUDA binaries; the bundled CPU ones work
  lock="$(sha package-lock.json)"
  if [[ -d node_modules && "$(cat node_modules/.sas-stamp 2>/dev/null)" == "$lock" ]]; then
    step "node_modules is up to date"
  else
    step "npm ci"
    timed npm ci --no-audit --no-fund --loglevel=error
    echo "$lock" > node_modules/.sas-stamp
  fi
  step "npm run build"
  timed npm run --silent build >/dev/null

  # ---- 4. real VS Code for the e2e tests, and the Lucene oracle for the BM25 tests
  if [[ $MODE == test ]]; then
    step "code-server for the e2e tests"
    timed bash scripts/install-code-server.sh
    oracle=test/oracle/lucene
    want_oracle="$(sha $oracle/pom.xml $oracle/src/main/java/oracle/*.java)"
    if [[ -f $oracle/target/classes/oracle/Oracle.class && "$(cat $oracle/target/.sas-stamp 2>/dev/null)" == "$want_oracle" ]]; then
      step "Lucene oracle is up to date"
    else
      step "Lucene oracle (Maven, Apache Lucene from Maven Central)"
      timed mvn -q -B -f $oracle/pom.xml package -DskipTests
      echo "$want_oracle" > $oracle/target/.sas-stamp
    fi
  fi
}

if [[ $MODE == test ]]; then
  node_log="$(mktemp)"
  step "npm ci, the build, code-server and the Lucene oracle: beside the Python steps (output at the end)"
  node_side >"$node_log" 2>&1 &
  node_pid=$!
  trap '[[ -n "${node_pid:-}" ]] && { pkill -P "$node_pid" 2>/dev/null; kill "$node_pid" 2>/dev/null; }; true' EXIT  # a failing Python step leaves nothing running
fi

# ---- 2. the trainer's Python virtual environment (.venv), pinned
REQ=trainer/requirements.txt
[[ $MODE == test ]] && REQ=trainer/requirements-dev.txt
MAIN_REQS=(trainer/requirements-dev.txt trainer/requirements.txt)   # the order the old glob had; not requirements-verl*.txt
want="$(sha "${MAIN_REQS[@]}")-$MODE"
if [[ -x .venv/bin/python && "$(cat .venv/.sas-stamp 2>/dev/null)" == "$want" ]]; then
  step "Python venv .venv is up to date"
elif [[ -x .venv/bin/python && $MODE == main && "$(cat .venv/.sas-stamp 2>/dev/null)" == "$(sha "${MAIN_REQS[@]}")-test" ]]; then
  step "Python venv .venv is up to date (has the test extras too)"
else
  step "Python venv .venv: pip install -r $REQ (torch, transformers, peft; several GB on first install)"
  [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
  timed .venv/bin/python -m pip install -q --disable-pip-version-check -r "$REQ"
  echo "$want" > .venv/.sas-stamp
fi

# ---- 2b. veRL's own venv (.venv-verl) for the veRL engine's tests: veRL pins an older transformers than .venv
if [[ $MODE == test ]]; then
  bash scripts/setup-verl.sh
fi

if [[ $MODE == test ]]; then
  node_ok=0; wait "$node_pid" || node_ok=$?
  node_pid=
  cat "$node_log"; rm -f "$node_log"
  ((node_ok == 0)) || die "the npm / build / code-server / Lucene oracle steps failed (their output is above)"
else
  node_side
fi
step "setup done ($MODE) in $SECONDS s"
