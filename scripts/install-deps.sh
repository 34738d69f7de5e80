#!/usr/bin/env bash
# Installs ferry's build and test dependencies from Debian's packages (and the npm packages the
# cross-implementation tests use). Used by the README's first command and by .ci/run.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libcaf-dev liburing-dev libprotobuf-dev protobuf-compiler
      librestinio-dev libfmt-dev libasio-dev libhttp-parser-dev
      libgtest-dev libgmock-dev libcli11-dev libspdlog-dev nlohmann-json3-dev libxxhash-dev
      libpcre2-dev libicu-dev
      chromium)  # headless browser for ferry-server's web page test (driven by playwright-core)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Node.js + npm (the machine image may already carry a newer Node.js than Debian's; keep it).
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
# npm packages the tests use: implementations written by others (tokenizers, GGUF parser) and the
# clients that drive ferry-server (openai, playwright-core). Re-run whenever the lock file changes.
here=$(cd "$(dirname "$0")/.." && pwd)
js="$here/tests/js"
if [ -f "$js/package.json" ] && ! cmp -s "$js/package-lock.json" "$js/node_modules/.ferry-installed-lock" 2>/dev/null; then
  if (cd "$js" && npm install --no-audit --no-fund --silent); then
    cp "$js/package-lock.json" "$js/node_modules/.ferry-installed-lock" 2>/dev/null || true
  else
    echo "warning: npm install failed in tests/js; the cross-implementation and server client tests will fail" >&2
  fi
fi
