#!/usr/bin/env bash
# Smoke-check a running vLLM worker with curl: models, chat (plain, stream), completions stream,
# named/required tool_choice, and the 404/400 error bodies. Usage: smoke.sh [base-url] [model]
set -euo pipefail
B="${1:-http://127.0.0.1:${SLUICEGATE_VLLM_PORT:-8011}}"; M="${2:-${SLUICEGATE_VLLM_NAME:-tiny}}"
post() { curl -sS --max-time 60 -w '\n[HTTP %{http_code}]\n' "$B$1" -H 'content-type: application/json' -d "$2"; }
# Bounded argument schema (maxLength, enum): random weights otherwise fill max_tokens.
TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12},"unit":{"type":"string","enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false}}}]'
MSG='[{"role":"user","content":"Weather in Paris?"}]'

echo "== models";            curl -sS --max-time 10 "$B/v1/models"; echo
echo "== chat";              post /v1/chat/completions "{\"model\":\"$M\",\"messages\":$MSG,\"max_tokens\":8,\"temperature\":0}"
echo "== chat stream";       curl -sSN --max-time 60 "$B/v1/chat/completions" -H 'content-type: application/json' \
  -d "{\"model\":\"$M\",\"messages\":$MSG,\"max_tokens\":5,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}"
echo "== completions stream"; curl -sSN --max-time 60 "$B/v1/completions" -H 'content-type: application/json' \
  -d "{\"model\":\"$M\",\"prompt\":\"Once upon a time\",\"max_tokens\":5,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}"
for TC in '{"type":"function","function":{"name":"get_weather"}}' '"required"' '"auto"'; do
  echo "== tools, tool_choice=$TC"
  post /v1/chat/completions "{\"model\":\"$M\",\"messages\":$MSG,\"tools\":$TOOLS,\"tool_choice\":$TC,\"max_tokens\":60,\"temperature\":0}"
done
echo "== unknown model (404)"; post /v1/chat/completions '{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}'
echo "== bad JSON (400)";      post /v1/chat/completions "{\"model\":\"$M\",\"messages\":["
echo "== metrics";             curl -sS --max-time 10 "$B/metrics" | grep -E '^vllm:(num_requests_running|num_requests_waiting|kv_cache_usage_perc)\{'
