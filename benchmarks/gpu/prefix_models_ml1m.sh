#!/usr/bin/env bash
# The four every-prefix models (BSARec, AdaMCT, MaTrRec, AC-TSR) on ML-1M at their official
# settings, 3 seeds each, on a GPU host: the runs that cost hundreds of CPU-hours here
# (benchmarks/prefix_models_cost.py prints the measured cost table and the sources).
#
#   bash benchmarks/gpu/prefix_models_ml1m.sh OUT [ROOT]
#
# Needs, from the repository root: the project's venv (.venv, or PYTHON=/path/to/python with
# attnsvm installed) with a CUDA build of torch; the raw datasets at ROOT (default
# ../shared/data, with ml-1m/ in it). Writes OUT/configs/*.json (one `attnsvm train --config`
# file per model and seed, from prefix_models_cost.py's OFFICIAL table) and one run directory
# per run, OUT/ml-1m/MODEL-official-seedN, in the zoo's layout, so that
#   python benchmarks/zoo.py --table --out OUT
# tabulates them (copy them beside the zoo's ML-1M SASRec+ runs for the paired Δ column).
# A finished run is skipped and an interrupted one resumed, so the script can be re-run.
# JOBS runs share the GPU at once (default 4: these models are small, one run leaves most of
# an H100 idle); MODELS and SEEDS select a part, e.g. MODELS="bsarec" SEEDS="0" for a first try.
# MaTrRec's step at 2048 x 200 held over 18 GB of host memory on the CPU: lower JOBS if the GPU
# runs out of memory. On a time-limited lease run a part (MODELS, SEEDS) and call again.
# A smoke test (any machine): ALLOW_CPU=1 EXTRA_SET="train.epochs=1 train.steps_per_epoch=2"
# (EXTRA_SET: `attnsvm train --set` assignments added to every new run).
#
# Expected time per run (estimates; nothing here has run on a GPU yet): the attnsvm trainer
# makes one example of every prefix, 981,491 an epoch. BSARec (window 50, batch 256, 3,834
# steps) ~55 s an epoch, ~0.8 h for 50 epochs, from its S3-Beauty steps on an H200 shared four
# ways (14 ms each). Scaling the others' measured CPU steps by BSARec's CPU/GPU ratio (18x):
# AdaMCT 10-16 min a run, AC-TSR ~2.3 h, MaTrRec ~4 h (its 200-step scan may gain less). Every
# run stops early (patience 10, cap 200-300 epochs); 50 epochs is the planning figure.
# Known deviation: BSARec's official code trains only the prefixes inside each user's last 50
# training items (267,884 examples); attnsvm trains every prefix (3.7x more).
set -euo pipefail

OUT=${1:?usage: prefix_models_ml1m.sh OUT [ROOT]}
ROOT=${2:-../shared/data}
PYTHON=${PYTHON:-.venv/bin/python}
JOBS=${JOBS:-4}
MODELS=${MODELS:-bsarec adamct matrrec actsr}
SEEDS=${SEEDS:-0 1 2}
EXTRA_SET=${EXTRA_SET:-}

if [ -z "${ALLOW_CPU:-}" ]; then
    "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch (ALLOW_CPU=1 to run anyway)')"
fi
[ -d "$ROOT/ml-1m" ] || { echo "no ml-1m under $ROOT" >&2; exit 1; }
mkdir -p "$OUT/ml-1m" "$OUT/logs"
# shellcheck disable=SC2086
"$PYTHON" benchmarks/prefix_models_cost.py --write-configs "$OUT/configs" --root "$ROOT" --seeds $SEEDS

run_one() {
    local model=$1 seed=$2
    local run="$OUT/ml-1m/$model-official-seed$seed"
    local log="$OUT/logs/$model-official-seed$seed.log"
    if [ -d "$run" ]; then
        echo "done already: $run"
    elif [ -f "$run.incomplete/resume.pt" ]; then
        echo "resuming: $run"
        "$PYTHON" -m attnsvm.cli.main train --resume "$run" --no-progress >>"$log" 2>&1
    else
        echo "starting: $run"
        local extra=()
        for assignment in $EXTRA_SET; do extra+=(--set "$assignment"); done
        "$PYTHON" -m attnsvm.cli.main train --config "$OUT/configs/$model-official-seed$seed.json" \
            --root "$ROOT" --out "$run" --no-progress "${extra[@]}" >>"$log" 2>&1
    fi
}

failed=0
for model in $MODELS; do
    for seed in $SEEDS; do
        while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
            wait -n || failed=1
        done
        run_one "$model" "$seed" &
    done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do
    wait -n || failed=1
done
"$PYTHON" benchmarks/zoo.py --table --out "$OUT"
exit "$failed"
