#!/usr/bin/env bash
# Stop the vLLM server started by serve.sh: SIGTERM its process group, wait, then SIGKILL.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
HOME_DIR="${SLUICEGATE_VLLM_HOME:-$REPO/.cache/vllm}"
PIDFILE="$HOME_DIR/server.pid"
WAIT="${SLUICEGATE_VLLM_STOP_WAIT:-30}"

[[ -f "$PIDFILE" ]] || { echo "no pid file ($PIDFILE); nothing to stop"; exit 0; }
PID="$(cat "$PIDFILE")"
[[ "$PID" =~ ^[0-9]+$ ]] || { echo "bad pid file: $PIDFILE" >&2; exit 1; }

alive() { kill -0 -- "-$PID" 2>/dev/null; }  # anyone left in the group (engine core included)
if alive; then
  echo "stopping vLLM (process group $PID)"
  kill -TERM -- "-$PID" 2>/dev/null || true
  for ((i = 0; i < WAIT; i++)); do alive || break; sleep 1; done
  if alive; then
    echo "still running after ${WAIT}s; sending SIGKILL"
    kill -KILL -- "-$PID" 2>/dev/null || true
    sleep 1
  fi
fi
rm -f "$PIDFILE"
echo "vLLM stopped"
