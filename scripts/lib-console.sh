# Shared by the console's benchmarks (sourced, not run): `console_at_scale BIN WORK` writes a
# map of 1,000 devices (10 zones x 100 hosts, `optio map init --pg-num 32768`: the PG pools at
# 32,768 PGs; no servers) and a keyring into WORK, starts `optio console` on them (niced by
# $OPTIO_CONSOLE_NICE when set) and sets `console_pid`, `base` (its URL) and `key` (the
# admin's key). The caller's EXIT trap kills `console_pid`.
console_at_scale() {
  local bin=$1 work=$2
  "$bin" map init --map "$work/map.toml" --zones 10 --hosts 100 --pg-num 32768 > /dev/null 2>&1
  "$bin" auth init --keyring "$work/keyring" > /dev/null
  ${OPTIO_CONSOLE_NICE:+nice -n $OPTIO_CONSOLE_NICE} "$bin" console --map "$work/map.toml" \
    --auth-keyring "$work/keyring" --listen 127.0.0.1:0 > "$work/console.log" 2>&1 &
  console_pid=$!
  for _ in $(seq 300); do grep -q "listening on" "$work/console.log" && break; sleep 0.1; done
  base=$(grep -o 'http://[0-9.:]*' "$work/console.log" | head -1)
  [ -n "$base" ] || { cat "$work/console.log" >&2; return 1; }
  key=$(grep -o 'key = "[^"]*"' "$work/keyring" | head -1 | cut -d'"' -f2)
}
