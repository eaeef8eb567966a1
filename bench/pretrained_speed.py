"""Decoding OPUS-MT-shaped models: heed (PyTorch, with and without a vocabulary shortlist, bf16, ONNX,
CTranslate2 int8 with and without its vocabulary map) beside Hugging Face's `generate` and
CTranslate2's own Marian converter, on the same weights. Issue 57's speed table.

    .venv/bin/python bench/pretrained_speed.py [--shapes base tc-big] [--work DIR] [--sentences 64]
        [--single 16] [--tokens 24] [--systems ...] [--corpus ../shared/data/tatoeba-fra-eng/fra.txt]
        [--tc-big ../shared/data/opus-mt-tc-big-fr-en]

Two shapes, random weights (speed does not depend on their values, only on how many steps run):
- base: opus-mt-fr-en's (6 + 6 post-norm layers of 512, 8 heads, feed-forward 2,048, swish, one tied
  table of 58,101 rows), a small SentencePiece model padded to that vocabulary; sources are random ids.
- tc-big: opus-mt-tc-big-fr-en's real configuration and tokenizers (../shared/data; Transformer-big:
  1,024 wide, 16 heads, feed-forward 4,096, relu, 53,017 shared entries, </s> at 43,311, <pad> the
  decoder's start); sources are real French sentences of Tatoeba (every 50th line with 10 to 30
  pieces), and its shortlist is counted from the other Tatoeba pairs (`heed data shortlist`, k 50,
  common 500), so the batches' candidate sets are a real text's.

Every system decodes exactly `--tokens` output tokens and </s> per sentence at beam 5 from the same
token ids, with the imported model's own power length penalty (1.0); no tokenization is timed. The
logits' bias favours </s> by EOS_BIAS: every system's minimum length holds it back for `--tokens`
tokens, then every beam ends there, as a trained model's do. The table prints each system's mean
output length, to show the work was the same. 1 thread each, every system in its own process (its
peak RSS is that process's, model loaded and decoded). Batch 1 decodes `--single` sentences one at a
time, batch 64 decodes `--sentences` at once.

Systems:
- hf:            transformers' MarianMTModel.generate (num_beams=5), float32;
- heed:          heed's search over the imported model (heed.search.translate_ids), float32;
- heed-shortlist: the same over the model's shortlist (tc-big only; heed.search.shortlist);
- heed-bf16:     heed's search with `heed.load(bf16=True)` (weights and products in bfloat16);
- heed-int8:     heed's search with `heed.load(int8=True)` (dynamic int8 products: heed.nn.int8);
- heed-onnx:     heed's search over `heed export --format onnx`, float32 (base only);
- heed-ct2-int8: `heed export --format ctranslate2 --int8`, through heed's CT2 runtime as
  `heed translate` calls it (no attention asked), with `stopping: beam`: a sentence ends once 5
  hypotheses finished, CTranslate2's own stop, the search ct2-own-int8 runs (heed's default, exact,
  searches each source to its limit with a penalty). The path is heed.export.ct2_run.ranking's: with
  min_len = --tokens > 1 "heed" (CTranslate2 searches to the limit, --tokens + SLACK, and heed keeps
  what the beam stop finished), as CTranslate2's min_decoding_length renormalises each beam's step
  without </s> apart, which heed's search does not, so its beams would not be heed's;
- heed-ct2-int8-shortlist: the same with the shortlist, CTranslate2's vocabulary map (tc-big only);
- ct2-own-int8:  CTranslate2's own TransformersConverter on the Hugging Face directory, int8, its
  translate_batch called directly.
The heed CT2 rows also print how many outputs equal ct2-own-int8's (the converters' agreement).

`--lengths natural --eos-bias B` (a work directory of its own: the bias is in the weights) decodes
without a minimum length instead: the </s> bias B lets the random model's beams end by themselves
(base at B 1.6: 20-26 tokens), every system with the beam stop (heed `stopping: beam`, HF
`early_stopping=True`, CTranslate2's own) and min_len 1, the imported models' own, up to 64 tokens.
There heed's CTranslate2 export takes its fast path (ranking "ctranslate2": CTranslate2 stops and
ranks), which a minimum length past 1 rules out, as a trained model's decoding does.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

EOS_BIAS = 30.0  # --lengths forced: </s> wins at once when the minimum length lets it
SLACK = 8  # the length limit is this far past --tokens: no output reaches it
NATURAL_LIMIT = 64  # --lengths natural: the length limit
SYSTEMS = ("hf", "heed", "heed-shortlist", "heed-bf16", "heed-int8", "heed-onnx", "heed-ct2-int8", "heed-ct2-int8-shortlist",
           "ct2-own-int8")
ONLY = {"heed-onnx": "base", "heed-shortlist": "tc-big", "heed-ct2-int8-shortlist": "tc-big"}
BASE_VOCAB = 58101  # opus-mt-fr-en: 58,100 pieces and <pad>
ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def _base_hf(hf: Path) -> None:
    """opus-mt-fr-en's shape with a small SentencePiece model padded to its vocabulary."""
    import io

    import sentencepiece as spm
    import transformers

    hf.mkdir(parents=True, exist_ok=True)
    lines = [f"le mot {i} et la phrase {i * 7 % 101}" for i in range(2000)]
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=proto, vocab_size=200, minloglevel=2)
    for name in ("source.spm", "target.spm"):
        (hf / name).write_bytes(proto.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    pieces = ["</s>", "<unk>", *[sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]]
    pieces += [f"\u2581w{i}" for i in range(BASE_VOCAB - 1 - len(pieces))] + ["<pad>"]
    (hf / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}), encoding="utf-8")
    transformers.MarianTokenizer(str(hf / "source.spm"), str(hf / "target.spm"), str(hf / "vocab.json")
                                 ).save_pretrained(hf)
    config = transformers.MarianConfig(
        vocab_size=BASE_VOCAB, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish",
        scale_embedding=True, pad_token_id=BASE_VOCAB - 1, eos_token_id=0, decoder_start_token_id=BASE_VOCAB - 1,
        max_position_embeddings=512, share_encoder_decoder_embeddings=True)
    _save_random(config, hf)


def _tc_big_hf(hf: Path, tc_big: Path) -> None:
    """opus-mt-tc-big-fr-en's real configuration and tokenizer files, random weights."""
    import shutil

    import transformers

    hf.mkdir(parents=True, exist_ok=True)
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(tc_big / name, hf / name)
    config = transformers.MarianConfig.from_json_file(str(tc_big / "config.json"))
    config.torch_dtype = "float32"
    _save_random(config, hf)


def _save_random(config, hf: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, config.eos_token_id] = float(os.environ.get("HEED_BENCH_EOS_BIAS", EOS_BIAS))
    model.save_pretrained(hf)


def _tatoeba(corpus: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """(French, English) training pairs for the shortlist, and the held-out French sources (every
    50th line): the file is English<TAB>French."""
    pairs, held = [], []
    with open(corpus, encoding="utf-8") as lines:
        for k, line in enumerate(lines):
            en, fr = line.rstrip("\n").split("\t")[:2]
            fr = fr.replace("\u00a0", " ").replace("\u202f", " ")
            (held.append(fr) if k % 50 == 0 else pairs.append((fr, en)))
    return pairs, held


def make_models(work: Path, shape: str, corpus: Path, tc_big: Path) -> None:
    """work/SHAPE/: the Hugging Face directory (hf), heed's import (heed) with its shortlist (tc-big),
    the exports (onnx for base, ct2 int8 with the vocabulary map), CTranslate2's own (ct2-own), and
    sources.json (the source ids every system decodes)."""
    from heed.export.onnx import export_model
    from heed.pretrained import import_model

    root = work / shape
    hf = root / "hf"
    if not (hf / "model.safetensors").exists():
        _base_hf(hf) if shape == "base" else _tc_big_hf(hf, tc_big)
    if not (root / "heed" / "heed.json").exists():
        import_model(hf, root / "heed")
    if shape == "tc-big" and not (root / "heed" / "shortlist.json").exists():
        pairs, _ = _tatoeba(corpus)
        tsv = root / "train.fr-en.tsv"
        tsv.write_text("".join(f"{fr}\t{en}\n" for fr, en in pairs), encoding="utf-8")
        subprocess.run([sys.executable, "-m", "heed", "data", "shortlist", str(root / "heed"), "--tsv", str(tsv)],
                       check=True)
    if shape == "base" and not (root / "onnx").exists():
        export_model(root / "heed", root / "onnx", kind="onnx")
    if not (root / "ct2").exists():
        export_model(root / "heed", root / "ct2", kind="ctranslate2", int8=True)
    if not (root / "ct2-own").exists():
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(hf)).convert(str(root / "ct2-own"), quantization="int8")
    if not (root / "sources.json").exists():
        (root / "sources.json").write_text(json.dumps(_sources(root, shape, corpus)), encoding="utf-8")


def _sources(root: Path, shape: str, corpus: Path, count: int = 256) -> list[list[int]]:
    """Source ids (no </s>) of 10 to 30 pieces: random ids (base), held-out Tatoeba French (tc-big)."""
    vocab = json.loads((root / "hf" / "vocab.json").read_text(encoding="utf-8"))
    rng = random.Random(0)
    if shape == "base":
        return [[rng.randrange(3, len(vocab) - 1) for _ in range(rng.randint(10, 30))] for _ in range(count)]
    import transformers

    tokenizer = transformers.MarianTokenizer.from_pretrained(root / "hf")
    _, held = _tatoeba(corpus)
    out = []
    for text in held:
        ids = tokenizer(text)["input_ids"][:-1]  # without </s>
        if 10 <= len(ids) <= 30:
            out.append(ids)
    rng.shuffle(out)
    return out[:count]


def run(system: str, root: Path, batch: int, count: int, tokens: int, natural: bool = False) -> dict:
    """Decode `count` sentences `batch` at a time with `system`; seconds of decoding, peak RSS, outputs.
    `natural`: no minimum length and the beam stop (--lengths natural), else exactly `tokens` tokens."""
    import torch

    least, limit = (1, NATURAL_LIMIT) if natural else (tokens, tokens + SLACK)

    torch.set_num_threads(1)
    ids = json.loads((root / "sources.json").read_text(encoding="utf-8"))[:count]
    vocab = json.loads((root / "hf" / "vocab.json").read_text(encoding="utf-8"))
    pad, eos = vocab["<pad>"], vocab["</s>"]
    if system == "hf":
        import transformers

        model = transformers.MarianMTModel.from_pretrained(root / "hf").eval()

        def decode(group: list[list[int]]) -> list:
            width = max(map(len, group)) + 1
            src = torch.full((len(group), width), pad)
            mask = torch.zeros_like(src)
            for k, s in enumerate(group):
                src[k, :len(s) + 1], mask[k, :len(s) + 1] = torch.tensor([*s, eos]), 1
            with torch.inference_mode():
                out = model.generate(src, attention_mask=mask, num_beams=5, max_new_tokens=limit,
                                     min_new_tokens=least, length_penalty=1.0, do_sample=False,
                                     **({"early_stopping": True} if natural else {}))
            return [[i for i in row[1:] if i != pad][:-1] for row in out.tolist()]  # no start, pad, </s>
    elif system == "ct2-own-int8":
        import ctranslate2

        translator = ctranslate2.Translator(str(root / "ct2-own"), device="cpu", intra_threads=1, inter_threads=1)
        by_id = sorted(vocab, key=vocab.get)

        def decode(group: list[list[int]]) -> list:
            out = translator.translate_batch([[by_id[i] for i in s] + ["</s>"] for s in group], beam_size=5,
                                             max_decoding_length=limit, min_decoding_length=least,
                                             max_batch_size=len(group), length_penalty=1.0)
            return [[vocab[t] for t in r.hypotheses[0]] for r in out]
    else:
        import heed
        from heed.explain.pairs import precision
        from heed.search import translate_ids

        cpu = torch.device("cpu")
        path = {"heed": "heed", "heed-shortlist": "heed", "heed-bf16": "heed", "heed-int8": "heed", "heed-onnx": "onnx",
                "heed-ct2-int8": "ct2", "heed-ct2-int8-shortlist": "ct2"}[system]
        translator = heed.load(root / path, device="cpu", bf16=system == "heed-bf16", int8=system == "heed-int8")
        cfg = translator.resolve_decode({"beam_size": 5, "min_len": least, "max_len_a": 0.0,
                                         "max_len_b": limit, "length_penalty": 1.0, "length_norm": "power",
                                         "shortlist": system.endswith("shortlist"),
                                         "stopping": "beam" if natural or path == "ct2" else "exact"})
        model = translator.model

        def decode(group: list[list[int]]) -> list:
            if hasattr(model, "translate_ids"):  # CTranslate2: its own search, as `heed translate` asks it
                decoded = model.translate_ids(group, cfg, batch_size=len(group), attention=False)
            else:
                with torch.inference_mode(), precision(model, cpu):  # bf16: autocast, as Translator decodes
                    decoded = translate_ids(model, group, cfg, device=cpu, batch_size=len(group),
                                            shortlist=translator.shortlist if cfg.shortlist else None)
            return [d.hypotheses[0].tokens for d in decoded]

    decode(ids[:1])  # warm-up: lazy initialisation, first-call allocations
    outputs = []
    start = time.perf_counter()
    for k in range(0, count, batch):
        outputs += decode(ids[k:k + batch])
    seconds = time.perf_counter() - start
    return {"system": system, "batch": batch, "sentences": count, "seconds": seconds,
            "output_tokens": sum(map(len, outputs)) / len(outputs), "outputs": outputs,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/heed-pretrained-speed"))
    parser.add_argument("--shapes", nargs="+", default=["base", "tc-big"], choices=["base", "tc-big"])
    parser.add_argument("--sentences", type=int, default=64, help="sentences decoded at batch 64")
    parser.add_argument("--single", type=int, default=16, help="sentences decoded one at a time")
    parser.add_argument("--tokens", type=int, default=24, help="output tokens per sentence (--lengths forced)")
    parser.add_argument("--lengths", choices=["forced", "natural"], default="forced",
                        help="forced: every output --tokens long (min_len); natural: outputs end by themselves, "
                             "the beam stop everywhere (see above)")
    parser.add_argument("--eos-bias", type=float, default=EOS_BIAS,
                        help="the random models' </s> bias, set when --work's models are made")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--corpus", type=Path, default=SHARED / "tatoeba-fra-eng" / "fra.txt")
    parser.add_argument("--tc-big", type=Path, default=SHARED / "opus-mt-tc-big-fr-en")
    parser.add_argument("--make", help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=3, metavar=("SHAPE", "SYSTEM", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        shape, system, batch = args.one[0], args.one[1], int(args.one[2])
        count = args.single if batch == 1 else args.sentences
        print(json.dumps(run(system, args.work / shape, batch, count, args.tokens, args.lengths == "natural")))
        return
    if args.make:
        make_models(args.work, args.make, args.corpus, args.tc_big)
        return
    # Every system, and the models' making, in a process of its own: Linux keeps a process's peak
    # RSS across exec, so a child of a large parent would report the parent's.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HEED_BENCH_EOS_BIAS": str(args.eos_bias)}
    rows = []
    for shape in args.shapes:
        subprocess.run([sys.executable, __file__, "--work", str(args.work), "--corpus", str(args.corpus),
                        "--tc-big", str(args.tc_big), "--make", shape], env=env, check=True)
        for batch in (1, 64):
            for system in (s for s in args.systems if ONLY.get(s, shape) == shape):
                done = subprocess.run([sys.executable, __file__, "--work", str(args.work), "--sentences",
                                       str(args.sentences), "--single", str(args.single), "--tokens",
                                       str(args.tokens), "--lengths", args.lengths, "--one", shape, system, str(batch)],
                                      capture_output=True, text=True, env=env)
                if done.returncode:
                    print(done.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"{shape} {system} batch {batch} failed")
                r = {**json.loads(done.stdout.strip().splitlines()[-1]), "shape": shape}
                rows.append(r)
                print(f"{shape:<6} batch {batch:>2} {system:<24} {r['sentences'] / r['seconds']:7.2f} sentences/s  "
                      f"peak RSS {r['peak_rss_mb']:6.0f} MB  {r['output_tokens']:.1f} tokens", flush=True)
    print("\n| shape | batch | system | sentences/s | × HF generate | × CT2's own | peak RSS (MB) | output tokens "
          "| outputs = CT2's own |\n|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        same = [x for x in rows if x["shape"] == r["shape"] and x["batch"] == r["batch"]]
        speed = r["sentences"] / r["seconds"]
        ratios = []
        for peer in ("hf", "ct2-own-int8"):
            base = next((x for x in same if x["system"] == peer), None)
            ratios.append(f"{speed / (base['sentences'] / base['seconds']):.2f}" if base else "-")
        own = next((x for x in same if x["system"] == "ct2-own-int8"), None)
        agree = "-"
        if own is not None and r["system"].startswith("heed-ct2"):
            agree = f"{sum(a == b for a, b in zip(r['outputs'], own['outputs']))}/{len(own['outputs'])}"
        print(f"| {r['shape']} | {r['batch']} | {r['system']} | {speed:.2f} | {ratios[0]} | {ratios[1]} | "
              f"{r['peak_rss_mb']:.0f} | {r['output_tokens']:.1f} | {agree} |")


if __name__ == "__main__":
    main()
