#!/usr/bin/env bash
# The Multi30k de->en recipes on a GPU (issue 25's "where a GPU is lent"): the figures in
# bench/RESULTS.md, section "The Transformer on a GPU", come from this script.
#
#   bench/studies/gpu_multi30k.sh probe   DATA_ROOT OUT       # speed: floor (bf16, fp32) and 2 epochs of each recipe
#   bench/studies/gpu_multi30k.sh recipes DATA_ROOT OUT MIN   # the recipes to the end (at most MIN minutes each),
#                                                     # side by side, then averaged and ensembled
#   bench/studies/gpu_multi30k.sh sweep   DATA_ROOT OUT MIN   # three Transformer seeds and three RNN variants
#   bench/studies/gpu_multi30k.sh rnn     DATA_ROOT OUT MIN   # the RNN recipe: two seeds, their ensemble, five variants
#   bench/studies/gpu_multi30k.sh speed   DATA_ROOT OUT MIN   # the Transformer alone: bf16 / float32 / compile, decoding
#
# EXTRA adds --set options to every training (a quick check: EXTRA="--set train.max_steps=20 --set train.eval_every=10").
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
rnn)
    # The RNN recipe toward 39 BLEU: two seeds of the recipe as it is (and their ensemble, for the
    # "+1 BLEU on top" target) beside one-change variants, MIN minutes each, all at once.
    minutes=$4
    variants=("rnn-seed1" "rnn-seed2 --set train.seed=2" "rnn-lr2e-3 --set train.lr=0.002"
              "rnn-batch1000 --set data.batch_tokens=1000" "rnn-enc2 --set model.encoder_layers=2"
              "rnn-dropout04 --set model.dropout=0.4" "rnn-embed512 --set model.embed_size=512")
    names=()
    for v in "${variants[@]}"; do
        set -- $v
        names+=("$1")
        python3 -m heed train configs/multi30k_de_en.yaml --set data.root="$data" --set train.max_minutes="$minutes" \
            "${@:2}" ${EXTRA:-} --set output_dir="$runs/$1" >"$out/$1.log" 2>&1 &
    done
    wait
    for name in "${names[@]}"; do
        cp "$runs/$name/metrics.jsonl" "$out/$name.metrics.jsonl"
        python3 - "$runs/$name/metrics.jsonl" "$name" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
dev = " ".join(f"{r['bleu']:.1f}" for r in rows if r["kind"] == "dev")
test = " ".join(f"{r['bleu']:.2f}" for r in rows if r["kind"] == "test")
print(sys.argv[2], "| dev BLEU by epoch:", dev, "| val BLEU (beam 5, best model):", test)
PY
        heed average "$runs/$name"/checkpoints/step-* --output "$runs/$name-avg" >/dev/null 2>&1 || true
    done
    evaluate() { heed evaluate "$@" --src "$data/multi30k/val.de" --ref "$data/multi30k/val.en" --batch-size 128 | head -1; }
    echo "== rnn-seed1, averaged last 5"; evaluate "$runs/rnn-seed1-avg"
    echo "== ensemble of rnn-seed1 and rnn-seed2"; evaluate "$runs/rnn-seed1" "$runs/rnn-seed2"
    echo "== ensemble of their averages"; evaluate "$runs/rnn-seed1-avg" "$runs/rnn-seed2-avg"
    for lp in 0.8 1.0; do echo "== rnn-seed1, length penalty $lp"; evaluate "$runs/rnn-seed1" --length-penalty "$lp"; done
    ;;
speed)
    # Issue 26 on the GPU: the Transformer recipe alone on the GPU, trained MIN minutes in bf16 (its
    # default there), then 600 updates each in float32 and with train.compile (no evaluation), and the
    # first model decoded by heed_decode.py: greedy and beam 5, at batch 64 (val, 1,014 sentences) and
    # batch 1 (its first 200), in float32 and bf16.
    minutes=$4 t=multi30k_de_en_transformer
    tokps() { python3 -c "
import json, sys
w = [json.loads(l) for l in open(sys.argv[1]) if '\"train\"' in l][1:]  # the first window holds the start
print(f'{sum(r[\"tok_per_s\"] for r in w) / len(w):,.0f} target tok/s (mean of {len(w)} windows)' if w else 'no windows')" "$1"; }
    train() {  # name minutes-or-steps options...
        python3 -m heed train "configs/$t.yaml" --set data.root="$data" --set output_dir="$runs/$1" "${@:2}" ${EXTRA:-} \
            >"$out/$1.log" 2>&1 || { tail -20 "$out/$1.log"; return 1; }
        cp "$runs/$1/metrics.jsonl" "$out/$1.metrics.jsonl"
        echo "$1: $(tokps "$runs/$1/metrics.jsonl")"
    }
    train speed-bf16 --set train.max_minutes="$minutes"
    grep '"kind": "dev"' "$runs/speed-bf16/metrics.jsonl" | python3 -c "
import json, sys
print('speed-bf16 dev BLEU by epoch:', ' '.join(f\"{json.loads(l)['bleu']:.1f}\" for l in sys.stdin))"
    train speed-fp32 --set train.bf16=false --set train.max_steps=600 --set train.eval_every=100000
    train speed-compile --set train.compile=true --set train.max_steps=600 --set train.eval_every=100000
    head -200 "$data/multi30k/val.de" >"$runs/val200.de"
    for precision in "" --bf16; do
        for beam in 1 5; do
            for batch in 64 1; do
                input="$data/multi30k/val.de"; [ "$batch" = 1 ] && input="$runs/val200.de"
                python3 bench/compare/heed_decode.py "$runs/speed-bf16/model" "$input" "$runs/hyp.$beam.$batch$precision" \
                    --beam "$beam" --batch-size "$batch" --max-len 60 $precision 2>&1 | grep -v -i warn | tail -1
            done
        done
        python3 -c "
import sacrebleu, sys
hyp = open(sys.argv[1]).read().splitlines(); ref = open(sys.argv[2]).read().splitlines()
print('beam 5, batch 64${precision:+, bf16}: val BLEU', round(sacrebleu.corpus_bleu(hyp, [ref]).score, 2))" \
            "$runs/hyp.5.64$precision" "$data/multi30k/val.en"
    done
    nvidia-smi --query-gpu=name,memory.used --format=csv,noheader || true
    ;;
*) echo "usage: $0 probe|recipes|sweep|rnn|speed DATA_ROOT OUT [MINUTES]" >&2; exit 2 ;;
esac
