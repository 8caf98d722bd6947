#!/usr/bin/env bash
# Start a real vLLM OpenAI server (CPU build) from the dedicated venv, in the background.
# Usage: serve.sh [extra vLLM args...]   (later args override the defaults below)
# Env: SLUICEGATE_VLLM_HOME, SLUICEGATE_VLLM_MODEL, SLUICEGATE_VLLM_NAME, SLUICEGATE_VLLM_PORT,
#      SLUICEGATE_VLLM_WAIT (seconds to wait for /health, default 240)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
HOME_DIR="${SLUICEGATE_VLLM_HOME:-$REPO/.cache/vllm}"
VENV="$HOME_DIR/venv"
MODEL="${SLUICEGATE_VLLM_MODEL:-$HOME_DIR/tiny-model}"
NAME="${SLUICEGATE_VLLM_NAME:-tiny}"
PORT="${SLUICEGATE_VLLM_PORT:-8011}"
WAIT="${SLUICEGATE_VLLM_WAIT:-240}"
PIDFILE="$HOME_DIR/server.pid"
LOG="$HOME_DIR/server.log"

[[ -x "$VENV/bin/python" && -d "$MODEL" ]] || { echo "run $HERE/setup.sh first" >&2; exit 1; }

# One instance at a time: it takes about 3.2 GiB and both cores of this machine.
if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "vLLM already running (pid $(cat "$PIDFILE")); stop it with $HERE/stop.sh" >&2; exit 1
fi

# Something else answering on PORT would pass the /health wait below and hide a failed bind.
if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/"; then
  echo "port $PORT is already in use" >&2; exit 1
fi

# Keep every cache inside HOME_DIR (git-ignored) and never reach for the hub: nothing outside
# the local package registries is reachable here.
export VLLM_CACHE_ROOT="$HOME_DIR/vllm-cache" TORCHINDUCTOR_CACHE_DIR="$HOME_DIR/inductor" \
       TMPDIR="$HOME_DIR/tmp" HF_HOME="$HOME_DIR/hf"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"  # GiB
# Stored Responses (`store`, GET /v1/responses/{id}, previous_response_id, cancel): vLLM ignores
# `store` unless this is set, and then keeps every stored response in this process's memory for
# good (it never evicts). The worker contract's RSP store rules need it; 0 turns it off.
export VLLM_ENABLE_RESPONSES_API_STORE="${VLLM_ENABLE_RESPONSES_API_STORE:-1}"
# Named/"required" tool_choice: vLLM's default (strict xgrammar structural tags in hermes format)
# lets random weights loop on whitespace or digits until max_tokens, so no tool_calls come back.
# The plain JSON-schema path with whitespace disabled returns real tool_calls for bounded
# schemas (maxLength/enum). SLUICEGATE_VLLM_STRICT_TOOLS=1 keeps vLLM's default (as on GPU pods).
TOOL_ARGS=()
if [[ "${SLUICEGATE_VLLM_STRICT_TOOLS:-0}" != 1 ]]; then
  export VLLM_ENFORCE_STRICT_TOOL_CALLING=0
  TOOL_ARGS=(--structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}')
fi
mkdir -p "$VLLM_CACHE_ROOT" "$TORCHINDUCTOR_CACHE_DIR" "$TMPDIR" "$HF_HOME"
# Earlier runs leave their ZMQ sockets and dist-init dirs in TMPDIR; none is in use now.
find "$TMPDIR" -maxdepth 1 \( -type s -o -name 'vllm_dist_*' \) -exec rm -rf {} +

# Priority scheduling: the waiting queue ordered by (priority, arrival), so a model marked
# `engine_priority: true` gets batch lines (priority > 0) queued behind interactive requests (0)
# (docs/files-storage.md). Requests without the field are served first come, first served, as
# under the default `fcfs`; `serve.sh --scheduling-policy fcfs` turns it off.
# The module form, not `vllm serve`: that console script crashes in vllm-cpu 0.32.0.
# setsid makes the PID a process-group id, so stop.sh also reaches the engine-core child.
start=$SECONDS
setsid "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
  --model "$MODEL" --served-model-name "$NAME" --host 127.0.0.1 --port "$PORT" \
  --max-model-len 2048 --dtype bfloat16 --scheduling-policy priority \
  --enable-auto-tool-choice --tool-call-parser hermes --enable-request-id-headers "${TOOL_ARGS[@]}" \
  "$@" >"$LOG" 2>&1 </dev/null &
PID=$!
echo "$PID" >"$PIDFILE"
echo "vLLM pid $PID, port $PORT, model $NAME, log $LOG"

until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; do
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "vLLM exited during startup; log tail:" >&2; tail -n 40 "$LOG" >&2; rm -f "$PIDFILE"; exit 1
  fi
  if (( SECONDS - start >= WAIT )); then
    echo "vLLM not healthy after ${WAIT}s; log tail:" >&2; tail -n 40 "$LOG" >&2
    "$HERE/stop.sh" >&2 || true; exit 1
  fi
  sleep 1
done
echo "vLLM healthy after $((SECONDS - start)) s: http://127.0.0.1:$PORT/v1"
