#!/usr/bin/env bash
# The peer load generators benchmarks/peers.py compares with, each in a side venv of its
# own under ~/.cache/prefillscope-peers/<name>/venv, from the package index (never in the
# project's dependencies). vllm bench serve comes from the vLLM target's own venv
# (targets/vllm-cpu.sh). A peer that does not install is reported and skipped; rerun to retry.
# Usage: bash benchmarks/peers_setup.sh [guidellm aiperf inference-perf]
set -u
ROOT="${PREFILLSCOPE_PEERS:-$HOME/.cache/prefillscope-peers}"
PEERS=("$@")
[ ${#PEERS[@]} -eq 0 ] && PEERS=(guidellm aiperf inference-perf)
declare -A SPEC=([guidellm]="guidellm==0.8.1" [aiperf]="aiperf" [inference-perf]="inference-perf")
# inference-perf needs Python >= 3.12: the first of these that runs makes its venv (pyenv's
# versions are tried by path too, since its shims answer only for the selected version).
declare -A PYTHONS=([inference-perf]="python3.12 python3.13 $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[23]*/bin/python3 2>/dev/null | tr '\n' ' ')")
status=0
for name in "${PEERS[@]}"; do
    dir="$ROOT/$name"
    mkdir -p "$dir"
    python=python3
    for candidate in ${PYTHONS[$name]:-}; do
        if command -v "$candidate" >/dev/null && "$candidate" -c '' 2>/dev/null; then
            python=$candidate
            break
        fi
    done
    if [ ! -x "$dir/venv/bin/python" ]; then
        "$python" -m venv "$dir/venv" || { echo "$name: venv failed"; status=1; continue; }
    fi
    if nice -n 10 "$dir/venv/bin/pip" install -q "${SPEC[$name]:-$name}" >"$dir/install.log" 2>&1; then
        echo "$name: installed ($("$dir/venv/bin/pip" show "$name" 2>/dev/null | sed -n 's/^Version: //p'))"
    else
        echo "$name: install failed (see $dir/install.log)"
        status=1
    fi
done
exit $status
