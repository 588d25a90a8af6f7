#!/usr/bin/env bash
# SIGTERM during an answer (run through run_with_server.sh: MOLT_URL, MOLT_SERVER_PID).
#
# Streams a long chat completion with curl -N, sends the server SIGTERM after a few data lines and
# checks that the stream ends with `data: {"error": {message, type, param, code}}` then `data: [DONE]`,
# that an open /v1/molt/events stream is closed, and that the server exits within 15 s
# (run_with_server.sh then checks that it exited 0).
set -u
: "${MOLT_URL:?MOLT_URL is not set (run through run_with_server.sh)}"
: "${MOLT_SERVER_PID:?MOLT_SERVER_PID is not set (run through run_with_server.sh)}"
base=${MOLT_URL%/}
key=${MOLT_API_KEY:-molt-test-no-key}
command -v jq >/dev/null || { echo "shutdown_stream: FAIL: jq is not installed (apt-get install jq)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/molt-shutdown.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "shutdown_stream: FAIL: $*" >&2
  [ -s "$tmp/stream" ] && { echo "---- SSE body (last 6 lines) ----" >&2; tail -n 6 "$tmp/stream" >&2; }
  exit 1
}

# a page's EventSource is open too: it must end, not hold the server up
curl -sN -o "$tmp/events" --max-time 60 -H "Authorization: Bearer $key" "$base/v1/molt/events" &
events_pid=$!
curl -sN -o "$tmp/stream" --max-time 60 -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
     -d '{"max_tokens": 1000, "temperature": 0, "stream": true, "ignore_eos": true,
          "messages": [{"role": "user", "content": "The driver will be able to use the driver to do it"}]}' \
     "$base/v1/chat/completions" &
curl_pid=$!
# Both streams under way before the signal: a few answer chunks, and a scheduler round on the
# events stream (at most ~10 a second, so a fast answer can be 5 chunks in before the first).
for _ in $(seq 1 600); do
  n=$(grep -c '^data: {' "$tmp/stream" 2>/dev/null)
  [ "${n:-0}" -ge 5 ] && grep -q '^data: {"' "$tmp/events" 2>/dev/null && break
  kill -0 "$curl_pid" 2>/dev/null || break
  sleep 0.05
done
lines=$(grep -c '^data: {' "$tmp/stream" 2>/dev/null); lines=${lines:-0}
[ "$lines" -ge 5 ] || fail "the stream ended after $lines data line(s), before the server could be stopped"
kill -TERM "$MOLT_SERVER_PID" || fail "could not signal the server ($MOLT_SERVER_PID)"
start=$(date +%s%N)
wait "$curl_pid"; rc=$?
[ "$rc" = 0 ] || fail "curl -N exited $rc (the stream was cut rather than closed)"
wait "$events_pid"; rc=$?
[ "$rc" = 0 ] || fail "curl on /v1/molt/events exited $rc after SIGTERM (0: the server closed it)"
grep -q '^data: {"' "$tmp/events" || fail "no event on /v1/molt/events before SIGTERM"
for _ in $(seq 1 150); do kill -0 "$MOLT_SERVER_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$MOLT_SERVER_PID" 2>/dev/null && fail "the server still runs 15 s after SIGTERM"
stop_ms=$(( ($(date +%s%N) - start) / 1000000 ))

tr -d '\r' <"$tmp/stream" | grep -v '^$' >"$tmp/sse"
[ "$(tail -n 1 "$tmp/sse")" = "data: [DONE]" ] || fail "the stream does not end with data: [DONE]"
err=$(tail -n 2 "$tmp/sse" | head -n 1 | sed -n 's/^data: //p')
jq -e '.error | (.message | type) == "string" and has("type") and has("param") and has("code")' <<<"$err" >/dev/null 2>&1 \
  || fail "the chunk before [DONE] is not {error: {message, type, param, code}}: $err"
tokens=$(sed -n 's/^data: //p' "$tmp/sse" | grep -v '^\[DONE\]$' | jq -s '[.[] | select(.molt.index != null)] | length')
[ "$(grep -c '"finish_reason":"\(stop\|length\)"' "$tmp/sse")" = 0 ] || fail "an answer cut by SIGTERM has a finish_reason"
echo "shutdown_stream: $tokens token(s), then $(jq -c .error <<<"$err"); server gone ${stop_ms} ms after SIGTERM"
echo "shutdown_stream: ok"
