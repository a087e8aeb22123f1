#!/usr/bin/env bash
# The GPU LM protocol on one CUDA machine, one command from the repository root:
#
#     bash simulate/llm/gpu_run.sh            # OUT=/some/dir bash simulate/llm/gpu_run.sh
#
# Runs `python -m simulate.llm experiment --protocol gpu` (simulate/llm/gpu_protocol.py: CPU-vs-GPU parity,
# the shared warm start, the seeds' forests 6 processes at a time while the budget lasts) and writes
# under "$OUT" (default results/llm/gpu_run): llm_gpu.json (commit it as figures/out/llm_gpu.json: the
# report's "gpu-lm" row), parity.csv, log.txt, timings.txt. Expected wall time on one H200: about 7-8 min
# (unmeasured: parity ~0.5 min, warm start ~1 min, one batch of 6 seeds within BUDGET_S; a second batch of 6
# starts only if it is predicted to fit, so expect 6 of the 12 planned seeds; the results state which ran).
# Works offline: it uses the python3 that already holds torch (+CUDA) and transformers; when torch is
# missing it tries `pip install -e '.[llm]'` (no CPU constraints file, so pip picks a CUDA build) and
# fails fast with a clear message when that is not possible (no network).
set -uo pipefail
OUT="${OUT:-results/llm/gpu_run}"
BUDGET_S="${BUDGET_S:-330}"      # seconds for the seeds' runs (parity and the warm start come on top)
LIMIT_S="${LIMIT_S:-560}"        # hard stop for the whole protocol run
WORK="${WORK:-/tmp/asyncgrpo_llm_gpu}"
mkdir -p "$OUT" "$WORK"
t0=$(date +%s)
stamp() { echo "$1 $(( $(date +%s) - t0 )) s" | tee -a "$OUT/timings.txt"; }
: > "$OUT/timings.txt"

PY="${PYTHON:-python3}"
if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch, transformers" 2>/dev/null; then PY=.venv/bin/python; fi
if ! "$PY" -c "import torch, transformers" 2>/dev/null; then
    echo "torch/transformers not importable by $PY; trying: $PY -m pip install -e '.[llm]' (needs network)"
    if ! timeout 300 "$PY" -m pip install -q -e '.[llm]'; then
        echo "error: $PY cannot import torch and transformers, and pip could not install them (no network?)." >&2
        echo "       Run this on a machine whose python3 holds torch with CUDA and transformers." >&2
        exit 3
    fi
fi
DRY=0; for a in "$@"; do [ "$a" = "--dry-run" ] && DRY=1; done   # --dry-run: the same path on CPU (tests)
if [ "$DRY" = 0 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: torch.cuda.is_available() is False for $PY: no usable CUDA device" >&2
    exit 3
fi
for m in numpy scipy pandas pyarrow numba sympy matplotlib tqdm; do
    "$PY" -c "import $m" 2>/dev/null || { echo "error: $PY lacks the package $m (pip install -e . installs it)" >&2; exit 3; }
done
stamp "checks done:"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=":4096:8"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
           torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device (dry run)')" | tee "$OUT/log.txt"
timeout "$LIMIT_S" "$PY" -m simulate.llm experiment --protocol gpu --experiment-dir "$WORK" --budget-s "$BUDGET_S" \
    "$@" 2>&1 | tee -a "$OUT/log.txt"
rc=${PIPESTATUS[0]}
stamp "protocol run (exit $rc):"
for f in llm_gpu.json parity.csv; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"; done
stamp "total:"
exit "$rc"
