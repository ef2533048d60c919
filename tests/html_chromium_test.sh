#!/usr/bin/env bash
# Renders the bundled example's HTML report (kvsim replay traces/chat-mix.csv --html) in
# headless Chromium and checks that it is well-formed XML (python3's parser), that it loads
# with no console message (errors included), and that the page's own check (its inline
# script: every chart announced is present and draws something) wrote "selfcheck ok" into
# the DOM. Usage: html_chromium_test.sh KVSIM SOURCE_DIR
# Exits 77 (skipped) when Chromium is not installed, unless KVSIM_REQUIRE_CHROMIUM=1 (CI's
# checked stage), where its absence fails.
set -euo pipefail
kvsim=$1
src=$2
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$browser" ]]; then
  if [[ "${KVSIM_REQUIRE_CHROMIUM:-0}" == 1 ]]; then
    echo "chromium is not installed, and KVSIM_REQUIRE_CHROMIUM=1: run tools/install-deps" >&2
    exit 1
  fi
  echo "skipped: chromium is not installed (tools/install-deps installs Debian's chromium)"
  exit 77
fi
work=$(mktemp -d)
pid=
cleanup() {
  # Chromium's helpers (zygote, GPU, renderer) share its process group: end them all.
  if [[ -n "$pid" ]]; then kill -- -"$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$kvsim" replay "$src/traces/chat-mix.csv" --html "$work/report.html" --quiet >/dev/null
python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' "$work/report.html"

# Its own session (process group), so that cleanup ends every helper it started.
setsid timeout 60 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
  --user-data-dir="$work/profile" --enable-logging=stderr --v=0 --virtual-time-budget=2000 \
  --dump-dom "file://$work/report.html" >"$work/dom.html" 2>"$work/log.txt" &
pid=$!
status=0
wait "$pid" || status=$?
if [[ $status -ne 0 ]]; then
  echo "chromium exited with $status:" >&2
  cat "$work/log.txt" >&2
  exit 1
fi
if grep -q 'CONSOLE' "$work/log.txt"; then
  echo "the page wrote to the console (an error, or a message it should not print):" >&2
  grep 'CONSOLE' "$work/log.txt" >&2
  exit 1
fi
verdict=$(grep -o 'id="kvsim-selfcheck"[^>]*>[^<]*' "$work/dom.html" | sed 's/.*>//' || true)
echo "$verdict"
# The default four allocators: the breakdown, four occupancy charts, running and queued, and
# the TTFT, TPOT and end-to-end CDFs.
if [[ "$verdict" != "selfcheck ok: 9 charts" ]]; then
  echo "expected 'selfcheck ok: 9 charts' in the rendered page" >&2
  exit 1
fi
