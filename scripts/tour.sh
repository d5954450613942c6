#!/usr/bin/env bash
# The main job until the cluster exists: set up, then tour the offline store tools on a
# default store directory (./dledger-store): a store written by the real DLedger 0.2.7, one
# written by dledgerctl, a verify, a diff, a damaged copy and its repair.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q -e .
BASE=${DLEDGER_STORE:-./dledger-store}
FIX=tests/support/fixtures/dledger-0.2.7
rm -rf "$BASE" && mkdir -p "$BASE"
if [ -d "$FIX/leader/dledger-n0" ]; then
  cp -r "$FIX/leader/dledger-n0" "$BASE/dledger-upstream" && chmod -R u+w "$BASE/dledger-upstream"
fi
.venv/bin/python -c "from store.sample import write_sample_store; write_sample_store('$BASE/dledger-n0')"
cp -r "$BASE/dledger-n0" "$BASE/dledger-n1"
run() { echo; echo "\$ dledgerctl $*"; .venv/bin/dledgerctl "$@" || echo "(exit $?)"; }
run store inspect-data "$BASE/dledger-n0" --from-index 0 --to-index 4 --body hex --all-records
run store inspect-index "$BASE/dledger-n0" --to-index 4
run store verify "$BASE/dledger-n0"
run store checkpoint "$BASE/dledger-n0"
[ -d "$BASE/dledger-upstream" ] && run store verify "$BASE/dledger-upstream"
echo; echo "# damage one body byte of entry 500 on n1"
.venv/bin/python - "$BASE/dledger-n1" <<'PY'
import sys
from store.filestore import FileStore
with FileStore.open(sys.argv[1], read_only=True) as s:
    pos, size = s.locate(500)
f = s.data.file_size
path = f"{sys.argv[1]}/data/{pos - pos % f:020d}"
with open(path, "r+b") as fh:
    fh.seek(pos % f + 60); b = fh.read(1); fh.seek(pos % f + 60); fh.write(bytes([b[0] ^ 0xFF]))
PY
run store verify "$BASE/dledger-n1"
run store diff "$BASE/dledger-n0" "$BASE/dledger-n1"
run store truncate "$BASE/dledger-n1" --from-index 450 --force --yes
run store verify "$BASE/dledger-n1"
echo; echo "Stores are in $BASE. Try: .venv/bin/dledgerctl store --help"
