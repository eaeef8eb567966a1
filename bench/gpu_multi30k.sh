#!/usr/bin/env bash
# The Multi30k de->en recipes on a GPU (issue 25's "where a GPU is lent"): the figures in
# bench/RESULTS.md, section "The Transformer on a GPU", come from this script.
#
#   bench/gpu_multi30k.sh probe   DATA_ROOT OUT       # speed: floor (bf16, fp32) and 2 epochs of each recipe
#   bench/gpu_multi30k.sh recipes DATA_ROOT OUT MIN   # the recipes to the end (at most MIN minutes each),
#                                                     # side by side, then averaged and ensembled
#   bench/gpu_multi30k.sh sweep   DATA_ROOT OUT MIN   # three Transformer seeds and three RNN variants
#
# EXTRA adds --set options to every training (a quick check: EXTRA="--set data.max_train=500").
# DATA_ROOT holds multi30k/{train,val}.{de,en}; OUT receives metrics, logs and the floor's JSON.
# heed runs from this checkout (src/ on PYTHONPATH) with train.device auto (CUDA) and train.bf16
# null (bf16 autocast on GPUs that have it): the recipes themselves, unchanged, as a user runs them.
set -euo pipefail
phase=$1 data=$2 out=$3
heed() { python3 -m heed "$@"; }
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
runs=/tmp/heed-gpu-runs
mkdir -p "$out" "$runs"
python3 -c "import torch; c = torch.cuda.is_available(); print('torch', torch.__version__, torch.cuda.get_device_name() if c else 'no GPU', 'bf16', c and torch.cuda.is_bf16_supported())" | tee "$out/gpu.txt"
device=$(python3 -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")

case $phase in
probe)
    for recipe in multi30k_de_en_transformer multi30k_de_en; do
        heed train "configs/$recipe.yaml" --set data.root="$data" \
            --set train.epochs=2 ${EXTRA:-} --set output_dir="$runs/$recipe-probe" >"$out/$recipe-probe.log" 2>&1 \
            || { tail -30 "$out/$recipe-probe.log"; exit 1; }
        grep -E '"kind": "(train|dev)"' "$runs/$recipe-probe/metrics.jsonl" | cut -c1-220
        cp "$runs/$recipe-probe/metrics.jsonl" "$out/$recipe-probe.metrics.jsonl"
    done
    for precision in --bf16 ""; do
        python3 bench/transformer_floor.py "$runs/multi30k_de_en_transformer-probe" --device "$device" $precision \
            --src "$data/multi30k/train.de" --tgt "$data/multi30k/train.en" --steps "${FLOOR_STEPS:-100}" --warmup 10 \
            --json "$out/floor${precision:+-bf16}.json" 2>&1 | grep -v -i warn
    done
    ;;
recipes)
    minutes=$4 alone=${ALONE_SECONDS:-75}
    train() {  # recipe seed minutes
        python3 -m heed train "configs/$1.yaml" --set data.root="$data" --set train.seed="$2" \
            --set train.max_minutes="$3" ${EXTRA:-} --set output_dir="$runs/$1-seed$2" >"$out/$1-seed$2.log" 2>&1
    }
    # The first Transformer trains alone for $alone s, so its first logged windows are its speed on
    # an idle GPU; then the second seed and the RNN join it, sharing the GPU.
    train multi30k_de_en_transformer 1 "$minutes" &
    sleep "$alone"
    rest=$(python3 -c "print(round($minutes - $alone / 60, 2))")
    train multi30k_de_en_transformer 2 "$rest" &
    train multi30k_de_en 1 "$rest" &
    wait
    python3 - "$runs/multi30k_de_en_transformer-seed1/metrics.jsonl" "$alone" <<'PY' | tee -a "$out/gpu.txt"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
windows = [r for r in rows if r["kind"] == "train"]
first = windows[0]["time"] if windows else 0  # the first window holds the start (CUDA, tokenizers): left out
alone = [r["tok_per_s"] for r in windows[1:] if r["time"] - first < float(sys.argv[2]) - 15]
print(sum(alone) / len(alone) if alone else "", "tok/s alone:", " ".join(map(str, alone)))
PY
    for run in multi30k_de_en_transformer-seed1 multi30k_de_en_transformer-seed2 multi30k_de_en-seed1; do
        cp "$runs/$run/metrics.jsonl" "$out/$run.metrics.jsonl"
        grep '"kind": "dev"' "$runs/$run/metrics.jsonl" | python3 -c "
import json, sys
rows = [json.loads(l) for l in sys.stdin]
print('$run', 'dev BLEU by epoch:', ' '.join(f\"{r['bleu']:.1f}\" for r in rows))"
        heed average "$runs/$run"/checkpoints/step-* --output "$runs/$run-avg" || true
    done
    evaluate() { heed evaluate "$@" --src "$data/multi30k/val.de" --ref "$data/multi30k/val.en" --batch-size 128 | head -2; }
    for what in multi30k_de_en_transformer-seed1 multi30k_de_en_transformer-seed1-avg \
                multi30k_de_en_transformer-seed2 multi30k_de_en_transformer-seed2-avg \
                multi30k_de_en-seed1 multi30k_de_en-seed1-avg; do
        [ -d "$runs/$what" ] && { echo "== $what"; evaluate "$runs/$what"; }
    done
    echo "== ensemble of the two Transformer seeds"
    evaluate "$runs/multi30k_de_en_transformer-seed1" "$runs/multi30k_de_en_transformer-seed2" || true
    echo "== ensemble of the two averaged Transformer seeds"
    evaluate "$runs/multi30k_de_en_transformer-seed1-avg" "$runs/multi30k_de_en_transformer-seed2-avg" || true
    echo "== ensemble of the averaged Transformer (seed 1) and the averaged RNN"
    evaluate "$runs/multi30k_de_en_transformer-seed1-avg" "$runs/multi30k_de_en-seed1-avg" || true
    tok=$(tail -1 "$out/gpu.txt" | cut -d' ' -f1)
    python3 bench/transformer_floor.py "$runs/multi30k_de_en_transformer-seed1" --device "$device" --bf16 \
        --src "$data/multi30k/train.de" --tgt "$data/multi30k/train.en" --steps "${FLOOR_STEPS:-100}" --warmup 10 \
        ${tok:+--heed-tok-per-s "$tok"} --json "$out/floor-bf16.json"
    ;;
sweep)
    # Three Transformer seeds (an ensemble of three) and three RNN variants at once, MIN minutes each.
    minutes=$4
    variants=("multi30k_de_en_transformer 1" "multi30k_de_en_transformer 2" "multi30k_de_en_transformer 3"
              "multi30k_de_en 1 rnn-30ep --set train.epochs=30"
              "multi30k_de_en 1 rnn-2layers --set model.encoder_layers=2 --set model.decoder_layers=2"
              "multi30k_de_en 1 rnn-512-d04 --set model.embed_size=512 --set model.dropout=0.4 --set train.epochs=30")
    for v in "${variants[@]}"; do
        set -- $v
        name=${3:-$1-seed$2}
        python3 -m heed train "configs/$1.yaml" --set data.root="$data" --set train.seed="$2" \
            --set train.max_minutes="$minutes" "${@:4}" --set output_dir="$runs/$name" >"$runs/$name.log" 2>&1 &
    done
    wait
    for name in multi30k_de_en_transformer-seed1 multi30k_de_en_transformer-seed2 multi30k_de_en_transformer-seed3 \
                rnn-30ep rnn-2layers rnn-512-d04; do
        cp "$runs/$name/metrics.jsonl" "$out/$name.metrics.jsonl"
        grep '"kind": "test"' "$runs/$name/metrics.jsonl" | python3 -c "
import json, sys
print('$name', 'test BLEU (beam 5):', ' '.join(f\"{json.loads(l)['bleu']:.2f}\" for l in sys.stdin))"
    done
    # Six runs at once leave each about half the idle speed: give MIN so that these ensembles fit too.
    evaluate() { heed evaluate "$@" --src "$data/multi30k/val.de" --ref "$data/multi30k/val.en" --batch-size 128 | head -1; }
    t="$runs/multi30k_de_en_transformer-seed"
    echo "== ensemble of Transformer seeds 1 2"; evaluate "${t}1" "${t}2"
    echo "== ensemble of Transformer seeds 1 2 3"; evaluate "${t}1" "${t}2" "${t}3"
    ;;
*) echo "usage: $0 probe|recipes|sweep DATA_ROOT OUT [MINUTES]" >&2; exit 2 ;;
esac
