#!/usr/bin/env bash
# The sharded-sweep launchers against the unsharded sweep: a small `kvsim sweep` (the first
# 200 requests of traces/chat-mix.csv, 6 points) run once whole, then as 3 shards through
# tools/sweep-parallel (GNU parallel; CSV and JSONL) and through tools/sweep-slurm.sbatch on a
# real single-node Slurm brought up by tools/slurm-local (job array 1-3, then the merge as a
# job that depends on it). Each merged file must equal the unsharded one byte for byte (cmp):
# the contract of `kvsim sweep --shard I/N` and `kvsim sweep merge`. A shard that fails must
# fail the launcher and leave no merged file.
#
# Usage: tests/launchers_test.sh KVSIM   (ctest passes the built program)
# Exit 77 (ctest's skip) with the reason when GNU parallel or Slurm is not installed, or Slurm
# cannot start here (not root, daemons refuse); KVSIM_REQUIRE_LAUNCHERS=1 (tools/run-tests
# sets it where it installs them) turns a skip into a failure. Everything it starts is
# stopped, and its scratch directory removed, on every exit.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 KVSIM" >&2; exit 2; }
export KVSIM
KVSIM=$(cd "$(dirname "$1")" && pwd -P)/$(basename "$1")
root=$(cd "$(dirname "$0")/.." && pwd -P)
trace=$root/traces/chat-mix.csv

# The sweep: 3 x 2 = 6 points, under a budget small enough that the points differ.
# shellcheck disable=SC2054  # the commas separate --vary values, not array elements
sweep_opts=("$trace" --requests 200 --model llama-3.1-8b --allocator paged --kv-budget 2GiB
            --vary rate-scale=0.5,1,4 --vary max-running=16,256)
shards=3

skip() {
  echo "SKIP: $*"
  if [[ ${KVSIM_REQUIRE_LAUNCHERS:-0} == 1 ]]; then
    echo "FAIL: KVSIM_REQUIRE_LAUNCHERS=1, so this must not be skipped" >&2
    exit 1
  fi
  exit 77
}
fail() { echo "FAIL: $*" >&2; exit 1; }

work=$(mktemp -d /tmp/kvsim-launchers.XXXXXX)  # short: munge's socket path has a limit
chmod 755 "$work"  # munged's socket must be reachable by all
slurm_started=0
cleanup() {
  local rc=$?
  if [[ $slurm_started == 1 ]]; then
    "$root/tools/slurm-local" stop "$work/slurm" || rc=1
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM
cd "$work"

same() {  # EXPECTED ACTUAL WHAT
  [[ -s $2 ]] || fail "$3: no output written ($2)"
  cmp "$1" "$2" || { diff "$1" "$2" | head -20 >&2; fail "$3 differs from the unsharded sweep"; }
  echo "ok: $3 equals the unsharded sweep byte for byte ($(wc -l <"$2") lines) [${SECONDS}s]"
}

# Shard I of 3 ran exactly the points p with p % 3 == I-1: of the 6, {I-1, I+2} (the first
# column of kvsim sweep's CSV is the point's index). A launcher that numbered its shards from
# 0, or gave every task the same one, fails here even where the merge would catch it too.
check_parts() {  # DIR
  local i want got
  for i in 1 2 3; do
    want="$((i - 1)) $((i + 2)) "
    got=$(awk -F, 'NR > 1 { printf "%s ", $1 }' "$1/part-$i.csv")
    [[ $got == "$want" ]] || fail "$1/part-$i.csv: shard $i/3 must hold points $want, holds ${got:-none}"
  done
  echo "ok: $1: shard I of 3 holds the points p with p % 3 == I-1"
}

# --- the reference: the whole grid in one process -------------------------------------------
"$KVSIM" sweep "${sweep_opts[@]}" --csv whole.csv --jsonl whole.jsonl
# 6 points: one header line and 6 rows in the CSV, 6 lines in the JSONL.
[[ $(wc -l <whole.csv) -eq 7 ]] || fail "whole.csv: expected a header and 6 rows, got $(wc -l <whole.csv) lines"
[[ $(wc -l <whole.jsonl) -eq 6 ]] || fail "whole.jsonl: expected 6 rows, got $(wc -l <whole.jsonl) lines"

# --- GNU parallel -----------------------------------------------------------------------------
command -v parallel >/dev/null || skip "GNU parallel is not installed (Debian: parallel)"
"$root/tools/sweep-parallel" --shards $shards --jobs 2 --parts parts-parallel \
  --csv parallel.csv "${sweep_opts[@]}"
same whole.csv parallel.csv "tools/sweep-parallel, 3 shards, CSV"
check_parts parts-parallel
"$root/tools/sweep-parallel" --shards $shards --jobs 2 --jsonl parallel.jsonl "${sweep_opts[@]}"
same whole.jsonl parallel.jsonl "tools/sweep-parallel, 3 shards, JSONL"
# A failing shard (every shard fails on an unknown model) fails the launcher, with no output.
if "$root/tools/sweep-parallel" --shards $shards --csv broken.csv \
     "$trace" --requests 200 --model no-such-model --vary rate-scale=0.5,1,4 2>broken.err; then
  fail "tools/sweep-parallel succeeded although every shard failed"
fi
[[ ! -e broken.csv ]] || fail "tools/sweep-parallel wrote a merged file although its shards failed"
echo "ok: a failing shard fails tools/sweep-parallel and nothing is merged [${SECONDS}s]"

# --- Slurm ------------------------------------------------------------------------------------
for b in munged slurmctld slurmd sbatch; do
  command -v $b >/dev/null || skip "'$b' is not installed (Debian: munge, slurm-wlm)"
done
[[ $(id -u) -eq 0 ]] || skip "tools/slurm-local runs the Slurm daemons as root; this is uid $(id -u)"
slurm_started=1
if ! "$root/tools/slurm-local" start "$work/slurm" >slurm-start.out 2>slurm-start.err; then
  cat slurm-start.err
  for f in "$work"/slurm/*.log "$work"/slurm/*.out; do
    if [[ -s $f ]]; then echo "--- $f"; tail -n 20 "$f"; fi
  done
  skip "Slurm could not start here (tools/slurm-local start: $(head -n 1 slurm-start.err))"
fi
export SLURM_CONF=$work/slurm/slurm.conf
echo "ok: tools/slurm-local started a cluster: $(sinfo -h -o "%P %D node(s) %t" 2>/dev/null) [${SECONDS}s]"
mkdir -p parts-slurm
array=$(sbatch --parsable --array=1-$shards --output="$work/slurm-%A_%a.out" \
  "$root/tools/sweep-slurm.sbatch" "$work/parts-slurm" "${sweep_opts[@]}")
merge_cmd=$(printf '%q ' "$KVSIM" sweep merge $(seq -f "$work/parts-slurm/part-%g.csv" 1 $shards) \
  --csv "$work/slurm.csv")
merge=$(sbatch --parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes \
  --output="$work/slurm-merge.out" --wrap "$merge_cmd")
# Wait for the merge job (polled: sbatch --wait polls at 2, 4, 8, ... s).
state=
for ((tries = 0; tries < 600; ++tries)); do
  state=$(scontrol show job "$merge" -o 2>/dev/null | grep -o 'JobState=[A-Z_]*' || true)
  state=${state#JobState=}
  case $state in PENDING|CONFIGURING|RUNNING|COMPLETING|"") sleep 0.2 ;; *) break ;; esac
done
if [[ $state != COMPLETED ]]; then
  tail -n 5 "$work"/slurm-*.out >&2 || true
  fail "the merge job $merge after the Slurm array $array ended ${state:-in no known state} (not COMPLETED)"
fi
same whole.csv slurm.csv "tools/sweep-slurm.sbatch, a job array of 3 tasks on slurm-local, then the merge"
check_parts parts-slurm
