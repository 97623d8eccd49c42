#!/usr/bin/env bash
# The console's page in a real browser at the balanced engines' published scale (issue 42: the
# overview and devices pages complete, API answers included, in <= 300 ms): a map of 1,000
# devices (10 zones x 100 hosts, `optio map init --pg-num 32768`; no servers), the console on
# it, Debian's headless chromium driven by chromedriver (W3C WebDriver, with curl). After a
# login through the page, each load is timed from the navigation's start until the page has
# filled its overview, devices (the first page of 100 rows of 1,000), pools and placement plots
# and painted them: the page marks that moment (`performance.mark("optio-console-filled")`). First at an epoch (the map changed just
# before: the console's caches cold) and repeated loads, ROUNDS times each.
# With SCREENSHOTS=DIR, the whole page at 1,000 devices is kept there as PNG (1280 px wide).
# Usage: scripts/bench-console-browser.sh [BUILD (target/debug/optio)] [ROUNDS (3)]
set -euo pipefail
bin=${1:-target/debug/optio} rounds=${2:-3}
[ -x "$bin" ] || { echo "$bin: not an executable (cargo build -p optio)" >&2; exit 1; }
for tool in curl:curl jq:jq chromium:chromium chromedriver:chromium-driver; do
  command -v "${tool%%:*}" >/dev/null ||
    { echo "${tool%%:*} not found: apt-get install -y ${tool#*:}" >&2; exit 1; }
done
work=$(mktemp -d)
console_pid="" driver_pid="" session=""
cleanup() {
  [ -n "$session" ] && curl -s -X DELETE "$session" >/dev/null 2>&1 || true
  [ -n "$driver_pid" ] && kill "$driver_pid" 2>/dev/null && wait "$driver_pid" 2>/dev/null
  [ -n "$console_pid" ] && kill "$console_pid" 2>/dev/null && wait "$console_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
. "$(dirname "$0")/lib-console.sh"
console_at_scale "$bin" "$work"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
chromedriver --port="$port" > "$work/chromedriver.log" 2>&1 &
driver_pid=$!
driver="http://127.0.0.1:$port"
for _ in $(seq 100); do curl -sf "$driver/status" 2>/dev/null | jq -e .value.ready >/dev/null && break; sleep 0.1; done
capabilities=$(jq -n --arg profile "$work/profile" '{capabilities: {alwaysMatch: {
  browserName: "chrome", unhandledPromptBehavior: "ignore",
  "goog:chromeOptions": {binary: "/usr/bin/chromium", args: ["--headless", "--no-sandbox",
    "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
    ("--user-data-dir=" + $profile), "--window-size=1280,900"]}}}}')
id=$(curl -sf -H 'content-type: application/json' -d "$capabilities" "$driver/session" | jq -r .value.sessionId)
session="$driver/session/$id"
wd() { curl -sf -H 'content-type: application/json' -d "$2" "$session$1"; }
js() { wd /execute/sync "$(jq -n --arg s "$1" '{script: $s, args: []}')" | jq -r .value; }
# Loads the page; prints the milliseconds from the navigation's start until it was filled, and
# in brackets until its script started (DOMContentLoaded) and until the last API answer of the
# first refresh arrived (the rest is drawing).
load() {
  wd /url "$(jq -n --arg u "$base/" '{url: $u}')" >/dev/null
  for _ in $(seq 600); do
    filled=$(js "const m = performance.getEntriesByName('optio-console-filled')[0];
      if (!m || document.querySelectorAll('#devices tbody tr').length !== 100 ||
        !document.getElementById('devices-shown').textContent.endsWith('of 1000')) return null;
      const api = performance.getEntriesByType('resource')
        .filter((e) => e.name.includes('/api/v1/') && e.responseEnd <= m.startTime);
      const nav = performance.getEntriesByType('navigation')[0];
      return Math.round(m.startTime) + '(' + Math.round(nav.domContentLoadedEventStart) + ',' +
        Math.round(Math.max(...api.map((e) => e.responseEnd))) + ')'")
    [ "$filled" != "null" ] && { echo "$filled"; return; }
    sleep 0.05
  done
  echo "the page was not filled within 30 s" >&2
  exit 1
}

# Log in through the page's form (the session cookie then stays in the browser).
wd /url "$(jq -n --arg u "$base/" '{url: $u}')" >/dev/null
for _ in $(seq 100); do [ "$(js "return !document.getElementById('login').hidden")" = true ] && break; sleep 0.1; done
js "const f = document.getElementById('login-form');
  f.elements.namedItem('key').value = '$key'; f.requestSubmit(); return true" >/dev/null
for _ in $(seq 600); do [ "$(js "return document.body.dataset.filled === 'true'")" = true ] && break; sleep 0.05; done

echo "1,000 devices, 32,768 PGs per PG pool; $bin"
echo "ms from the navigation to the page filled (script started, last API answer in)"
echo "(chromium $(chromium --version 2>/dev/null | awk '{print $2}'), headless)"
first="" settled="" then=""
for round in $(seq "$rounds"); do
  # A new epoch: the console's caches cold, as after any map change.
  weight=$([ $((round % 2)) -eq 1 ] && echo 0.9 || echo 1.0)
  "$bin" map reweight --map "$work/map.toml" osd.5 "$weight" > /dev/null 2>&1
  first="$first $(load)"
  # Another new epoch, loaded two seconds after the change: the console's warmer (a look at
  # the map every second) has placed it by then, as for anyone who opens the page later.
  "$bin" map reweight --map "$work/map.toml" osd.6 "$weight" > /dev/null 2>&1
  sleep 2
  settled="$settled $(load)"
  for _ in $(seq "$rounds"); do then="$then $(load)"; done
done
# The drawing alone: the device rows built again and laid out (a page of 100, then all 1,000),
# and the pools' plots.
draw="" all=""
for _ in $(seq "$rounds"); do
  for size in 100 Infinity; do
    took=$(js "state.pageSize = $size; const t = performance.now(); state.rows.clear(); renderDevices();
      const rows = performance.now(); document.body.offsetHeight; const laid = performance.now();
      renderPlacement(); const plots = performance.now();
      return Math.round(rows - t) + '+' + Math.round(laid - rows) + '+' + Math.round(plots - laid)")
    if [ "$size" = 100 ]; then draw="$draw $took"; else all="$all $took"; fi
  done
done
if [ -n "${SCREENSHOTS:-}" ]; then
  mkdir -p "$SCREENSHOTS"
  js "state.pageSize = 100; state.page = 0; renderDevices(); return true" >/dev/null
  height=$(js "return document.documentElement.scrollHeight + window.outerHeight - window.innerHeight")
  wd /window/rect "{\"width\": 1280, \"height\": $height}" >/dev/null
  sleep 0.5
  curl -sf "$session/screenshot" | jq -r .value | base64 -d > "$SCREENSHOTS/console-1000-devices.png"
  echo "screenshot: $SCREENSHOTS/console-1000-devices.png"
fi
printf 'first load at an epoch, right after the change (ms):%s\n' "$first"
printf 'first load at an epoch, 2 s after the change (ms):%s\n' "$settled"
printf 'repeated loads (ms):%s\n' "$then"
printf 'drawing alone (ms: rows built + laid out + 6 plots), a page of 100 rows:%s\n' "$draw"
printf '  and all 1,000 rows ("show all"):%s\n' "$all"
