#!/usr/bin/env bash
# End-to-end replay benchmark (issue 6): a 1,000,000-request trace shaped like Azure's 2023
# conversation trace, replayed from disk through each allocator, one allocator per process
# on one core (--jobs 1). Prints a markdown table: wall time (median of RUNS runs), requests
# per second, simulated generated tokens per second, peak resident memory, the load average
# before the runs, and the exact command behind every row.
#
# Usage: bench/replay_e2e.sh            (after building build-rel, see bench/README.md)
# Environment (all optional):
#   KVSIM=build-rel/src/kvsim   the program to measure
#   BENCH=build-rel/bench/kvsim_bench   for timing the trace reading alone (skipped if absent)
#   REQUESTS=1000000  RUNS=3  SEED=1  MODEL=llama-3.1-8b
#   ALLOCATORS="paged sliding-window ..."   (default: the six below)
#   TIMEOUT=300       seconds a single replay may take before it is reported as unfinished
#   AZURE=../shared/traces/azure2023/AzureLLMInferenceTrace_conv.csv   empirical lengths;
#                     when absent, lognormals with that trace's documented means and p99s
#   KEEP_TRACE=DIR    keep the generated trace in DIR instead of a temporary directory
set -euo pipefail
cd "$(dirname "$0")/.."

KVSIM=${KVSIM:-build-rel/src/kvsim}
BENCH=${BENCH:-build-rel/bench/kvsim_bench}
REQUESTS=${REQUESTS:-1000000}
RUNS=${RUNS:-3}
SEED=${SEED:-1}
MODEL=${MODEL:-llama-3.1-8b}
TIMEOUT=${TIMEOUT:-300}
AZURE=${AZURE:-../shared/traces/azure2023/AzureLLMInferenceTrace_conv.csv}
ALLOCATORS=${ALLOCATORS:-"paged sliding-window dense-static:reserve=max-tokens dense-static:reserve=max-model-len dynamic:growth=double dynamic:growth=exact"}

if [[ ! -x $KVSIM ]]; then
  echo "replay_e2e.sh: $KVSIM not found; build it first:" >&2
  echo "  cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2" >&2
  exit 2
fi
if [[ ! -x /usr/bin/time ]]; then
  echo "replay_e2e.sh: /usr/bin/time is needed for peak RSS (Debian: apt-get install time)" >&2
  exit 2
fi

if [[ -n ${KEEP_TRACE:-} ]]; then
  dir=$KEEP_TRACE
  mkdir -p "$dir"
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/kvsim-e2e.XXXXXX")
  trap 'rm -rf "$dir"' EXIT
fi
trace=$dir/azure-like-$REQUESTS.csv

load1() { cut -d' ' -f1 /proc/loadavg; }
now() { echo "${EPOCHREALTIME/,/.}"; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# The line of a Google Benchmark aggregate to read: the median, or the only run.
agg() { if ((RUNS > 1)); then echo '_median$'; else echo 'real_time$'; fi; }
json_int() { grep -m1 -o "\"$1\": [0-9]*" "$2" | grep -o '[0-9]*$'; }

# --- the machine -------------------------------------------------------------------------
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
mhz=$(grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cxx=$(grep -m1 '^CMAKE_CXX_COMPILER:' build-rel/CMakeCache.txt 2>/dev/null | cut -d= -f2- || true)
flags=$(grep -m1 '^CMAKE_CXX_FLAGS_RELEASE:' build-rel/CMakeCache.txt 2>/dev/null | cut -d= -f2- || true)
echo "## End-to-end replay, $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "- machine: $cpu at ${mhz} MHz, $(nproc) cores, Linux $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "- compiler: ${cxx:-?} ($(${cxx:-c++} --version 2>/dev/null | head -1)), Release flags '${flags:-?}'"
echo "- each figure: median wall time of $RUNS runs of one process replaying one allocator on one core (--jobs 1)"
echo

# --- the trace ---------------------------------------------------------------------------
gen=("$KVSIM" trace gen --seed "$SEED" --requests "$REQUESTS" --arrivals poisson:rate=5.5)
if [[ -f $AZURE ]]; then
  gen+=(--lengths-from "$AZURE")
  shape="(prompt, output) pairs drawn jointly from the rows of $AZURE"
else
  gen+=(--prompt lognormal:mean=1155,p99=4142,max=14050 --output lognormal:mean=211,p99=601,max=1000)
  shape="lognormal lengths with the Azure 2023 conversation trace's means and p99s ($AZURE is absent)"
fi
gen+=(-o "$trace")
t0=$(now)
"${gen[@]}" 2>/dev/null
t1=$(now)
echo "Trace: $REQUESTS requests, Poisson arrivals at 5.5/s, $shape; $(($(stat -c %s "$trace") / 1000000)) MB,"
echo "generated in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}') s:"
echo
echo '```sh'
echo "${gen[*]}"
echo '```'
echo

# --- reading the trace alone -------------------------------------------------------------
if [[ -x $BENCH ]]; then
  read_out=$(KVSIM_BENCH_TRACE=$trace "$BENCH" --benchmark_filter='^BM_ReadFile/' --benchmark_repetitions="$RUNS" \
    --benchmark_report_aggregates_only=true 2>/dev/null | awk -v m="$(agg)" '$1 ~ /^BM_ReadFile/ && $1 ~ m' || true)
  if [[ -n $read_out ]]; then
    read_ms=$(awk '{print $2}' <<<"$read_out")
    echo "Reading the trace alone (open_trace + next() over every row, no simulation): ${read_ms} ms, median of $RUNS (load $(load1)):"
    echo
    echo '```sh'
    echo "KVSIM_BENCH_TRACE=$trace $BENCH --benchmark_filter='^BM_ReadFile/' --benchmark_repetitions=$RUNS --benchmark_report_aggregates_only=true"
    echo '```'
    echo
  fi
fi

# --- demand mode -------------------------------------------------------------------------
run_table() {  # $1: a title; $2...: extra replay options
  local title=$1
  shift
  local extra=("$@")
  echo "### $title"
  echo
  echo "| allocator | wall s (median; min..max) | CPU s (user+sys) | requests/s | generated tokens/s | all tokens/s | peak RSS, MB | load before |"
  echo "|---|---|---|---|---|---|---|---|"
  local commands=()
  for a in $ALLOCATORS; do
    local cmd=("$KVSIM" replay "$trace" --model "$MODEL" --allocator "$a" --jobs 1 --quiet --json "${extra[@]}")
    commands+=("$a: ${cmd[*]}")
    local load walls=() rss=() users=() ok=1
    load=$(load1)
    for ((i = 0; i < RUNS; ++i)); do
      local s e status=0
      s=$(now)
      timeout "$TIMEOUT" /usr/bin/time -f '%M %U %S' -o "$dir/time" "${cmd[@]}" >"$dir/out.json" 2>"$dir/err" || status=$?
      e=$(now)
      if ((status != 0)); then
        ok=0
        if ((status == 124)); then
          echo "| \`$a\` | did not finish in $TIMEOUT s | | | | | | $load |"
        else
          echo "| \`$a\` | failed (exit $status): $(head -c 200 "$dir/err" | tr '\n' ' ') | | | | | | $load |"
        fi
        break
      fi
      walls+=("$(awk -v a="$s" -v b="$e" 'BEGIN {printf "%.3f", b - a}')")
      read -r kb user sys <"$dir/time"
      rss+=("$kb")
      users+=("$(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}')")
    done
    ((ok)) || continue
    local wall lo hi kb user requests generated prompt
    wall=$(printf '%s\n' "${walls[@]}" | median)
    lo=$(printf '%s\n' "${walls[@]}" | sort -g | head -1)
    hi=$(printf '%s\n' "${walls[@]}" | sort -g | tail -1)
    kb=$(printf '%s\n' "${rss[@]}" | sort -g | tail -1)
    user=$(printf '%s\n' "${users[@]}" | median)
    requests=$(json_int total "$dir/out.json")
    generated=$(json_int generated_tokens "$dir/out.json")
    prompt=$(json_int prompt_tokens "$dir/out.json")
    awk -v a="$a" -v w="$wall" -v lo="$lo" -v hi="$hi" -v kb="$kb" -v u="$user" -v r="$requests" -v g="$generated" \
      -v p="$prompt" -v l="$load" 'BEGIN {
        printf "| `%s` | %.2f (%.2f..%.2f) | %.2f | %.0f | %.1f M | %.0f M | %.1f | %s |\n",
               a, w, lo, hi, u, r / w, g / w / 1e6, (g + p) / w / 1e6, kb * 1024 / 1e6, l }'
  done
  echo
  echo "Requests: $(json_int total "$dir/out.json" || echo ?), generated tokens: $(json_int generated_tokens "$dir/out.json" || echo ?),"
  echo "prompt tokens: $(json_int prompt_tokens "$dir/out.json" || echo ?) (the same for every allocator in demand mode). Rates are per"
  echo "second of median wall time. CPU is the median of user + sys. Peak RSS is the maximum over the runs"
  echo "(/usr/bin/time's %M, KiB x 1024 / 10^6). Commands:"
  echo
  echo '```sh'
  printf '%s\n' "${commands[@]}"
  echo '```'
  echo
}

run_table "Demand mode (every allocator unbounded, the same schedule)"

# --- the same replay in process ----------------------------------------------------------
# kvsim::replay() alone (bench/replay_bench.cc): no option parsing, no worker thread, no
# output, and none of the command line's 200 ms progress polling, which rounds the wall time
# of `kvsim replay` up to the next multiple of 0.2 s (cmd_replay.cc's main thread sleeps in
# 200 ms steps until the workers finish).
INPROC=${INPROC:-"paged dense-static:reserve=max-model-len"}
if [[ -x $BENCH && -n $INPROC ]]; then
  echo "### The same replay in process (kvsim::replay() only)"
  echo
  echo "| allocator | wall ms (median of $RUNS) | CPU ms | requests/s | generated tokens/s | load before |"
  echo "|---|---|---|---|---|---|"
  for a in $INPROC; do
    load=$(load1)
    KVSIM_BENCH_TRACE=$trace KVSIM_BENCH_ALLOCATORS=$a "$BENCH" --benchmark_filter='^BM_Replay/' \
      --benchmark_repetitions="$RUNS" --benchmark_report_aggregates_only=true 2>/dev/null |
      awk -v a="$a" -v l="$load" -v m="$(agg)" '$1 ~ m {
        for (i = 1; i <= NF; ++i) {
          if ($i ~ /^items_per_second=/) { split($i, x, "="); r = x[2] }
          if ($i ~ /^generated_tokens_per_s=/) { split($i, y, "="); g = y[2] }
        }
        printf "| `%s` | %s | %s | %s | %s | %s |\n", a, $2, $4, r, g, l }'
  done
  echo
  echo '```sh'
  echo "KVSIM_BENCH_TRACE=$trace KVSIM_BENCH_ALLOCATORS='$INPROC' $BENCH --benchmark_filter='^BM_Replay/' --benchmark_repetitions=$RUNS --benchmark_report_aggregates_only=true"
  echo '```'
  echo
fi

# --- budget mode -------------------------------------------------------------------------
# The same table under a memory budget (admission, queueing, preemption): BUDGET is any of
# replay's budget options, e.g. BUDGET="--kv-budget 20GiB" or "--device RTX-4090".
BUDGET=${BUDGET:-"--device H100-80GB"}
read -r -a budget_args <<<"$BUDGET"
if "$KVSIM" replay traces/chat-mix.csv --allocator paged --jobs 1 --quiet "${budget_args[@]}" >/dev/null 2>&1; then
  run_table "Under a budget ($BUDGET)" "${budget_args[@]}"
else
  echo "### Under a budget ($BUDGET)"
  echo
  echo "Not measured: this kvsim does not replay under a memory budget yet ($("$KVSIM" replay traces/chat-mix.csv \
    --allocator paged --jobs 1 --quiet "${budget_args[@]}" 2>&1 | head -1))."
  echo
fi
