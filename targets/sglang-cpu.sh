#!/usr/bin/env bash
# Real SGLang server on the CPU, as a local benchmark target.
#
# Install: PyPI's sglang wheel (pip, registry only) without its GPU-only requirements
# (CUDA kernels, flashinfer, DeepEP/DeepGEMM, ...), which a CPU server never imports;
# every other requirement it declares is installed at its own pins. Its torch==2.14.1
# pin and torchvision 0.29.1 are met from this machine kind's local wheels (PyPI's
# builds for CUDA, which run on the CPU). Model: the same random-weight Llama as the vLLM
# target, built locally by make_tiny_hf_llama.py, served offline (HF_HUB_OFFLINE=1).
# Nothing is fetched from a model hub.
#
# sgl_kernel: SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1, --device cpu) imports a few
# names of sgl-kernel's CPU build at import time, and PyPI has no CPU build of it
# (sglang-kernel is a CUDA build: "libcuda.so.1: cannot open shared object file"). This
# script puts prefillscope's import-only stand-in (targets/sgl_kernel_standin) on the
# server's PYTHONPATH: every name resolves and raises if called, naming the op and the
# setting that needs it. It registers no torch.ops.sgl_kernel.*, and that (not the CPU's
# AMX) is what makes SGLang use its torch fallbacks (RMSNorm, request-to-token map) with
# the torch_native attention backend. Serving a BF16 Llama at TP1 without speculative
# decoding or quantization calls none of the stand-in's names.
#
#   targets/sglang-cpu.sh setup     # venv + sglang + model dir (~5 min cold, ~6 GB venv)
#   targets/sglang-cpu.sh start     # serve on 127.0.0.1:$PORT in the background, waits for /health
#   targets/sglang-cpu.sh run       # same server in the foreground (for a launcher that owns it)
#   targets/sglang-cpu.sh stop      # stop the server 'start' started on $PORT (by its PID; one PID file a port)
#   targets/sglang-cpu.sh status    # exit 0 when the server on $PORT answers /health, else 1
#
# Env: SGLANG_DIR (default $PREFILLSCOPE_TARGETS_DIR/sglang, i.e. ~/.cache/prefillscope-targets/sglang),
#      PORT (30011), MODEL_PRESET (tiny|small), CHUNK (512, --chunked-prefill-size),
#      POOL_TOKENS (65536, --max-total-tokens: the KV pool), PAGE_SIZE (1: token-granular radix cache),
#      EXTRA_ARGS (appended to the server's arguments).
set -euo pipefail

DIR=${SGLANG_DIR:-${PREFILLSCOPE_TARGETS_DIR:-$HOME/.cache/prefillscope-targets}/sglang}
PORT=${PORT:-30011}
PRESET=${MODEL_PRESET:-tiny}
CHUNK=${CHUNK:-512}
POOL_TOKENS=${POOL_TOKENS:-65536}
PAGE_SIZE=${PAGE_SIZE:-1}
SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=$DIR/venv/bin/python
LABEL=sglang
# shellcheck source=target-common.sh
. "$HERE/target-common.sh"
hf_preset


# Requirements of the sglang wheel that serve GPUs only (CUDA/ROCm kernels and their
# toolchains), or media decoding a text model does not use; torchaudio 2.11 and
# torchcodec 0.17 are pinned to other torch releases than sglang's own torch pin.
GPU_ONLY="cuda-python flash-attn-4 flashinfer-python humming-kernels nvidia-cutlass-dsl
nvidia-mathdx nvshmem4py-cu13 quack-kernels sgl-deep-ep sgl-deep-gemm sgl-flash-mla
sglang-kernel tilelang torch-memory-saver torch torchaudio torchcodec torchvision"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 SGLANG_USE_CPU_ENGINE=1
# One core for the engine's threads, the other left to the HTTP server, the tokenizer
# and the load generator (SGLang's default binds every core of the NUMA node).
export SGLANG_CPU_OMP_THREADS_BIND=${SGLANG_CPU_OMP_THREADS_BIND:-0}
export PYTHONPATH=$HERE/sgl_kernel_standin${PYTHONPATH:+:$PYTHONPATH}

setup() {
  mkdir -p "$DIR"/{models,logs}
  cd "$DIR"
  [ -x venv/bin/python ] || python3 -m venv venv
  local t0=$(date +%s)
  # A stamp, not an import check: sglang imports with half its requirements missing.
  if [ ! -f "venv/.installed-sglang-$SGLANG_VERSION" ]; then
    venv/bin/pip install -q --upgrade pip
    # sglang pins torch==2.14.1; with torchvision 0.29.1 both come from the local wheels.
    venv/bin/pip install torch==2.14.1 torchvision==0.29.1
    venv/bin/pip install --no-deps "sglang==$SGLANG_VERSION"
    # Its declared requirements for this platform, at its pins, less the GPU-only ones.
    # The filter parses them with 'packaging', which a cold venv does not have yet.
    venv/bin/pip install -q packaging
    venv/bin/python - "$GPU_ONLY" > requirements.txt <<'EOF'
import importlib.metadata as md
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

skip = {canonicalize_name(n) for n in sys.argv[1].split()}
for line in md.requires("sglang") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if canonicalize_name(req.name) not in skip:
        print(req)
EOF
    printf 'torch==2.14.1\ntorchvision==0.29.1\n' > constraints.txt
    venv/bin/pip install -c constraints.txt -r requirements.txt
    touch "venv/.installed-sglang-$SGLANG_VERSION"
    echo "install took $(( $(date +%s) - t0 ))s; venv $(du -sh venv | cut -f1)"
  fi
  [ -f "$MODEL/model.safetensors" ] || env "${SIZES[@]}" "$PY" "$HERE/make_tiny_hf_llama.py" "$MODEL"
  "$PY" -c 'import importlib.metadata as m; print("sglang", m.version("sglang"), "torch", m.version("torch"))'
}

SERVE=(
  "$PY" -m sglang.launch_server --model-path "$MODEL" --served-model-name "$NAME"
  --host 127.0.0.1 --port "$PORT" --device cpu --attention-backend torch_native
  --context-length 4096 --max-total-tokens "$POOL_TOKENS" --page-size "$PAGE_SIZE"
  --chunked-prefill-size "$CHUNK" --enable-metrics --enable-cache-report
  --skip-server-warmup
)

ready() {
  [ -x "$PY" ] && [ -f "$MODEL/model.safetensors" ] || { echo "run setup first (MODEL_PRESET=$PRESET)" >&2; exit 1; }
}

# start and run: target-common.sh.

case ${1:-} in
  setup|start|run) "$1" ;;
  stop) pid_stop ;;
  status) pid_status ;;
  *) sed -n '2,30p' "$0"; exit 2 ;;
esac
