#!/usr/bin/env bash
# The GPU LM protocol v2 on one CUDA machine, one command from the repository root:
#
#     bash simulate/llm/gpu_run.sh            # OUT=/some/dir LIMIT_S=500 bash simulate/llm/gpu_run.sh
#     bash simulate/llm/gpu_run.sh --dry-run  # the same path on CPU (tiny preset, quick variant), seconds
#     PROTOCOL=gpu-d256 bash simulate/llm/gpu_run.sh   # the second preset: d up to 256 (llm_gpu-<name>.json)
#
# Runs `python -m simulate.llm experiment --protocol gpu` (simulate/llm/gpu_protocol.py): the CPU-vs-GPU parity,
# then the plan (chunks of whole seeds, each chunk's peak memory, the warm start's and the chunks' time estimates),
# the warm start, and protocol v2's 16 seeds x 13 runs on the batched engine in chunks (bf16 autocast). A guard
# counts LIMIT_S from this script's start: no chunk starts that is predicted to end past it, and the results
# file is rewritten after every chunk (the verdicts use complete seeds only; the file says which ran). Writes
# under "$OUT" (default results/llm/gpu_run): llm_gpu.json (commit it as figures/out/llm_gpu.json: the
# report's "gpu-lm" row), parity.csv, log.txt, timings.txt, runs.tar.gz (every run's metrics.csv, summary.json). Estimated on one H100 (unmeasured: the MFU is a guess):
# warm start ~73 s + 16 chunks ~215 s + parity; a hard `timeout` kills the protocol at LIMIT_S + 40 s.
# Works offline: it uses the python3 that already holds torch (+CUDA) and transformers; when torch is
# missing it tries `pip install -e '.[llm]'` (no CPU constraints file, so pip picks a CUDA build) and
# fails fast with a clear message when that is not possible (no network).
set -uo pipefail
OUT="${OUT:-results/llm/gpu_run}"
PROTOCOL="${PROTOCOL:-gpu}"      # a key of simulate.llm.protocol.GPU_PROTOCOLS
LIMIT_S="${LIMIT_S:-500}"        # seconds from this script's start: the guard starts no chunk predicted to end later
WORK="${WORK:-/tmp/asyncgrpo_llm_gpu}"
mkdir -p "$OUT" "$WORK"
t0=$(date +%s)
stamp() { echo "$1 $(( $(date +%s) - t0 )) s" | tee -a "$OUT/timings.txt"; }
: > "$OUT/timings.txt"

DRY=0; for a in "$@"; do [ "$a" = "--dry-run" ] && DRY=1; done   # --dry-run: the same path on CPU (tests)
PY="${PYTHON:-python3}"
# the project's .venv when it can run this (on a card: a CUDA torch; this machine's .venv holds a CPU build)
NEED="import torch, transformers, sys; sys.exit(0 if $DRY or torch.cuda.is_available() else 1)"
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && .venv/bin/python -c "$NEED" 2>/dev/null; then PY=.venv/bin/python; fi
if ! "$PY" -c "import torch, transformers" 2>/dev/null; then
    echo "torch/transformers not importable by $PY; trying: $PY -m pip install -e '.[llm]' (needs network)"
    if ! timeout 300 "$PY" -m pip install -q -e '.[llm]'; then
        echo "error: $PY cannot import torch and transformers, and pip could not install them (no network?)." >&2
        echo "       Run this on a machine whose python3 holds torch with CUDA and transformers." >&2
        exit 3
    fi
fi
if [ "$DRY" = 0 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: torch.cuda.is_available() is False for $PY: no usable CUDA device" >&2
    exit 3
fi
for m in numpy scipy pandas pyarrow numba sympy tqdm; do   # what the protocol path imports
    "$PY" -c "import $m" 2>/dev/null || { echo "error: $PY lacks the package $m (pip install -e . installs it)" >&2; exit 3; }
done
stamp "checks done:"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=":4096:8"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
           torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device (dry run)')" | tee "$OUT/log.txt"
rm -f "$WORK"/llm_gpu*.json "$WORK/parity.csv"   # never copy an earlier run's file as this one's
timeout "$(( LIMIT_S + 40 ))" "$PY" -m simulate.llm experiment --protocol "$PROTOCOL" --experiment-dir "$WORK" \
    --limit-s "$LIMIT_S" --start "$t0" "$@" 2>&1 | tee -a "$OUT/log.txt"
rc=${PIPESTATUS[0]}
stamp "protocol run (exit $rc):"
RES=""   # this run's results file: the one in $WORK (cleared above), not whatever an earlier run left in $OUT
for f in "$WORK"/llm_gpu*.json "$WORK/parity.csv"; do
    [ -f "$f" ] && cp "$f" "$OUT/" && case "$f" in *.json) RES="$OUT/$(basename "$f")";; esac
done
[ -d "$WORK/runs" ] && (cd "$WORK" && find runs -name metrics.csv -o -name summary.json | tar czf "$OUT/runs.tar.gz" -T -)
[ -n "$RES" ] && "$PY" -c "import json, sys; r = json.load(open(sys.argv[1])); p = r.get('plan', {}); g = 2 ** 30
print('measured against the plan:', r.get('status'), '| seeds', len(r.get('seeds_done', [])), 'of',
      len(r.get('seeds_planned', [])), '| parity', round(r.get('parity_seconds', 0)), 's | warm start',
      round(r.get('warmstart_seconds', -1)), 's (est', round(p.get('warmstart_estimate_s', -1)), ') | chunks',
      round(sum(r.get('chunk_seconds', []))), 's for', r.get('chunks_done'), 'of', p.get('chunks'), '(est',
      round(p.get('chunks_estimate_s', -1)), 'for all) | peak', round((r.get('peak_bytes') or 0) / g, 2), 'GiB (est',
      round(p.get('peak_estimate_bytes', 0) / g, 2), ') | MFU', r.get('mfu'), '| OOM splits', r.get('oom_splits'))
" "$RES" | tee -a "$OUT/timings.txt"
stamp "total:"
exit "$rc"
