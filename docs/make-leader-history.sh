#!/usr/bin/env bash
# Makes docs/leader-history.png, the picture in docs/observability.md: a local 3-node cluster whose
# leadership is moved (twice: the second term is 3 entries long), whose leader is then killed (and started again), and one of whose
# followers is stopped for the last appends; then 'spark stats --plot' over its three stores. Needs the .venv of the README's commands
# and Java (for Spark). Usage: bash docs/make-leader-history.sh [OUT.png]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/docs/leader-history.png}"
ctl="$here/.venv/bin/dledgerctl"
base="$(mktemp -d)"
trap '"$ctl" cluster down --base-dir "$base" >/dev/null 2>&1 || true; rm -rf "$base"' EXIT
"$ctl" cluster up --base-dir "$base" --port-base 23100 --data-file-size 1MiB --index-file-size 64KiB >/dev/null
load() { seq "$1" | sed "s/^/$2 /" | "$ctl" append --base-dir "$base" --file - --lines --format csv >/dev/null; }
leader() { "$ctl" cluster status --base-dir "$base" --format csv | awk -F, '$5 == "leader" {print $1}'; }
load 800 first
"$ctl" peer transfer-leader --base-dir "$base" --to "$(leader | sed 's/n0/n1/;t;s/n[12]/n0/')" >/dev/null
load 600 second
# a short term: leadership moves again at once, and its leader takes 2 entries before it is killed
"$ctl" peer transfer-leader --base-dir "$base" --to "$(leader | sed 's/n0/n2/;t;s/n[12]/n0/')" >/dev/null
load 2 brief
"$ctl" cluster stop --base-dir "$base" --kill "$(leader)" >/dev/null
for _ in $(seq 50); do [ -n "$(leader)" ] && break; sleep 0.2; done
load 700 "after the kill"
"$ctl" cluster up --base-dir "$base" >/dev/null   # (starts the killed member again)
away="$("$ctl" cluster status --base-dir "$base" --format csv | awk -F, '$5 == "follower" {print $1; exit}')"
"$ctl" cluster stop --base-dir "$base" "$away" >/dev/null
load 900 "while one is away"
"$ctl" spark stats "$base" --plot "$out" >/dev/null
echo "wrote $out"
