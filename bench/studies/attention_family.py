"""The attention family side by side (issue 18, item 8): every attention kind trained on the same
data for the same updates, several seeds each, then compared on

- BLEU, overall and by source length (sacreBLEU, heed.evaluate.by_length);
- the repeated-token rate: the share of output tokens that repeat an earlier token of the same
  output more often than the reference has it (over-translation, Tu et al. 2016);
- the dropped-source rate: the share of reference tokens the output lacks (1 - clipped unigram
  recall; under-translation);
- copy accuracy: test sentences whose name or number was replaced by one never seen in training
  (invented syllable names, 5-7 digit numbers); the share whose output contains it exactly.

Data: Tatoeba fra->eng (../shared/data/tatoeba-fra-eng/fra.txt, English<TAB>French), split into
words with punctuation apart (so the `word` tokenizer sees "Tom" and "." as tokens), sentences of at
most --max-words words. The copy sets come from held-out pairs that have "Tom" (or one number)
exactly once on each side; they never enter training, and their names/numbers appear nowhere in
the corpus.

    python bench/studies/attention_family.py --work /tmp/family --steps 1200 --seeds 1 2 --jobs 2
    python bench/studies/attention_family.py --work /tmp/family --report-only   # tables from results.json

Each run is `heed train` in its own process with one thread (--jobs at once), then the test sets
are decoded with beam 5 through `heed.load(...).translate`. The figures go to WORK/results.json and
the markdown tables to stdout (and to --doc, between its markers, if given).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEED = [sys.executable, "-m", "heed"]

# name -> `--set` overrides on top of BASE_SETS. Every model: Luong decoder with input feeding, so only
# the attention differs (plain: no attention at all).
VARIANTS: dict[str, list[str]] = {
    "plain": ["model.decoder=plain"],
    "dot": ["model.attention=dot"],
    "general": ["model.attention=general"],
    "additive": ["model.attention=additive"],
    "location": ["model.attention=location"],
    "local-p": ["model.attention=general", "model.attention_window=4"],
    "coverage": ["model.attention=additive", "model.coverage=true", "model.coverage_loss=1.0"],
    "copy": ["model.attention=general", "model.copy=true"],
}

BUCKETS = "1-4,5-6,7-8,9-12,13+"  # source words; Tatoeba's sentences are short
PUNCT = re.compile(r"([.,!?;:\"()«»“”…])")
NAME_SYLLABLES = ["ka", "zo", "ri", "vek", "mu", "tal", "qui", "dor", "xan", "bel", "nu", "sha", "pir", "gos", "lem"]


def words(text: str) -> str:
    """Punctuation split off as its own token; no-break spaces (French typography) become spaces."""
    text = text.replace("\u00a0", " ").replace("\u202f", " ")
    return " ".join(PUNCT.sub(r" \1 ", text).split())


def invented_name(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = "".join(rng.choice(NAME_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        if name.lower() not in taken:
            taken.add(name.lower())
            return name


def make_data(corpus: Path, out: Path, *, max_words: int, n_test: int, n_dev: int, n_copy: int, seed: int) -> dict:
    """Write train/dev/test .fr/.en and copy-names/copy-numbers .fr/.en under `out`; return counts."""
    pairs = []
    for line in corpus.read_text(encoding="utf-8").splitlines():
        en, fr = line.split("\t")[:2]
        en, fr = words(en), words(fr)
        if en and fr and len(en.split()) <= max_words and len(fr.split()) <= max_words:
            pairs.append((fr, en))
    pairs = list(dict.fromkeys(pairs))  # Tatoeba repeats pairs
    rng = random.Random(seed)
    rng.shuffle(pairs)
    vocabulary = {w.lower() for fr, en in pairs for w in (fr + " " + en).split()}

    def once(token: str, fr: str, en: str) -> bool:
        return fr.split().count(token) == 1 and en.split().count(token) == 1

    names, numbers, rest = [], [], []
    for fr, en in pairs:
        number = next((t for t in fr.split() if t.isdigit() and once(t, fr, en)), None)
        if len(names) < n_copy and once("Tom", fr, en):
            names.append((fr, en))
        elif number is not None and len(numbers) < n_copy:
            numbers.append((fr, en, number))
        else:
            rest.append((fr, en))
    test, dev, train = rest[:n_test], rest[n_test:n_test + n_dev], rest[n_test + n_dev:]
    # held-out sources never train under another translation
    held = {fr for fr, _ in test + dev} | {fr for fr, _ in names} | {fr for fr, _, _ in numbers}
    train = [(fr, en) for fr, en in train if fr not in held]
    copy_names = []
    for fr, en in names:
        name = invented_name(rng, vocabulary)
        swap = lambda s, name=name: " ".join(name if t == "Tom" else t for t in s.split())
        copy_names.append((swap(fr), swap(en), name))
    copy_numbers = []
    for fr, en, number in numbers:
        new = str(rng.randint(10_000, 9_999_999))
        while new in vocabulary:
            new = str(rng.randint(10_000, 9_999_999))
        swap = lambda s, new=new, number=number: " ".join(new if t == number else t for t in s.split())
        copy_numbers.append((swap(fr), swap(en), new))
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in [("train", train), ("dev", dev), ("test", test)]:
        (out / f"{split}.fr").write_text("".join(fr + "\n" for fr, _ in rows), encoding="utf-8")
        (out / f"{split}.en").write_text("".join(en + "\n" for _, en in rows), encoding="utf-8")
    for split, rows in [("copy-names", copy_names), ("copy-numbers", copy_numbers)]:
        (out / f"{split}.fr").write_text("".join(r[0] + "\n" for r in rows), encoding="utf-8")
        (out / f"{split}.en").write_text("".join(r[1] + "\n" for r in rows), encoding="utf-8")
        (out / f"{split}.copy").write_text("".join(r[2] + "\n" for r in rows), encoding="utf-8")
    return {"train": len(train), "dev": len(dev), "test": len(test), "copy-names": len(copy_names),
            "copy-numbers": len(copy_numbers)}


def write_config(data: Path, path: Path, *, vocab: int, hidden: int, batch_tokens: int) -> None:
    path.write_text(f"""# bench/studies/attention_family.py: the base model every variant shares
data:
  train: {{src: {data}/train.fr, tgt: {data}/train.en}}
  dev: {{src: {data}/dev.fr, tgt: {data}/dev.en}}
  tokenizer:
    src: {{kind: word}}
    tgt: {{kind: word}}
  vocab: {{max_size: {vocab}}}
  max_src_len: 40
  max_tgt_len: 40
  batch_tokens: {batch_tokens}
model:
  decoder: luong
  attention: general
  input_feeding: true
  rnn: lstm
  embed_size: {hidden // 2}
  hidden_size: {hidden}
  dropout: 0.2
train:
  epochs: 100
  lr: 0.002
  clip: 1.0
  schedule: {{name: constant}}
  label_smoothing: 0.1
  early_stopping: {{metric: bleu, patience: null}}
  log_every: 100
  threads: 1
decode:
  beam_size: 5
""", encoding="utf-8")


def train(config: Path, run_dir: Path, variant: str, seed: int, steps: int) -> dict:
    sets = [*VARIANTS[variant], f"train.seed={seed}", f"train.max_steps={steps}", f"train.eval_every={steps}"]
    cmd = [*HEED, "train", str(config), "--output-dir", str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    log = run_dir.with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "w", encoding="utf-8") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=False)
    return {"rc": done.returncode, "seconds": round(time.perf_counter() - started, 1), "log": str(log)}


def repeated_rate(hyp: list[str], ref: list[str]) -> tuple[int, int]:
    """(output tokens beyond the reference's count of a token that occurs more than once in the
    output, output tokens)."""
    h, r = Counter(hyp), Counter(ref)
    return sum(max(0, n - max(1, r[t])) for t, n in h.items()), len(hyp)


def dropped_rate(hyp: list[str], ref: list[str]) -> tuple[int, int]:
    """(reference tokens the output lacks, counts clipped; reference tokens)."""
    h, r = Counter(hyp), Counter(ref)
    return sum(max(0, n - h[t]) for t, n in r.items()), len(ref)


def score(run_dir: Path, data: Path) -> dict:
    import torch

    import heed
    from heed.evaluate import by_length, evaluate, parse_buckets

    torch.set_num_threads(1)
    translator = heed.load(str(run_dir / "model"), device="cpu")
    out: dict = {}
    srcs = (data / "test.fr").read_text(encoding="utf-8").splitlines()
    refs = (data / "test.en").read_text(encoding="utf-8").splitlines()
    hyps = [t.text for t in translator.translate(srcs, beam=5)]
    out["bleu"] = evaluate(hyps, refs).bleu
    out["by_length"] = [{"bucket": b.label, "n": b.count, "bleu": b.bleu}
                        for b in by_length(srcs, hyps, refs, parse_buckets(BUCKETS))]
    rep = [repeated_rate(h.split(), r.split()) for h, r in zip(hyps, refs)]
    drop = [dropped_rate(h.split(), r.split()) for h, r in zip(hyps, refs)]
    out["repeated_pct"] = 100 * sum(a for a, _ in rep) / max(1, sum(b for _, b in rep))
    out["dropped_pct"] = 100 * sum(a for a, _ in drop) / max(1, sum(b for _, b in drop))
    for kind in ("names", "numbers"):
        s = (data / f"copy-{kind}.fr").read_text(encoding="utf-8").splitlines()
        want = (data / f"copy-{kind}.copy").read_text(encoding="utf-8").splitlines()
        got = [t.text.split() for t in translator.translate(s, beam=5)]
        # replace_unk (Luong et al. 2015b) is the no-copy baseline's trick; a model without attention has none
        unk = ([t.text.split() for t in translator.translate(s, beam=5, replace_unk=True)]
               if translator.model.has_attention else got)
        out[f"copy_{kind}_pct"] = 100 * sum(w in g for w, g in zip(want, got)) / max(1, len(want))
        out[f"copy_{kind}_unk_pct"] = 100 * sum("<unk>" in g for g in got) / max(1, len(want))
        out[f"copy_{kind}_replace_unk_pct"] = 100 * sum(w in g for w, g in zip(want, unk)) / max(1, len(want))
    return out


def mean_sd(values: list[float]) -> str:
    if not values:
        return "—"
    m = statistics.fmean(values)
    return f"{m:.1f} ± {statistics.stdev(values):.1f}" if len(values) > 1 else f"{m:.1f}"


def report(results: dict) -> str:
    runs = results["runs"]
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in runs)]
    ok = {v: [r for r in runs if r["variant"] == v and "scores" in r] for v in variants}
    lines = [(f"Seeds {', '.join(str(s) for s in results['seeds'])}; {results['steps']} updates each; "
             f"data {results['data']}; {results['cpu']}."), "",
             ("| attention | runs | test BLEU (beam 5) | repeated % | dropped % | names copied % | names as <unk> % "
             "| numbers copied % | names copied with replace_unk % |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for v in variants:
        rs = ok[v]
        col = lambda k, rs=rs: mean_sd([r["scores"][k] for r in rs])
        lines.append(f"| {v} | {len(rs)} | {col('bleu')} | {col('repeated_pct')} | {col('dropped_pct')} | "
                     f"{col('copy_names_pct')} | {col('copy_names_unk_pct')} | {col('copy_numbers_pct')} | "
                     f"{col('copy_names_replace_unk_pct')} |")
    failed = [r for r in runs if "scores" not in r]
    if failed:
        lines += ["", "Failed runs: " + ", ".join(f"{r['variant']} seed {r['seed']} (see {r['train']['log']})"
                                                  for r in failed)]
    buckets = [b["bucket"] for b in next((r["scores"]["by_length"] for r in runs if "scores" in r), [])]
    if buckets:
        lines += ["", "BLEU by source length (words), mean over seeds:", "",
                  "| attention | " + " | ".join(f"{b}" for b in buckets) + " |",
                  "|---|" + "---:|" * len(buckets)]
        for v in variants:
            cells = []
            for b in buckets:
                vals = [x["bleu"] for r in ok[v] for x in r["scores"]["by_length"] if x["bucket"] == b]
                cells.append(mean_sd(vals))
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
        counts = {x["bucket"]: x["n"] for x in next(r for r in runs if "scores" in r)["scores"]["by_length"]}
        lines += ["", "Sentences per bucket: " + ", ".join(f"{b}: {counts[b]}" for b in buckets) + "."]
    return "\n".join(lines)


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "unknown CPU")
    flags = next((line for line in cpuinfo if line.startswith("flags")), "")
    return f"{model}, {os.cpu_count()} cores, {'AVX-512' if 'avx512f' in flags else 'AVX2'}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, default=ROOT.parent / "shared/data/tatoeba-fra-eng/fra.txt")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--max-words", type=int, default=12)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch-tokens", type=int, default=2500)
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--doc", type=Path, help="markdown file whose <!-- family:start/end --> block gets the tables")
    args = p.parse_args()
    results_path = args.work / "results.json"
    if not args.report_only:
        data = args.work / "data"
        counts = make_data(args.corpus, data, max_words=args.max_words, n_test=2000, n_dev=500, n_copy=500, seed=0)
        print("data:", counts, flush=True)
        config = args.work / "base.yaml"
        write_config(data, config, vocab=args.vocab, hidden=args.hidden, batch_tokens=args.batch_tokens)
        jobs = [(v, s) for s in args.seeds for v in args.variants]

        def one(job: tuple[str, int]) -> dict:
            """Train (unless an earlier invocation finished this run: its model/ is there) and score;
            each finished run is kept as runs/NAME.json, so an interrupted experiment goes on."""
            variant, seed = job
            run_dir = args.work / "runs" / f"{variant}-seed{seed}"
            saved = run_dir.with_suffix(".json")
            if saved.exists():
                return json.loads(saved.read_text(encoding="utf-8"))
            if (run_dir / "model" / "heed.json").exists():
                trained = {"rc": 0, "seconds": None, "log": str(run_dir.with_suffix(".log"))}
            else:
                if run_dir.exists():  # cut short by an interruption: train it again from the start
                    shutil.rmtree(run_dir)
                trained = train(config, run_dir, variant, seed, args.steps)
            record = {"variant": variant, "seed": seed, "train": trained}
            if trained["rc"] == 0:
                record["scores"] = score(run_dir, data)
                saved.write_text(json.dumps(record), encoding="utf-8")
            print(json.dumps({k: record[k] for k in ("variant", "seed", "train")} |
                             {"bleu": record.get("scores", {}).get("bleu")}), flush=True)
            return record

        with ThreadPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(one, jobs))
        results = {"runs": runs, "seeds": sorted({r["seed"] for r in runs}), "steps": args.steps, "cpu": cpu_name(),
                   "data": f"Tatoeba fra->eng, sentences of at most {args.max_words} words: " +
                           ", ".join(f"{k} {v:,}" for k, v in counts.items()),
                   "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        args.work.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results, indent=1), encoding="utf-8")
    results = json.loads(results_path.read_text(encoding="utf-8"))
    table = report(results)
    print(table)
    if args.doc:
        text = args.doc.read_text(encoding="utf-8")
        start, end = "<!-- family:start -->", "<!-- family:end -->"
        head, _, rest = text.partition(start)
        _, _, tail = rest.partition(end)
        args.doc.write_text(f"{head}{start}\n{table}\n{end}{tail}", encoding="utf-8")


if __name__ == "__main__":
    main()
