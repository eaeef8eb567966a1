"""Decoding an OPUS-MT-shaped model: heed (PyTorch, ONNX, CTranslate2 int8) beside Hugging Face's
`generate` and CTranslate2's own Marian converter, on the same weights. Issue 40's speed table.

    .venv/bin/python bench/studies/pretrained_speed.py [--work DIR] [--sentences 64] [--single 16] [--tokens 24]

The model: a random MarianMTModel of opus-mt-fr-en's shape (6 + 6 post-norm layers of 512, 8
heads, feed-forward 2,048, swish, one tied table of 58,101 rows), built by transformers and
imported by heed. Speed does not depend on the weights' values, only on how many steps run, so
every system decodes exactly `--tokens` output tokens and </s> per sentence at beam 5, from the
same token ids (lengths 10..30, seeded); no tokenization is timed. The logits' bias favours </s>
by EOS_BIAS: every system's minimum length holds it back for `--tokens` tokens, then every beam
ends there, as a trained model's do (a random model's would run into the length limit, where
heed's CTranslate2 runtime pays one teacher-forced pass for the forced </s> that real outputs
rarely need). The table prints each system's mean output length, to show the work was the same. 1 thread
each, every system in its own process (its peak RSS is that process's, model loaded and
decoded). Batch 1 decodes `--single` sentences one at a time, batch 64 decodes `--sentences`
at once.

Systems:
- hf:           transformers' MarianMTModel.generate (num_beams=5), float32;
- heed:         heed's search over the imported model (heed.search.translate_ids), float32;
- heed-int8:    the same, loaded with `heed.load(..., int8=True)`: dynamic int8 products (heed.nn.int8);
- heed-onnx:    heed's search over `heed export --format onnx`, float32;
- heed-ct2-int8: `heed export --format ctranslate2 --int8`, through heed's CT2 runtime;
- ct2-own-int8: CTranslate2's own TransformersConverter on the Hugging Face directory, int8,
  its translate_batch called directly.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

VOCAB = 58101  # opus-mt-fr-en: 58,100 pieces and <pad>
EOS_BIAS = 30.0
SLACK = 8  # the length limit is this far past --tokens: no output reaches it
SYSTEMS = ("hf", "heed", "heed-int8", "heed-onnx", "heed-ct2-int8", "ct2-own-int8")


def make_model(work: Path) -> None:
    """The Hugging Face directory (work/hf), heed's import (work/heed), and the three exports."""
    import io

    import sentencepiece as spm
    import torch
    import transformers

    from heed.export.onnx import export_model
    from heed.pretrained import import_model

    hf = work / "hf"
    if not (hf / "model.safetensors").exists():
        hf.mkdir(parents=True, exist_ok=True)
        # A small SentencePiece model for the tokenizer files; the vocabulary is filled to 58,100.
        lines = [f"le mot {i} et la phrase {i * 7 % 101}" for i in range(2000)]
        proto = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=proto, vocab_size=200,
                                       minloglevel=2)
        for name in ("source.spm", "target.spm"):
            (hf / name).write_bytes(proto.getvalue())
        sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
        pieces = ["</s>", "<unk>", *[sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]]
        pieces += [f"\u2581w{i}" for i in range(VOCAB - 1 - len(pieces))] + ["<pad>"]
        (hf / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}), encoding="utf-8")
        transformers.MarianTokenizer(str(hf / "source.spm"), str(hf / "target.spm"), str(hf / "vocab.json")
                                     ).save_pretrained(hf)
        config = transformers.MarianConfig(
            vocab_size=VOCAB, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
            decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish",
            scale_embedding=True, pad_token_id=VOCAB - 1, eos_token_id=0, decoder_start_token_id=VOCAB - 1,
            max_position_embeddings=512, share_encoder_decoder_embeddings=True)
        torch.manual_seed(0)
        model = transformers.MarianMTModel(config).eval()
        with torch.no_grad():
            model.final_logits_bias[0, 0] = EOS_BIAS
        model.save_pretrained(hf)
    if not (work / "heed" / "heed.json").exists():
        import_model(hf, work / "heed")
    if not (work / "onnx").exists():
        export_model(work / "heed", work / "onnx", kind="onnx")
    if not (work / "ct2").exists():
        export_model(work / "heed", work / "ct2", kind="ctranslate2", int8=True)
    if not (work / "ct2-own").exists():
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(hf)).convert(str(work / "ct2-own"), quantization="int8")


def sources(count: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, VOCAB - 1) for _ in range(rng.randint(10, 30))] for _ in range(count)]


def run(system: str, work: Path, batch: int, count: int, tokens: int) -> dict:
    """Decode `count` sentences `batch` at a time with `system`; seconds of decoding and peak RSS."""
    import torch

    torch.set_num_threads(1)
    ids = sources(count, seed=batch)
    if system == "hf":
        import transformers

        model = transformers.MarianMTModel.from_pretrained(work / "hf").eval()

        def decode(group: list[list[int]]) -> list:
            width = max(map(len, group)) + 1
            src = torch.full((len(group), width), VOCAB - 1)
            mask = torch.zeros_like(src)
            for k, s in enumerate(group):
                src[k, :len(s) + 1], mask[k, :len(s) + 1] = torch.tensor([*s, 0]), 1
            with torch.inference_mode():
                out = model.generate(src, attention_mask=mask, num_beams=5, max_new_tokens=tokens + SLACK,
                                     min_new_tokens=tokens, length_penalty=1.0, do_sample=False)
            return [[i for i in row[1:] if i != VOCAB - 1][:-1] for row in out.tolist()]  # no start, pad, </s>
    elif system == "ct2-own-int8":
        import ctranslate2

        translator = ctranslate2.Translator(str(work / "ct2-own"), device="cpu", intra_threads=1, inter_threads=1)
        vocab = json.loads((work / "hf" / "vocab.json").read_text(encoding="utf-8"))
        by_id = sorted(vocab, key=vocab.get)

        def decode(group: list[list[int]]) -> list:
            out = translator.translate_batch([[by_id[i] for i in s] + ["</s>"] for s in group], beam_size=5,
                                             max_decoding_length=tokens + SLACK, min_decoding_length=tokens,
                                             max_batch_size=len(group))
            return [r.hypotheses[0] for r in out]
    else:
        import heed
        from heed.search import translate_ids

        path = {"heed": "heed", "heed-int8": "heed", "heed-onnx": "onnx", "heed-ct2-int8": "ct2"}[system]
        translator = heed.load(work / path, device="cpu", int8=system == "heed-int8")
        cfg = translator.resolve_decode({"beam_size": 5, "min_len": tokens, "max_len_a": 0.0,
                                         "max_len_b": tokens + SLACK, "length_penalty": 1.0})
        model = translator.model

        def decode(group: list[list[int]]) -> list:
            if hasattr(model, "translate_ids"):  # CTranslate2: its own search
                decoded = model.translate_ids(group, cfg, batch_size=len(group))
            else:
                with torch.inference_mode():
                    decoded = translate_ids(model, group, cfg, device=torch.device("cpu"), batch_size=len(group))
            return [d.hypotheses[0].tokens for d in decoded]

    decode(ids[:1])  # warm-up: lazy initialisation, first-call allocations
    outputs = []
    start = time.perf_counter()
    for k in range(0, count, batch):
        outputs += decode(ids[k:k + batch])
    seconds = time.perf_counter() - start
    return {"system": system, "batch": batch, "sentences": count, "seconds": seconds,
            "output_tokens": sum(map(len, outputs)) / len(outputs),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/heed-pretrained-speed"))
    parser.add_argument("--sentences", type=int, default=64, help="sentences decoded at batch 64")
    parser.add_argument("--single", type=int, default=16, help="sentences decoded one at a time")
    parser.add_argument("--tokens", type=int, default=24, help="output tokens per sentence")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--make", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=2, metavar=("SYSTEM", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        system, batch = args.one[0], int(args.one[1])
        print(json.dumps(run(system, args.work, batch, args.single if batch == 1 else args.sentences, args.tokens)))
        return
    if args.make:
        make_model(args.work)
        return
    # Every system, and the model's making, in a process of its own: Linux keeps a process's peak
    # RSS across exec, so a child of a large parent would report the parent's.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run([sys.executable, __file__, "--work", str(args.work), "--make"], env=env, check=True)
    rows = []
    for batch in (1, 64):
        for system in args.systems:
            done = subprocess.run([sys.executable, __file__, "--work", str(args.work), "--sentences",
                                   str(args.sentences), "--single", str(args.single), "--tokens", str(args.tokens),
                                   "--one", system, str(batch)], capture_output=True, text=True, env=env, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"batch {batch:>2} {system:<14} {r['sentences'] / r['seconds']:7.2f} sentences/s  "
                  f"peak RSS {r['peak_rss_mb']:6.0f} MB  {r['output_tokens']:.1f} tokens", flush=True)
    print("\n| batch | system | sentences/s | × HF generate | peak RSS (MB) | output tokens |\n"
          "|---|---|---:|---:|---:|---:|")
    for batch in (1, 64):
        base = next(r for r in rows if r["batch"] == batch and r["system"] == "hf") if "hf" in args.systems else None
        for r in (r for r in rows if r["batch"] == batch):
            speed = r["sentences"] / r["seconds"]
            ratio = f"{speed / (base['sentences'] / base['seconds']):.2f}" if base else "-"
            print(f"| {batch} | {r['system']} | {speed:.2f} | {ratio} | {r['peak_rss_mb']:.0f} | "
                  f"{r['output_tokens']:.1f} |")


if __name__ == "__main__":
    main()
