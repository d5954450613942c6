#!/usr/bin/env bash
# The main job: set up .venv from nothing and start a local 3-node cluster on the default
# store directory (/tmp/dledgerstore, DLedger's default; override with DLEDGER_STORE), then
# print what to try next. If a cluster started from there still runs, it is stopped first.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q -e .
BASE=${DLEDGER_STORE:-/tmp/dledgerstore}
if [ -f "$BASE/cluster.json" ]; then
  .venv/bin/dledgerctl cluster down --base-dir "$BASE" >/dev/null || true
fi
.venv/bin/dledgerctl cluster up --nodes 3 --base-dir "$BASE"
