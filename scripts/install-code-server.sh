#!/usr/bin/env bash
# Installs code-server (real VS Code for the web) into .vscode-test/code-server for the e2e tests, following
# ../shared/notes/code-server.md: npm package without its install script (it fails as root and downloads
# ripgrep), then the native modules rebuilt here and Debian's ripgrep linked in. Idempotent (a stamp file).
# Needs: g++, make, python3, pkg-config, libkrb5-dev, libx11-dev, libxkbfile-dev, libsecret-1-dev, ripgrep.
set -euo pipefail
VERSION="${CODE_SERVER_VERSION:-4.100.3}"   # = VS Code 1.100.3; newer ones want a newer Node
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$ROOT/.vscode-test/code-server"
STAMP="$DIR/.installed-$VERSION"
if [[ -f "$STAMP" ]]; then
  echo "code-server $VERSION already installed in $DIR"
  exit 0
fi
RG="$(command -v rg || true)"
[[ -n "$RG" ]] || { echo "install-code-server: ripgrep (rg) is missing: apt-get install ripgrep" >&2; exit 1; }

start=$SECONDS
rm -rf "$DIR" && mkdir -p "$DIR" && cd "$DIR"
echo '{ "name": "sas-code-server", "private": true }' > package.json
export npm_config_yes=true npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false
npm install --ignore-scripts --no-package-lock "code-server@$VERSION"
npm rebuild argon2
cd node_modules/code-server/lib/vscode
npm install --omit=dev --ignore-scripts --no-package-lock
npm rebuild kerberos node-pty @parcel/watcher native-watchdog @vscode/spdlog @vscode/deviceid
mkdir -p node_modules/@vscode/ripgrep/bin
ln -sf "$RG" node_modules/@vscode/ripgrep/bin/rg
ln -sfn node_modules node_modules.asar
(cd extensions && npm install --omit=dev --ignore-scripts --no-package-lock)
touch "$STAMP"
echo "code-server $VERSION installed in $DIR in $((SECONDS - start)) s"
