"""Does heed's CTranslate2 export of an imported OPUS-MT model compute what CTranslate2's own
converter makes of the Hugging Face directory? Issue 57 item 3: `<pad>`'s logit (the decoder's start
token, which heed's search never emits: its runtime searches again, with it suppressed, a source
whose beams hold it) and the vocabulary map.

On the tc-big work directory of `bench/pretrained_speed.py` (opus-mt-tc-big-fr-en's real
configuration and tokenizers, random weights, heed's import with a shortlist counted from Tatoeba),
both converters write float32 models, so only the conversion can differ:

- heed:  `heed export --format ctranslate2` of the import (its own output projection, `<pad>`'s
         bias, the target vocabulary reordered for the vocabulary map, vmap.txt from the shortlist);
- own:   ctranslate2's TransformersConverter on the HF directory, once plain and once given heed's
         vmap.txt (`vmap=`), the converter's own way to take a vocabulary map.

Then on the work directory's sources (held-out Tatoeba French): every target token's log-probability
by teacher forcing (score_batch) on each model's own greedy outputs, the largest difference;
CTranslate2's beam 5 (its own stop and ranking) outputs and scores; and the same with `use_vmap`;
and `<pad>`'s log-probability as the first output token beside Hugging Face's.

    .venv/bin/python bench/pretrained_speed.py --shapes tc-big --work /tmp/pspeed4 ...   (makes the models)
    .venv/bin/python bench/studies/ct2_converter_agreement.py --work /tmp/pspeed4 [--count 64]
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/heed-pretrained-speed"))
    parser.add_argument("--count", type=int, default=64)
    args = parser.parse_args()
    import ctranslate2
    import torch
    import transformers
    from ctranslate2.converters import TransformersConverter

    from heed.export.onnx import export_model

    torch.set_num_threads(1)
    root = args.work / "tc-big"
    vocab = json.loads((root / "hf" / "vocab.json").read_text(encoding="utf-8"))
    by_id = sorted(vocab, key=vocab.get)
    ids = json.loads((root / "sources.json").read_text(encoding="utf-8"))[: args.count]
    source = [[by_id[i] for i in s] + ["</s>"] for s in ids]
    with tempfile.TemporaryDirectory() as scratch:
        heed_dir = export_model(root / "heed", Path(scratch) / "heed", kind="ctranslate2")
        TransformersConverter(str(root / "hf")).convert(str(Path(scratch) / "own"))
        TransformersConverter(str(root / "hf")).convert(str(Path(scratch) / "own-vmap"),
                                                       vmap=str(heed_dir / "vmap.txt"))
        load = lambda d: ctranslate2.Translator(str(d), device="cpu", intra_threads=1)
        heed_ct2, own, own_vmap = load(heed_dir), load(Path(scratch) / "own"), load(Path(scratch) / "own-vmap")
        beam = dict(beam_size=5, max_decoding_length=64, min_decoding_length=1, length_penalty=1.0,
                    max_input_length=0, return_scores=True)
        greedy = own.translate_batch(source, beam_size=1, max_decoding_length=64, max_input_length=0)
        targets = [r.hypotheses[0] for r in greedy]
        a, b = heed_ct2.score_batch(source, targets), own.score_batch(source, targets)
        worst = max(abs(x - y) for s, t in zip(a, b) for x, y in zip(s.log_probs, t.log_probs))
        print(f"{len(source)} sources, opus-mt-tc-big-fr-en's configuration, float32 on both sides")
        print(f"teacher-forced log-probabilities of {sum(map(len, targets))} tokens (and </s>): "
              f"largest |heed - own| {worst:.2e}")
        # CTranslate2's converter drops <pad> from a Marian vocabulary (and starts the decoder from a zero
        # embedding instead): there "<pad>" is looked up as <unk>, and every other token's log-probability
        # is normalised without <pad>'s share, which Hugging Face's (and heed's) softmax keeps
        pad, unk = (s.log_probs[0] for s in own.score_batch(source[:1] * 2, [["<pad>"], ["<unk>"]]))
        pad_heed = heed_ct2.score_batch(source[:1], [["<pad>"]])[0].log_probs[0]
        hf = transformers.MarianMTModel.from_pretrained(root / "hf").eval()
        with torch.inference_mode():
            logits = hf(input_ids=torch.tensor([ids[0] + [vocab["</s>"]]]),
                        decoder_input_ids=torch.tensor([[hf.config.decoder_start_token_id]])).logits
        pad_hf = float(logits[0, -1].log_softmax(-1)[vocab["<pad>"]])
        size = len(json.loads((Path(scratch) / "own" / "shared_vocabulary.json").read_text(encoding="utf-8")))
        print(f"<pad> as the first token's log-probability: Hugging Face {pad_hf:.4g}, heed's export {pad_heed:.4g}, "
              f"CTranslate2's converter {pad:.4g}, its <unk>'s {unk:.4g} ({size:,} entries: <pad> dropped, "
              f"against {len(vocab):,})")
        for name, options, theirs in (("beam 5", {}, own), ("beam 5, use_vmap", {"use_vmap": True}, own_vmap)):
            x = heed_ct2.translate_batch(source, **beam, **options)
            y = theirs.translate_batch(source, **beam, **options)
            same = sum(p.hypotheses[0] == q.hypotheses[0] for p, q in zip(x, y))
            gap = max(abs(p.scores[0] - q.scores[0]) for p, q in zip(x, y) if p.hypotheses[0] == q.hypotheses[0])
            print(f"{name:<17}: best hypothesis equal for {same}/{len(source)}, "
                  f"largest score difference where equal {gap:.2e}")


if __name__ == "__main__":
    main()
