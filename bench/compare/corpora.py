"""The two data sets every system trains on, written once into WORK/data as line-aligned
`{train,dev,test}.{src,tgt}` files of space-separated tokens, which every toolkit reads at word level
(heed with its `word` tokenizer):

- dates:    the peers' own corpus, `make_data.py` from the shared folder (one character per token,
            `▁` for a space; 20,000 / 1,000 / 1,000 pairs). Quality: exact match (`exact_match.py`).
- multi30k: German -> English from the shared Multi30k folder, cut into pieces by ONE SentencePiece
            BPE model trained on both sides of the training set; pairs over 60 pieces on a side are
            dropped from training (the peers' length limit). The shared folder has no test split, so
            `val` (1,014 pairs) serves as dev and test. Quality: sacreBLEU on the detokenised output
            against the raw references.
"""
from __future__ import annotations

import io
import subprocess
from dataclasses import dataclass
from pathlib import Path

from measure import StepFailed, run_measured

MAX_PIECES = 60  # the peers' configs: Joey max_length, OpenNMT-py *_seq_length, fairseq max positions


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def hypotheses(kind: str, hyps: Path, n: int) -> list[str]:
    """The first n outputs in input order: fairseq-generate's `H-<id>` lines, else one per line."""
    if kind == "fairseq":
        by_id = {}
        for line in read_lines(hyps):
            if line.startswith("H-"):
                key, _, text = line.split("\t", 2)
                by_id[int(key[2:])] = text
        return [by_id.get(i, "") for i in range(n)]
    return read_lines(hyps)[:n]


@dataclass
class Dates:
    name = "dates"
    title = "Speed side by side"
    marker = "compare"
    metric = "exact match %"
    max_len = 20
    embed, hidden = 64, 128  # the issue's dates model (and the peers' shared configs)
    source: Path | None = None  # unused; the shared make_data.py makes the corpus

    def describe(self) -> str:
        return ("the shared character-level dates corpus (make_data.py: 20,000 train pairs, 8 formats -> ISO; "
                "test 1,000)")

    def make(self, bench) -> None:
        run_measured([str(bench.heed_python), str(bench.shared / "make_data.py"), str(bench.data)],
                     log=bench.work / "logs" / "make_data.log", env=bench.env)

    def heed_clip(self, bench) -> float:
        """The peers divide the summed loss by sentences, heed by target tokens. Every target has 10
        tokens + EOS, so heed's gradient is theirs / 11 and, Adam being scale-free, clip 5/11 in heed
        gives exactly their clip-5 updates."""
        return 5.0 / _mean_target_tokens(bench)

    def joey_config(self, cfg: dict) -> dict:
        return cfg

    def quality(self, bench, kind: str, hyps: Path, n: int) -> float:
        """exact_match.py (the shared scorer) on the first n outputs against the first n references."""
        ref = bench.data / "test.tgt"
        refs = read_lines(ref)
        if n < len(refs):
            ref = bench.data / f"test.first{n}.tgt"
            write_lines(ref, refs[:n])
        first = hyps.with_name(hyps.name + ".test")
        write_lines(first, hypotheses(kind, hyps, n))
        out = subprocess.run([str(bench.heed_python), str(bench.shared / "exact_match.py"), str(first), str(ref)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise StepFailed(f"exact_match.py: {(out.stderr or out.stdout).strip()[-300:]}")
        return 100.0 * float(out.stdout.split()[0])


@dataclass
class Multi30k:
    source: Path  # train.de, train.en, val.de, val.en
    vocab_size: int = 8000
    name = "multi30k"
    title = "Speed side by side: Multi30k de→en"
    marker = "compare-multi30k"
    metric = "BLEU"
    max_len = 60
    embed, hidden = 256, 256  # the issue's Multi30k model; the peers' shared configs are resized to it

    def describe(self) -> str:
        return (f"Multi30k de→en from {self.source} (29,000 train pairs; val, 1,014 pairs, as dev and test), one "
                f"shared SentencePiece BPE model of {self.vocab_size:,} pieces over both languages; pairs over "
                f"{MAX_PIECES} pieces dropped from training")

    def _spm(self, bench):
        import sentencepiece as spm

        return spm.SentencePieceProcessor(model_file=str(bench.data / "spm.model"))

    def make(self, bench) -> None:
        import sentencepiece as spm

        for name in ("train.de", "train.en", "val.de", "val.en"):
            if not (self.source / name).exists():
                raise StepFailed(f"{self.source / name}: missing; point --multi30k-dir at the Multi30k folder")
        bench.data.mkdir(parents=True, exist_ok=True)
        train_de, train_en = read_lines(self.source / "train.de"), read_lines(self.source / "train.en")
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(train_de + train_en), model_writer=model,
                                       model_type="bpe", vocab_size=self.vocab_size, character_coverage=1.0,
                                       num_threads=1, minloglevel=2, bos_id=-1, eos_id=-1, unk_id=0)
        (bench.data / "spm.model").write_bytes(model.getvalue())
        sp = self._spm(bench)

        def pieces(lines: list[str]) -> list[str]:
            return [" ".join(sp.encode(line.strip(), out_type=str)) for line in lines]

        src, tgt = pieces(train_de), pieces(train_en)
        kept = [(s, t) for s, t in zip(src, tgt) if 0 < len(s.split()) <= MAX_PIECES and 0 < len(t.split()) <= MAX_PIECES]
        write_lines(bench.data / "train.src", [s for s, _ in kept])
        write_lines(bench.data / "train.tgt", [t for _, t in kept])
        val_src, val_tgt = pieces(read_lines(self.source / "val.de")), pieces(read_lines(self.source / "val.en"))
        for split in ("dev", "test"):
            write_lines(bench.data / f"{split}.src", val_src)
            write_lines(bench.data / f"{split}.tgt", val_tgt)
        write_lines(bench.data / "test.ref.en", [line.strip() for line in read_lines(self.source / "val.en")])

    def heed_clip(self, bench) -> float:
        """Targets differ in length here, so clip 5 / (mean target tokens) only approximates the peers'
        per-sentence clip 5 (see Dates.heed_clip)."""
        return 5.0 / _mean_target_tokens(bench)

    def joey_config(self, cfg: dict) -> dict:
        for side in ("src", "trg"):
            cfg["data"][side]["voc_limit"] = 10 * self.vocab_size  # the dates config caps it at 100
        return cfg

    def quality(self, bench, kind: str, hyps: Path, n: int) -> float:
        import sacrebleu

        sp = self._spm(bench)
        refs = read_lines(bench.data / "test.ref.en")
        n = min(n, len(refs))
        out = [sp.decode_pieces(line.split()) for line in hypotheses(kind, hyps, n)]
        return sacrebleu.corpus_bleu(out, [refs[:n]]).score


def _mean_target_tokens(bench) -> float:
    """Target tokens per sentence, EOS included, over the training set."""
    lengths = [len(line.split()) + 1 for line in read_lines(bench.data / "train.tgt")]
    return sum(lengths) / len(lengths)


def tokens_per_step(bench, batch: int = 128) -> float:
    return batch * _mean_target_tokens(bench)
