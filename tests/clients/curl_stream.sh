#!/usr/bin/env bash
# curl + jq against `molt serve` (started by run_with_server.sh; base URL in MOLT_URL).
#
# Streams a chat completion with `curl -N`, squeezes the budget to the rung below the top after the
# third data line (POST /v1/molt/budget {"rung": …}), and checks the SSE body with jq: 200 and
# text/event-stream, `data: [DONE]` last, no error, contiguous molt.index from 0, every token chunk
# naming its rung, exactly one migration chunk (top → below), a finishing chunk with finish_reason and
# molt.done.killed == false, then usage. Then one non-streamed answer. Exit 0 on success.
set -u
: "${MOLT_URL:?MOLT_URL is not set (run through run_with_server.sh)}"
base=${MOLT_URL%/}
key=${MOLT_API_KEY:-molt-test-no-key}
command -v jq >/dev/null || { echo "curl_stream: FAIL: jq is not installed (apt-get install jq)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/molt-curl.XXXXXX")
curl_pid=
cleanup() {
  [ -n "$curl_pid" ] && kill "$curl_pid" 2>/dev/null
  curl -s -o /dev/null -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
       -d '{"mib": null}' "$base/v1/molt/budget" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "curl_stream: FAIL: $*" >&2
  if [ -s "$tmp/stream" ]; then echo "---- SSE body (first 40 lines) ----" >&2; head -n 40 "$tmp/stream" >&2; fi
  exit 1
}
# molt_call METHOD PATH [BODY]: the JSON reply on stdout; fails on a non-2xx status
molt_call() {
  local code
  if [ $# -ge 3 ]; then
    code=$(curl -s -o "$tmp/reply" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $key" \
           -H 'Content-Type: application/json' -d "$3" "$base$2") || fail "curl $1 $2 failed"
  else
    code=$(curl -s -o "$tmp/reply" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $key" "$base$2") \
      || fail "curl $1 $2 failed"
  fi
  case $code in 2??) ;; *) fail "$1 $2 ${3:-} answered $code: $(cat "$tmp/reply")" ;; esac
  cat "$tmp/reply"
}

health=$(curl -s "$base/health") || fail "GET /health failed"
[ "$(jq -r .status <<<"$health")" = ok ] || fail "GET /health: $health"

models=$(molt_call GET /v1/models) || exit 1
ladder=$(jq -r '[.data[] | select(.molt.rungs)][0].id // empty' <<<"$models")
[ -n "$ladder" ] || fail "/v1/models lists no ladder: $models"
mapfile -t rungs < <(jq -r --arg l "$ladder" '.data[] | select(.id == $l) | .molt.rungs[].name' <<<"$models")
[ "${#rungs[@]}" -ge 2 ] || fail "the ladder needs two rungs: ${rungs[*]}"
top=${rungs[0]} below=${rungs[1]}
echo "ladder $ladder: rungs ${rungs[*]}; will squeeze $top → $below"
molt_call POST /v1/molt/budget '{"mib": null}' >/dev/null || exit 1

request=$(jq -nc --arg m "$ladder" '{model: $m, max_tokens: 120, temperature: 0, stream: true,
  stream_options: {include_usage: true}, ignore_eos: true,
  messages: [{role: "user", content: "The driver will be able to use the driver to do it"}]}')
curl -sN -D "$tmp/headers" -o "$tmp/stream" --max-time 60 -H "Authorization: Bearer $key" \
     -H 'Content-Type: application/json' -H 'Accept: text/event-stream' -d "$request" \
     "$base/v1/chat/completions" &
curl_pid=$!

# after the third data line, cut the budget to the rung below the top
squeezed=
for _ in $(seq 1 600); do   # 60 s
  n=$(grep -c '^data: {' "$tmp/stream" 2>/dev/null); n=${n:-0}
  if [ "$n" -ge 3 ]; then
    reply=$(molt_call POST /v1/molt/budget "{\"rung\": \"$below\"}") || exit 1
    echo "after $n data line(s): squeezed to $below: $reply"
    [ "$(jq -r '.budget_mib | type' <<<"$reply")" = number ] || fail "squeeze reply: $reply"
    squeezed=1
    break
  fi
  kill -0 "$curl_pid" 2>/dev/null || break
  sleep 0.1
done
wait "$curl_pid"; rc=$?; curl_pid=
[ "$rc" = 0 ] || fail "curl -N exited $rc"
[ -n "$squeezed" ] || fail "the stream ended before 3 data lines: $(grep -c '^data: {' "$tmp/stream") line(s)"

status=$(head -n 1 "$tmp/headers" | awk '{print $2}')
[ "$status" = 200 ] || fail "streamed request answered $status"
grep -qi '^content-type: *text/event-stream' "$tmp/headers" || fail "content-type is not text/event-stream: $(grep -i '^content-type' "$tmp/headers")"
# every non-blank line is `data: …`, the last one `data: [DONE]`
tr -d '\r' <"$tmp/stream" >"$tmp/sse"
bad=$(grep -v '^$' "$tmp/sse" | grep -v '^data: ' | head -n 1)
[ -z "$bad" ] || fail "a non-data SSE line: $bad"
[ "$(grep -v '^$' "$tmp/sse" | tail -n 1)" = "data: [DONE]" ] || fail "the stream does not end with data: [DONE]"
[ "$(grep -c '^data: \[DONE\]$' "$tmp/sse")" = 1 ] || fail "more than one data: [DONE]"
sed -n 's/^data: //p' "$tmp/sse" | grep -v '^\[DONE\]$' >"$tmp/chunks.jsonl"
jq -e . "$tmp/chunks.jsonl" >/dev/null 2>&1 || fail "a data line is not JSON"

# jq checks: each prints "ok" or a reason
jcheck() {
  local what=$1 prog=$2 out
  out=$(jq -rs --arg top "$top" --arg below "$below" "$prog" "$tmp/chunks.jsonl" 2>&1) || fail "$what: jq: $out"
  [ "$out" = ok ] || fail "$what: $out"
}
jcheck "no error chunk" 'if any(.[]; has("error")) then (map(select(has("error")))[0] | tostring) else "ok" end'
jcheck "chunk objects" 'if all(.[]; .object == "chat.completion.chunk" and (.id | startswith("chatcmpl-"))) then "ok" else "bad object/id" end'
jcheck "first delta role" 'if .[0].choices[0].delta.role == "assistant" then "ok" else (.[0] | tostring) end'
jcheck "contiguous molt.index" '[.[] | select(.molt.index != null) | .molt.index] as $i
  | if ($i | length) > 0 and $i == [range(0; $i | length)] then "ok" else ($i | tostring) end'
jcheck "token chunks name their rung and carry content" '[.[] | select(.molt.index != null)
  | select((.molt.rung | type) != "string" or (.choices[0].delta.content | type) != "string")]
  | if length == 0 then "ok" else (.[0] | tostring) end'
jcheck "no content outside token chunks" '[.[] | select(.molt.index == null) | select((.choices[0].delta.content // "") != "")]
  | if length == 0 then "ok" else (.[0] | tostring) end'
jcheck "exactly one migration, top → below" '[.[] | select(.molt.migration)] as $m
  | if ($m | length) != 1 then "\($m | length) migration chunks: \($m | map(.molt) | tostring)"
    elif $m[0].molt.migration.from != $top or $m[0].molt.migration.to != $below then ($m[0].molt | tostring)
    elif $m[0].molt.rung != $below then "migration chunk molt.rung: \($m[0].molt | tostring)"
    else "ok" end'
jcheck "tokens on top before the migration, below after" '
  (map(.molt.migration != null) | index(true)) as $k
  | [.[:$k][] | select(.molt.index != null) | .molt.rung] as $before
  | [.[$k:][] | select(.molt.index != null) | .molt.rung] as $after
  | if all($before[]; . == $top) and all($after[]; . == $below) and ($after | length) > 0 then "ok"
    else "before \($before | unique) after \($after | unique)" end'
jcheck "finishing chunk" '[.[] | select(any(.choices[]?; .finish_reason != null))] as $f
  | [.[] | select(.molt.index != null)] as $t
  | if ($f | length) != 1 then "\($f | length) chunks with finish_reason"
    elif ($f[0].choices[0].finish_reason | IN("stop", "length") | not) then ($f[0] | tostring)
    elif $f[0].molt.done.killed != false then "killed: \($f[0].molt.done | tostring)"
    elif $f[0].molt.done.tokens != ($t | length) then "done.tokens \($f[0].molt.done.tokens) != \($t | length)"
    elif $f[0].molt.done.migrations != 1 then "done.migrations \($f[0].molt.done.migrations)"
    else "ok" end'
jcheck "usage chunk last" '.[-1] as $u | [.[] | select(.molt.index != null)] as $t
  | if ($u.choices == []) and $u.usage.completion_tokens == ($t | length)
       and $u.usage.total_tokens == $u.usage.prompt_tokens + $u.usage.completion_tokens then "ok"
    else ($u | tostring) end'
tokens=$(jq -s '[.[] | select(.molt.index != null)] | length' "$tmp/chunks.jsonl")
text=$(jq -rsj '[.[] | .choices[0].delta.content // empty] | join("")' "$tmp/chunks.jsonl")
[ -n "$text" ] || fail "the streamed answer is empty"
echo "streamed: $tokens tokens; $(jq -rs '.[] | select(.molt.migration) | .molt.migration | "\(.from) → \(.to) at token \(.at_token) (\(.policy), \(.ms) ms)"' "$tmp/chunks.jsonl"): ${text:0:80}…"

# not streamed, with no budget: {"mib": null} goes back to the server's own source (none here)
reply=$(molt_call POST /v1/molt/budget '{"mib": null}') || exit 1
[ "$(jq -r '.budget_mib' <<<"$reply")" = null ] || fail "POST /v1/molt/budget {\"mib\": null} (no --budget-mib/--trace) replied $reply: budget_mib should be null"
whole=$(molt_call POST /v1/chat/completions "$(jq -c '.stream = false | del(.stream_options) | .max_tokens = 32' <<<"$request")") || exit 1
out=$(jq -r 'if .object != "chat.completion" then "object \(.object)"
  elif ((.choices[0].message.content // "") | length) == 0 then "empty content"
  elif .choices[0].finish_reason == null then "no finish_reason"
  elif (.molt.rungs | type) != "array" or .molt.done.killed != false then "molt: \(.molt | tostring)"
  elif (.molt.rungs | length) != .usage.completion_tokens then "molt.rungs \(.molt.rungs | length) != usage \(.usage.completion_tokens)"
  else "ok" end' <<<"$whole")
[ "$out" = ok ] || fail "non-streamed: $out: $whole"
echo "non-streamed: $(jq -r '.usage.completion_tokens' <<<"$whole") tokens"

# /v1/completions, not streamed
comp=$(molt_call POST /v1/completions "$(jq -nc --arg m "$ladder" '{model: $m, prompt: "The kernel", max_tokens: 16, temperature: 0}')") || exit 1
out=$(jq -r 'if .object != "text_completion" then "object \(.object)"
  elif ((.choices[0].text // "") | length) == 0 then "empty text"
  elif .usage.completion_tokens < 1 then "usage \(.usage | tostring)"
  else "ok" end' <<<"$comp")
[ "$out" = ok ] || fail "/v1/completions: $out: $comp"

# errors: OpenAI-style {"error": {message, type, param, code}} with a 4xx status
code=$(curl -s -o "$tmp/err" -w '%{http_code}' -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
       -d '{"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}' "$base/v1/chat/completions")
case $code in 4??) ;; *) fail "an unknown model answered $code: $(cat "$tmp/err")" ;; esac
jq -e '.error | (.message | type) == "string" and has("type") and has("param") and has("code")' "$tmp/err" >/dev/null \
  || fail "an unknown model's error is not {error: {message, type, param, code}}: $(cat "$tmp/err")"
if [ -n "${MOLT_API_KEY:-}" ]; then   # the server runs with --api-key: no key, no answer (but /health)
  code=$(curl -s -o "$tmp/err" -w '%{http_code}' "$base/v1/models")
  [ "$code" = 401 ] || fail "GET /v1/models without the key answered $code"
  jq -e '.error.message | type == "string"' "$tmp/err" >/dev/null || fail "the 401 is not an OpenAI error: $(cat "$tmp/err")"
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] || fail "GET /health needs the key"
fi
echo "curl_stream: ok"
