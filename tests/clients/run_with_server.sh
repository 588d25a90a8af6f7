#!/usr/bin/env bash
# run_with_server.sh MOLT_BINARY LADDER [SERVER_ARGS...] -- CMD [ARGS...]
#
# Starts `MOLT_BINARY serve --ladder LADDER --port 0 --min-round-ms 5 [SERVER_ARGS...]`, waits (30 s at
# most) for its first stdout line `molt serve: listening on http://127.0.0.1:PORT`, exports
# MOLT_URL=http://127.0.0.1:PORT (and MOLT_SERVER_PID), runs CMD, then stops the server with SIGTERM
# (unless CMD already did) and checks that it exited 0. Returns CMD's status (or 1 if CMD passed but the server did not stop cleanly). The
# server's stdout and stderr go to a log (MOLT_SERVER_LOG, default a temporary file) that is
# printed when anything fails.
set -u

if [ $# -lt 4 ]; then
  echo "usage: $0 MOLT_BINARY LADDER [SERVER_ARGS...] -- CMD [ARGS...]" >&2
  exit 2
fi
molt=$1 ladder=$2
shift 2
server_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do server_args+=("$1"); shift; done
if [ $# -lt 2 ] || [ "$1" != "--" ]; then
  echo "$0: missing '-- CMD'" >&2
  exit 2
fi
shift

work=$(mktemp -d "${TMPDIR:-/tmp}/molt-serve.XXXXXX")
out=$work/stdout
log=${MOLT_SERVER_LOG:-$work/server.log}
server_pid=
keep_work=0

show_log() {
  echo "---- molt serve stdout ($out) ----" >&2
  cat "$out" >&2 2>/dev/null || true
  echo "---- molt serve stderr ($log) ----" >&2
  tail -n 200 "$log" >&2 2>/dev/null || true
  echo "----" >&2
}
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  [ "$keep_work" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$molt" serve --ladder "$ladder" --port 0 --min-round-ms 5 "${server_args[@]}" >"$out" 2>"$log" &
server_pid=$!

url=
for _ in $(seq 1 300); do   # 30 s in steps of 0.1 s
  line=$(head -n 1 "$out" 2>/dev/null)
  case $line in
    *"listening on http://"*) url=${line##*listening on }; break ;;
  esac
  if ! kill -0 "$server_pid" 2>/dev/null; then
    wait "$server_pid"; rc=$?
    echo "$0: molt serve exited ($rc) before listening" >&2
    keep_work=1; show_log; exit 1
  fi
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "$0: no 'listening on' line from molt serve within 30 s" >&2
  keep_work=1; show_log; exit 1
fi
url=${url%%[[:space:]]*}
url=${url%/}
export MOLT_URL=$url MOLT_SERVER_PID=$server_pid
echo "molt serve on $MOLT_URL (pid $server_pid)" >&2

"$@"
status=$?

kill -TERM "$server_pid" 2>/dev/null
stopped=0
for _ in $(seq 1 150); do   # 15 s to stop
  if ! kill -0 "$server_pid" 2>/dev/null; then stopped=1; break; fi
  sleep 0.1
done
if [ "$stopped" = 1 ]; then
  wait "$server_pid"; server_rc=$?
else
  echo "$0: molt serve did not stop within 15 s of SIGTERM; killing it" >&2
  kill -KILL "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null
  server_rc=137
fi
server_pid=

if [ "$server_rc" != 0 ]; then
  echo "$0: molt serve exited $server_rc after SIGTERM (expected 0: a clean stop)" >&2
  [ "$status" = 0 ] && status=1
fi
if [ "$status" != 0 ]; then
  echo "$0: failed (command status $status, server status $server_rc)" >&2
  keep_work=1; show_log
fi
exit "$status"
