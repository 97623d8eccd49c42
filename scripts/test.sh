#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine: installs what the tests need (Ceph's
# crushtool/osdmaptool as the CRUSH oracle, etcd for the map store, redis-server for the dirty
# table — the tests start their own, nothing runs them as services —, …), then format, lint and
# every test.
# `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use, as "command:package".
needs=(crushtool:ceph-base osdmaptool:ceph-base etcd:etcd-server redis-server:redis-server)
missing=()
for need in "${needs[@]}"; do
  command -v "${need%%:*}" >/dev/null 2>&1 || missing+=("${need#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  echo "installing: $packages"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -q
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q $packages
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
