#!/usr/bin/env bash
# The README's second command (and exactly what .ci/run runs): set up what the tests need, then run every suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
exec npm test
