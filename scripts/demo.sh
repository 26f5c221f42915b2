#!/usr/bin/env bash
# The README's first command: set up, then run the main job on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec node dist/cli.js demo "$@"
