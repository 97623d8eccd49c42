#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine: installs what the tests need (Ceph's
# crushtool/osdmaptool as the CRUSH oracle, etcd for the map store, redis-server for the dirty
# table — the tests start their own, nothing runs them as services —, qemu's qemu-img and qemu-io
# as NBD clients, fio, libnbd's nbdinfo/nbdcopy/nbdfuse and e2fsprogs for block volumes, the
# AWS CLI, rclone, s3cmd and boto3 as S3 clients, promtool to check /metrics, Node for the
# console page's script, headless Chromium and chromedriver, and headless Firefox ESR, for the
# console in real browsers, …), then
# format, lint and every test.
# `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use, as "command:package".
needs=(crushtool:ceph-base osdmaptool:ceph-base etcd:etcd-server redis-server:redis-server
  qemu-io:qemu-utils qemu-img:qemu-utils fio:fio nbdinfo:libnbd-bin nbdcopy:libnbd-bin
  nbdfuse:nbdfuse mkfs.ext4:e2fsprogs debugfs:e2fsprogs e2fsck:e2fsprogs
  aws:awscli rclone:rclone s3cmd:s3cmd curl:curl promtool:prometheus node:nodejs
  chromium:chromium chromedriver:chromium-driver firefox-esr:firefox-esr)
missing=()
for need in "${needs[@]}"; do
  command -v "${need%%:*}" >/dev/null 2>&1 || missing+=("${need#*:}")
done
# boto3, for Debian's python3 (the S3 tests look there first).
/usr/bin/python3 -c 'import boto3' >/dev/null 2>&1 || missing+=(python3-boto3)
if [ ${#missing[@]} -gt 0 ]; then
  packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  echo "installing: $packages"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -q
  # Packages with services (etcd, Redis) must not start them: the tests start their own.
  # A policy-rc.d that says "no" keeps their install scripts from trying, on machines that
  # lack one; it is removed afterwards.
  policy=/usr/sbin/policy-rc.d
  added_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod +x "$policy"
    added_policy=1
  fi
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q $packages
  if [ -n "$added_policy" ]; then $sudo rm -f "$policy"; fi
fi

cargo fmt --all -- --check
# No merge left half done: a conflict marker at the start of a line in any tracked file.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
  git grep -n -I -E '^(<<<<<<< |>>>>>>> )' -- . ':!target'; then
  echo "merge conflict markers in the files above: resolve them" >&2
  exit 1
fi
# No import cycle between the modules of a crate, but the known ones being taken apart.
python3 scripts/module-cycles.py --known scripts/known-cycles.txt
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# docs/deploy.md's three-host walkthrough, the hosts in network namespaces.
scripts/deploy-netns.sh
# Ceph's S3 conformance suite (core selection) on the gateway: no fewer may pass than
# docs/s3.md records.
# (The suite is not part of this repository: it is looked for in $S3_TESTS, then beside the
# checkout in ../shared/anchors/s3-tests, then in /work/shared/anchors/s3-tests.)
if scripts/s3-conformance.sh --find >/dev/null; then
  scripts/s3-conformance.sh --min 156
else
  echo "warning: Ceph's s3-tests not found; set S3_TESTS=DIR to run the S3 conformance suite" >&2
fi
