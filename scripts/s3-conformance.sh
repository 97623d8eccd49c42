#!/usr/bin/env bash
# Runs the core selection of Ceph's S3 conformance suite (s3-tests, in
# ../shared/anchors/s3-tests or $S3_TESTS) against `optio s3` on a fresh local cluster, and
# prints how many pass. With --min N it fails when fewer than N pass (the test command uses the
# count recorded in docs/s3.md, so a regression fails CI).
#
#   scripts/s3-conformance.sh [--min N] [--junit FILE] [-- extra pytest arguments]
#   scripts/s3-conformance.sh --find      (prints where the suite is; fails if nowhere)
set -euo pipefail
cd "$(dirname "$0")/.."
min=0
junit=""
find_only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --find) find_only=1; shift ;;
    --min) min="$2"; shift 2 ;;
    --junit) junit="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
suite=""
for candidate in "${S3_TESTS:-}" "$(pwd)/../shared/anchors/s3-tests" /work/shared/anchors/s3-tests; do
  if [ -n "$candidate" ] && [ -d "$candidate/s3tests" ]; then suite="$candidate"; break; fi
done
[ -n "$suite" ] || { echo "Ceph's s3-tests not found: set S3_TESTS=DIR" >&2; exit 2; }
if [ -n "$find_only" ]; then echo "$suite"; exit 0; fi
venv="${S3_TESTS_VENV:-${TMPDIR:-/tmp}/optio-s3-tests-venv}"
if [ ! -x "$venv/bin/pytest" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$suite/requirements.txt"
fi
cargo build -q --locked --bin optio
optio="$(pwd)/target/debug/optio"
work=$(mktemp -d)
cleanup() {
  [ -n "${gateway:-}" ] && kill "$gateway" 2>/dev/null || true
  [ -n "${cluster:-}" ] && kill "$cluster" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
"$optio" up --dir "$work/cluster" >"$work/up.log" 2>&1 &
cluster=$!
for _ in $(seq 1 200); do
  "$optio" status --cluster "$work/cluster" >/dev/null 2>&1 && break
  sleep 0.2
done
export OPTIO_CLUSTER="$work/cluster"
keys() { "$optio" s3 user create "$1" --json; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])['$2'])" "$1"; }
main=$(keys main); alt=$(keys alt); tenant=$(keys tenant)
s3port=$(port)
"$optio" s3 --listen "127.0.0.1:$s3port" >"$work/s3.log" 2>&1 &
gateway=$!
for _ in $(seq 1 100); do
  curl -s -o /dev/null "http://127.0.0.1:$s3port/_optio/metrics" && break
  sleep 0.1
done
cat >"$work/s3tests.conf" <<CONF
[DEFAULT]
host = 127.0.0.1
port = $s3port
is_secure = False
ssl_verify = False
[fixtures]
bucket prefix = optio-{random}-
iam name prefix = s3-tests-
iam path prefix = /s3-tests/
[s3 main]
display_name = M. Tester
user_id = testid
email = tester@example.com
api_name = default
access_key = $(field "$main" access_key)
secret_key = $(field "$main" secret_key)
[s3 alt]
display_name = john.doe
email = john.doe@example.com
user_id = 56789abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234
access_key = $(field "$alt" access_key)
secret_key = $(field "$alt" secret_key)
[s3 tenant]
display_name = testx\$tenanteduser
user_id = testx\$9876543210abcdef0123456789abcdef0123456789abcdef0123456789abcdef
access_key = $(field "$tenant" access_key)
secret_key = $(field "$tenant" secret_key)
email = tenanteduser@example.com
tenant = testx
[iam]
email = s3@example.com
user_id = 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
access_key = $(field "$main" access_key)
secret_key = $(field "$main" secret_key)
display_name = youruseridhere
[iam root]
access_key = $(field "$main" access_key)
secret_key = $(field "$main" secret_key)
user_id = RGW11111111111111111
email = account1@example.com
[iam alt root]
access_key = $(field "$alt" access_key)
secret_key = $(field "$alt" secret_key)
user_id = RGW22222222222222222
email = account2@example.com
CONF
M=$(sed -n 's/^M=//p' "$suite/core-selection.txt")
K=$(sed -n 's/^K=//p' "$suite/core-selection.txt")
report="$work/junit.xml"
set +e
(cd "$suite" && S3TEST_CONF="$work/s3tests.conf" "$venv/bin/pytest" -q -p no:cacheprovider \
  s3tests/functional/test_s3.py -m "$M" -k "$K" --junitxml="$report" "$@") >"$work/pytest.log" 2>&1
set -e
[ -n "$junit" ] && cp "$report" "$junit"
tail -3 "$work/pytest.log"
python3 - "$report" "$min" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
cases = root.iter("testcase")
passed = failed = skipped = 0
failures = []
for case in cases:
    if case.find("failure") is not None or case.find("error") is not None:
        failed += 1
        failures.append(case.get("name"))
    elif case.find("skipped") is not None:
        skipped += 1
    else:
        passed += 1
total = passed + failed + skipped
print(f"s3-tests core selection: {passed} of {total} passed ({failed} failed, {skipped} skipped)")
for name in sorted(failures):
    print(f"  failed: {name}")
if passed < int(sys.argv[2]):
    sys.exit(f"fewer than {sys.argv[2]} passed")
PY
