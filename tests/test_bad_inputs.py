"""Every bad or hostile input a user can give the `heed` command gets a clear error and harms nothing.

Each case asserts: exit code 2; one line on stderr that starts with "error:" and names the file,
line or field; no traceback; no hang (every case runs under a time limit); and, where the case
points an output at something that already exists (a file, a device, a symlink), that it is
unchanged afterwards. Most cases run the CLI in-process; those that need a closed stdin, another
CPU's feature set or a separate process run `python -m heed` in a subprocess.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from model_files import rehash as rehash_model_files
from typer.testing import CliRunner

from heed.cli import app

TIME_LIMIT = 60  # seconds a case may take; a hang fails the case instead of the whole run
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}  # a CPU without bf16 in oneDNN


@dataclass
class Call:
    """What one case runs and what it expects."""

    argv: list[Any]
    expect: list[str]  # fragments the error line must contain
    keep: list[Path] = field(default_factory=list)  # paths that must be unchanged afterwards
    stdin: str | None = None
    close_stdin: bool = False
    env: dict[str, str] | None = None  # set: run in a subprocess with these variables
    module: str = "heed"  # subprocess runs `python -m MODULE`


@dataclass
class Ctx:
    """What the cases build on: a scratch directory, a tiny corpus, a trained model to copy."""

    tmp: Path
    corpus: dict[str, Path]
    config: Callable[..., dict[str, Any]]
    run: Path

    def file(self, name: str, data: str | bytes) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8")
        else:
            path.write_bytes(data)
        return path

    def yaml_config(self, name: str = "run.yaml", edit: Callable[[dict], None] | None = None, **train: Any) -> Path:
        data = self.config(self.tmp / "out", **train)
        if edit is not None:
            edit(data)
        return self.file(name, yaml.safe_dump(data))

    def corpus_config(self, **train_corpus: Any) -> Path:
        def edit(data: dict) -> None:
            data["data"]["train"] = {k: str(v) for k, v in train_corpus.items()}

        return self.yaml_config("corpus.yaml", edit)

    def model(self) -> Path:
        """A private copy of the trained model directory, free to break."""
        target = self.tmp / "model"
        if not target.exists():
            shutil.copytree(self.run / "model", target)
        return target

    def swapped_vocab(self, name: str = "swapped", *, rehash: bool = True) -> Path:
        """A copy of the trained model whose target vocabulary has two tokens swapped: with `rehash`
        its heed.json records the new file's sha256, so it loads (the sizes fit the weights) as a
        model of another vocabulary; without, it is a model edited after heed wrote it."""
        target = self.tmp / name
        shutil.copytree(self.run / "model", target)
        tokens = json.loads((target / "tgt.vocab.json").read_text(encoding="utf-8"))
        tokens[4], tokens[5] = tokens[5], tokens[4]
        (target / "tgt.vocab.json").write_text(json.dumps(tokens), encoding="utf-8")
        return rehash_model_files(target) if rehash else target

    def narrow_model(self, name: str = "narrow") -> Path:
        """A model directory with the trained model's codec and a narrower (hidden_size 8) random model."""
        from heed.checkpoint import load_model_dir

        return self.random_model(name, load_model_dir(self.run).config.model.model_copy(update={"hidden_size": 8}))

    def random_model(self, name: str, model_config: Any) -> Path:
        """A model directory with the trained model's codec and config and a random model of `model_config`."""
        from heed.checkpoint import load_model_dir, save_model_dir
        from heed.nn.build import build_model

        base = load_model_dir(self.run)
        config = base.config.model_copy(update={"model": model_config})
        model = build_model(config.model, src_vocab_size=len(base.codec.src_vocab),
                            tgt_vocab_size=len(base.codec.tgt_vocab))
        return save_model_dir(self.tmp / name, model=model, config=config, codec=base.codec)

    def full_device(self) -> Path:
        """A device that is always full, like /dev/full. As root a private node in the scratch
        directory: were heed ever to regress and replace its output path, it would replace this
        one and not the machine's /dev/full. Others cannot replace /dev/full anyway."""
        if os.geteuid() != 0:
            return Path("/dev/full")
        path = self.tmp / "full"
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        return path

    def exported(self, edit: Callable[[dict, Path], None] | None = None, *, kind: str = "onnx") -> Path:
        """The trained model exported to ONNX (skipped without the onnx extra), or with kind
        "ctranslate2" a random Transformer of its codec exported to CTranslate2 (skipped without
        ctranslate2); `edit(manifest, dir)` changes it, and the manifest is written back with every
        listed file's sha256 recomputed (a consistent, hostile export)."""
        pytest.importorskip("onnxruntime" if kind == "onnx" else "ctranslate2",
                            reason=f"heed-nmt[{'onnx' if kind == 'onnx' else 'ct2'}] is not installed")
        from heed.export.onnx import export_model, sha256
        from heed.nn.model_config import ModelConfig

        model = self.run if kind == "onnx" else self.random_model(
            "transformer", ModelConfig(family="transformer", d_model=16, heads=2, layers=1, ff_size=16))
        out = export_model(model, self.tmp / "exp", kind=kind)
        if edit is not None:
            manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
            edit(manifest, out)
            manifest["files"] = {n: sha256(out / n) for n in manifest["files"] if (out / n).exists()}
            (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        return out

    def prepared(self, name: str = "prepared") -> Path:
        """The tiny training corpus prepared (heed prepare) into several shards, free to break."""
        from heed.config import config_from_dict
        from heed.data.prepare import prepare

        directory = self.tmp / name
        prepare(config_from_dict(self.config(self.tmp / "out")), directory, shard_tokens=1500)
        return directory

    def prepared_config(self, directory: Path) -> Path:
        """A training config that reads `directory` (a prepared corpus) in place of data.train."""
        def edit(data: dict) -> None:
            data["data"].pop("train")
            data["data"]["prepared"] = str(directory)

        return self.yaml_config("prepared.yaml", edit)

    def empty_dir(self, name: str) -> Path:
        """An empty directory (a command may fill it; a refused one must leave it empty)."""
        path = self.tmp / name
        path.mkdir(parents=True)
        return path

    def marian(self, name: str = "marian") -> Path:
        """A tiny random Hugging Face Marian directory (transformers builds it; skipped without)."""
        from pretrained_models import make_marian

        pytest.importorskip("transformers", reason="transformers (heed-nmt[dev]) is not installed")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make_marian(self.tmp / name)

    def marian_release(self, name: str = "release") -> Path:
        """A Marian release (.npz, vocab.yml, source.spm, target.spm, decoder.yml) of c.marian()'s model."""
        from pretrained_models import make_marian_release

        return make_marian_release(self.tmp / name, self.marian(f"{name}-hf"))

    def fifo(self, name: str = "fifo") -> Path:
        path = self.tmp / name
        os.mkfifo(path)
        return path


CASES: dict[str, Callable[[Ctx], Call]] = {}


def case(name: str) -> Callable[[Callable[[Ctx], Call]], Callable[[Ctx], Call]]:
    def register(build: Callable[[Ctx], Call]) -> Callable[[Ctx], Call]:
        assert name not in CASES, name
        CASES[name] = build
        return build

    return register


BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
    f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n" for i in range(9))


# ------------------------------------------------------------------------------- config files


@case("config-missing")
def _(c: Ctx) -> Call:
    return Call(["train", c.tmp / "nope.yaml"], ["nope.yaml"])


@case("config-is-a-device")
def _(c: Ctx) -> Call:
    return Call(["train", "/dev/zero"], ["/dev/zero", "character device", "may never end"])


@case("config-is-a-directory")
def _(c: Ctx) -> Call:
    (c.tmp / "dir.yaml").mkdir()
    return Call(["train", c.tmp / "dir.yaml"], ["dir.yaml", "directory"])


@case("config-not-utf8")
def _(c: Ctx) -> Call:
    return Call(["train", c.file("latin1.yaml", "model: {decoder: 'caf\xe9'}".encode("latin-1"))], ["latin1.yaml"])


@case("config-invalid-yaml")
def _(c: Ctx) -> Call:
    return Call(["train", c.file("broken.yaml", "data: [unclosed\n")], ["broken.yaml", "line"])


@case("config-not-a-mapping")
def _(c: Ctx) -> Call:
    return Call(["train", c.file("list.yaml", "- a\n- b\n")], ["list.yaml"])


@case("config-unknown-field")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["model"].update(hiden_size=8))], ["model.hiden_size"])


@case("config-wrong-type")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["model"].update(hidden_size="big"))], ["model.hidden_size"])


@case("config-negative-size")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["model"].update(hidden_size=-5))], ["model.hidden_size"])


@case("config-coverage-loss-without-coverage")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["model"].update(coverage_loss=1.0))],
                ["model.coverage_loss", "model.coverage: true"])


@case("config-coverage-with-the-plain-decoder")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--set", "model.decoder=plain", "--set", "model.coverage=true"],
                ["model.coverage", "plain decoder"])


def _transformer(data: dict) -> None:
    data["model"] = {"family": "transformer", "layers": 1, "d_model": 8, "heads": 2, "ff_size": 16}


@case("config-shared-vocab-with-two-tokenizers")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=_transformer), "--set", "data.shared_vocab=true",
                 "--set", "data.tokenizer.src.kind=word"], ["data", "tokenizer.src (word", "differ"])


@case("config-shared-embeddings-without-a-shared-vocab")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=_transformer), "--set", "model.share_embeddings=true"],
                ["model.share_embeddings", "data.shared_vocab: true"])


@case("train-init-is-not-a-model")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--init", c.tmp / "nowhere"], ["train.init", "nowhere"])


@case("train-init-with-another-architecture")
def _(c: Ctx) -> Call:
    # the config says hidden_size 24 where the model it starts from has 16
    config = c.yaml_config(edit=lambda d: d["model"].update(hidden_size=24))
    return Call(["train", config, "--init", c.model()], ["model.hidden_size", "train.init"])


@case("train-init-with-another-tokenizer")
def _(c: Ctx) -> Call:
    config = c.yaml_config(edit=lambda d: d["data"].update(tokenizer={"src": {"kind": "word"}}))
    return Call(["train", config, "--init", c.model()], ["data.tokenizer", "train.init"])


@case("translate-a-language-on-a-model-of-one-pair")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--tgt-lang", "fr"], ["'fr'", "no language tokens"], stdin="1 May 2001\n")


@case("config-alias-bomb")
def _(c: Ctx) -> Call:
    return Call(["train", c.file("bomb.yaml", BOMB)], ["bomb.yaml", "alias"])


@case("config-duplicate-key")
def _(c: Ctx) -> Call:
    text = yaml.safe_dump(c.config(c.tmp / "out")) + "output_dir: elsewhere\n"
    return Call(["train", c.file("dup.yaml", text)], ["dup.yaml", "output_dir", "line"])


@case("config-deeply-nested")
def _(c: Ctx) -> Call:
    return Call(["train", c.file("deep.yaml", "a: " + "[" * 100_000)], ["deep.yaml"])


@case("config-huge")
def _(c: Ctx) -> Call:
    return Call(["train", c.file("huge.yaml", "# " + "x" * (8 << 20) + "\n")], ["huge.yaml"])


@case("config-reverse-in-train")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["train"].update(reverse=True))], ["train.reverse", "data"])


@case("config-device-tpu")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["train"].update(device="tpu"))], ["train.device"])


@case("config-decode-max-len-zero")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["decode"].update(max_len_a=0.0, max_len_b=0))],
                ["decode.max_len"])


@case("config-n-best-over-beam")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["decode"].update(beam_size=2, n_best=3))], ["decode"])


@case("config-dev-and-split")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["data"].update(split={"dev": 5, "test": 5}))],
                ["split"])


@case("set-without-equals")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--set", "model.hidden_size"], ["model.hidden_size"])


@case("set-unknown-field")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--set", "model.hidden=3"], ["model.hidden"])


@case("set-alias-bomb")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--set", "model.dropout=&a [*a]"], ["model.dropout"])


@case("train-alignment-layer-without-supervision")
def _(c: Ctx) -> Call:
    config = c.yaml_config(edit=lambda d: d.update(model={"family": "transformer", "layers": 1, "d_model": 16,
                                                          "heads": 2, "ff_size": 32, "alignment_layer": True}))
    return Call(["train", config], ["model.alignment_layer", "add train.alignment"])


@case("train-bf16-without-cpu-support")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["train"].update(bf16=True, device="cpu"))],
                ["train.bf16", "bfloat16"], env=AVX2_ONLY)


@case("output-dir-is-a-file")
def _(c: Ctx) -> Call:
    afile = c.file("afile", "keep me\n")
    return Call(["train", c.yaml_config(), "--output-dir", afile], ["afile"], keep=[afile])


# --------------------------------------------------------------------------- guided alignment


def _guided(c: Ctx, edit: Callable[[dict], None] | None = None, **alignment: Any) -> tuple[Path, Path]:
    """A config with train.alignment, and its output directory made empty beforehand (it must stay so)."""
    def with_alignment(data: dict) -> None:
        data["train"]["alignment"] = alignment
        if edit is not None:
            edit(data)

    out = c.tmp / "out"
    out.mkdir(exist_ok=True)
    return c.yaml_config("guided.yaml", with_alignment), out


def _links_file(c: Ctx, name: str, bad_line: int | None = None, bad: str = "") -> Path:
    """One "0-0" line per pair of the tiny training corpus (200), line `bad_line` (1-based) replaced by `bad`."""
    lines = ["0-0"] * len(c.corpus["train"].read_text(encoding="utf-8").splitlines())
    if bad_line is not None:
        lines[bad_line - 1] = bad
    return c.file(name, "\n".join(lines) + "\n")


@case("guided-supervision-too-few-lines")
def _(c: Ctx) -> Call:
    config, out = _guided(c, supervision=str(c.file("few.align", "0-0\n0-0\n")))
    return Call(["train", config], ["few.align", "2 alignment lines", "data.train have 200 sentences"], keep=[out])


@case("guided-supervision-link-outside-its-pair")
def _(c: Ctx) -> Call:
    config, out = _guided(c, supervision=str(_links_file(c, "far.align", 7, "0-0 0-99")))
    return Call(["train", config], ["far.align:7", "link 0-99"], keep=[out])


@case("guided-supervision-not-integers")
def _(c: Ctx) -> Call:
    config, out = _guided(c, supervision=str(_links_file(c, "words.align", 3, "a-b")))
    return Call(["train", config], ["words.align:3", "'a-b'"], keep=[out])


@case("guided-supervision-task-without-a-task")
def _(c: Ctx) -> Call:
    config, out = _guided(c, supervision="task")
    return Call(["train", config], ["train.alignment.supervision", "generated task"], keep=[out])


@case("guided-head-that-does-not-exist")
def _(c: Ctx) -> Call:
    config, out = _guided(c, supervision="self", heads=[0, 3])
    return Call(["train", config], ["train.alignment.heads", "head 3 does not exist", "1 head"], keep=[out])


@case("guided-layer-that-does-not-exist")
def _(c: Ctx) -> Call:
    config, out = _guided(c, _transformer, supervision="self", layer=2)
    return Call(["train", config], ["train.alignment.layer", "layer 2 does not exist", "1 decoder layer"], keep=[out])


@case("guided-self-starting-after-training")
def _(c: Ctx) -> Call:
    config, out = _guided(c, supervision="self", start_step=5000)
    return Call(["train", config], ["train.alignment.start_step", "start_step 5000", "past the run's end"], keep=[out])


@case("data-align-half-a-corpus")
def _(c: Ctx) -> Call:
    out = c.tmp / "half.align"
    return Call(["data", "align", "--src", c.corpus["test_src"], "-o", out], ["--src FILE --tgt FILE"])


@case("data-align-corpus-missing")
def _(c: Ctx) -> Call:
    return Call(["data", "align", "--tsv", c.tmp / "nope.tsv", "-o", c.tmp / "nope.align"], ["nope.tsv"])


@case("align-head-twice")
def _(c: Ctx) -> Call:
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--head", "1,1"],
                ["--head must be a 0-based index", "got '1,1'"])


@case("import-an-architecture-heed-does-not-convert")
def _(c: Ctx) -> Call:
    source = c.file("bert/config.json", json.dumps({"model_type": "bert", "architectures": ["BertModel"]})).parent
    out = c.empty_dir("imported")
    return Call(["import", source, "-o", out], ["config.json", "'bert'", "BertModel", "heed imports m2m_100, marian"],
                keep=[out])


@case("import-a-marian-release-without-its-source-spm")
def _(c: Ctx) -> Call:
    source = c.marian()
    (source / "source.spm").unlink()
    out = c.empty_dir("imported")
    return Call(["import", source, "-o", out], ["source.spm", "missing"], keep=[out])


@case("import-a-marian-npz-release-without-its-source-spm")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    (source / "source.spm").unlink()
    out = c.empty_dir("imported")
    return Call(["import", source, "-o", out], ["source.spm", "missing", "source.spm and target.spm"], keep=[out])


@case("import-a-truncated-marian-npz")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    weights = source / "model.npz"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    out = c.empty_dir("imported")
    return Call(["import", source, "-o", out], ["model.npz", "truncated or damaged"], keep=[out])


@case("import-truncated-weights")
def _(c: Ctx) -> Call:
    source = c.marian()
    weights = source / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    out = c.empty_dir("imported")
    return Call(["import", source, "-o", out], ["model.safetensors", "truncated or damaged"], keep=[out])


def _edit_marian_config(c: Ctx, edit: Callable[[dict], None]) -> Path:
    source = c.marian()
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    edit(config)
    (source / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return source


@case("import-a-config-without-d-model")
def _(c: Ctx) -> Call:
    source = _edit_marian_config(c, lambda config: config.pop("d_model"))
    out = c.empty_dir("imported")
    return Call(["import", source, "-o", out], ["config.json", "lacks d_model"], keep=[out])


@case("import-heads-that-do-not-divide-d-model")
def _(c: Ctx) -> Call:
    source = _edit_marian_config(c, lambda config: config.update(d_model=30))
    out = c.empty_dir("imported")
    return Call(["import", source, "-o", out], ["config.json", "model heed cannot build", "not divisible by heads"],
                keep=[out])


@case("import-over-a-directory-that-is-not-a-model")
def _(c: Ctx) -> Call:
    out = c.file("notes/todo.txt", "mine").parent
    return Call(["import", c.tmp / "anything", "-o", out], ["notes", "not a heed model directory"], keep=[out])


@case("import-a-revision-of-a-local-directory")
def _(c: Ctx) -> Call:
    out = c.empty_dir("imported")
    return Call(["import", c.marian(), "-o", out, "--revision", "main"], ["--revision", "hf:ORG/NAME"], keep=[out])


@case("guided-a-model-without-attention")
def _(c: Ctx) -> Call:
    config, out = _guided(c, lambda d: d["model"].update(decoder="plain"), supervision="self")
    return Call(["train", config], ["train.alignment", "no attention heads"], keep=[out])


# ----------------------------------------------------------------------------------- corpora


@case("corpus-gzip-bomb")
def _(c: Ctx) -> Call:
    line = b"le 3 mars 1998\t1998-03-03\n"
    bomb = c.tmp / "bomb.tsv.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        for _ in range(64):  # 64 MB of one line repeated: about 1000x
            f.write(line * ((1 << 20) // len(line)))
    return Call(["train", c.corpus_config(tsv=bomb)], ["bomb.tsv.gz", "gzip bomb"])


@case("corpus-missing")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.tmp / "none.tsv")], ["none.tsv"])


@case("corpus-is-a-directory")
def _(c: Ctx) -> Call:
    (c.tmp / "d.tsv").mkdir()
    return Call(["train", c.corpus_config(tsv=c.tmp / "d.tsv")], ["d.tsv"])


@case("corpus-dev-zero")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv="/dev/zero")], ["/dev/zero"])


@case("corpus-fifo-without-writer")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.fifo("pairs.tsv"))], ["pairs.tsv"])


@case("corpus-control-character")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.file("bell.tsv", "a\tb\nc\x07d\te\n"))], ["bell.tsv:2"])


@case("corpus-nul-byte")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.file("nul.tsv", "a\tb\nc\x00d\te\n"))], ["nul.tsv:2"])


@case("corpus-invalid-utf8")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.file("bad.tsv", b"a\tb\n\xc3\x28\tx\n"))], ["bad.tsv:2", "UTF-8"])


@case("corpus-line-without-tab")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.file("notab.tsv", "a\tb\nno tab here\n"))], ["notab.tsv:2"])


@case("corpus-empty-line-inside")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.file("gap.tsv", "a\tb\n\nc\td\n"))], ["gap.tsv:2"])


@case("corpus-empty")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.file("empty.tsv", ""))], ["empty.tsv"])


@case("corpus-empty-target")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.file("notgt.tsv", "a\tb\nc\t   \n"))], ["notgt.tsv:2"])


@case("corpus-parallel-lengths-differ")
def _(c: Ctx) -> Call:
    src, tgt = c.file("p.src", "a\nb\nc\n"), c.file("p.tgt", "x\ny\n")
    return Call(["train", c.corpus_config(src=src, tgt=tgt)], ["p.tgt"])


@case("corpus-truncated-gz")
def _(c: Ctx) -> Call:
    data = gzip.compress(("a\tb\n" * 5000).encode())
    return Call(["train", c.corpus_config(tsv=c.file("cut.tsv.gz", data[: len(data) // 2]))], ["cut.tsv.gz"])


@case("corpus-not-gzip")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.file("fake.tsv.gz", "a\tb\n"))], ["fake.tsv.gz"])


@case("corpus-binary-garbage")
def _(c: Ctx) -> Call:
    return Call(["train", c.corpus_config(tsv=c.file("garbage.tsv", bytes(range(256)) * 40))], ["garbage.tsv"])


@case("corpus-split-larger-than-corpus")
def _(c: Ctx) -> Call:
    def edit(d: dict) -> None:
        d["data"].pop("dev")
        d["data"].pop("test")
        d["data"]["split"] = {"dev": 150, "test": 150}

    return Call(["train", c.yaml_config("split.yaml", edit)], [c.corpus["train"].name])


@case("corpus-every-pair-too-long")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["data"].update(max_src_len=1))], ["max_src_len"])


# ------------------------------------------------------------------------------ output and resume


@case("resume-without-checkpoint")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--resume"], ["--resume"])


@case("fresh-run-into-a-finished-run")
def _(c: Ctx) -> Call:
    run = c.tmp / "done"
    shutil.copytree(c.run, run)
    return Call(["train", c.yaml_config(), "--output-dir", run], [str(run)], keep=[run / "metrics.jsonl"])


@case("resume-with-another-model")
def _(c: Ctx) -> Call:
    run = c.tmp / "done"
    shutil.copytree(c.run, run)
    return Call(["train", c.yaml_config(), "--output-dir", run, "--resume", "--set", "model.hidden_size=32"],
                ["model.hidden_size"], keep=[run / "metrics.jsonl"])


@case("resume-with-changed-corpus")
def _(c: Ctx) -> Call:
    run = c.tmp / "done"
    shutil.copytree(c.run, run)
    lines = c.corpus["train"].read_text(encoding="utf-8").splitlines(keepends=True)
    changed = c.file("changed.tsv", "".join(lines[:-20]))

    def edit(d: dict) -> None:
        d["data"]["train"] = {"tsv": str(changed)}

    return Call(["train", c.yaml_config(edit=edit), "--output-dir", run, "--resume"], ["changed.tsv"],
                keep=[run / "metrics.jsonl"])


@case("second-training-in-a-locked-output-dir")
def _(c: Ctx) -> Call:
    import fcntl

    run = c.tmp / "busy"
    run.mkdir()
    holder = open(run / ".heed.lock", "a+")  # noqa: SIM115 (held until the process ends: another run)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    holder.write(f"{os.getpid()}\n")
    holder.flush()
    _HELD.append(holder)
    return Call(["train", c.yaml_config(), "--output-dir", run], [str(run), str(os.getpid())])


_HELD: list[Any] = []


# --------------------------------------------------------------------------- model directories


@case("model-missing")
def _(c: Ctx) -> Call:
    return Call(["translate", c.tmp / "nomodel"], ["nomodel"], stdin="x\n")


@case("model-empty-directory")
def _(c: Ctx) -> Call:
    (c.tmp / "empty").mkdir()
    return Call(["translate", c.tmp / "empty"], ["empty"], stdin="x\n")


@case("model-config-alias-bomb")
def _(c: Ctx) -> Call:
    model = c.model()
    (model / "config.yaml").write_text(BOMB, encoding="utf-8")
    return Call(["translate", rehash_model_files(model)], ["config.yaml"], stdin="x\n")


@case("model-config-duplicate-key")
def _(c: Ctx) -> Call:
    model = c.model()
    text = (model / "config.yaml").read_text(encoding="utf-8")
    (model / "config.yaml").write_text(text + "output_dir: again\n", encoding="utf-8")
    return Call(["translate", rehash_model_files(model)], ["config.yaml", "output_dir"], stdin="x\n")


@case("model-weights-are-a-pickle")
def _(c: Ctx) -> Call:
    import pickle

    model = c.model()
    (model / "model.safetensors").write_bytes(pickle.dumps({"a": 1}))
    return Call(["translate", rehash_model_files(model)], ["model.safetensors"], stdin="x\n")


@case("model-weights-truncated")
def _(c: Ctx) -> Call:
    model = c.model()
    data = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[: len(data) // 2])
    return Call(["translate", rehash_model_files(model)], ["model.safetensors"], stdin="x\n")


@case("model-tokenizers-json-broken")
def _(c: Ctx) -> Call:
    model = c.model()
    (model / "tokenizers.json").write_text("{not json", encoding="utf-8")
    return Call(["translate", rehash_model_files(model)], ["tokenizers.json"], stdin="x\n")


@case("model-tokenizers-kind-edited")
def _(c: Ctx) -> Call:
    model = c.model()
    text = (model / "tokenizers.json").read_text(encoding="utf-8")
    assert '"char"' in text
    (model / "tokenizers.json").write_text(text.replace('"char"', '"unigram"'), encoding="utf-8")
    return Call(["translate", rehash_model_files(model)], ["tokenizers.json"], stdin="x\n")


@case("model-heed-json-missing")
def _(c: Ctx) -> Call:
    model = c.model()
    (model / "heed.json").unlink()
    return Call(["translate", model], ["model"], stdin="x\n")


@case("model-alignment-reading-edited")
def _(c: Ctx) -> Call:
    model = c.model()
    meta = json.loads((model / "heed.json").read_text(encoding="utf-8"))
    meta["alignment"] = {"method": "sideways", "layer": None, "head": None, "weights": "attention", "units": "words",
                         "dev_aer": 0.1, "default_dev_aer": 0.2}
    (model / "heed.json").write_text(json.dumps(meta), encoding="utf-8")
    src = c.file("a.src", "3 March 1998\n")
    return Call(["align", model, "--src", src, "--tgt", c.file("a.tgt", "1998-03-03\n")],
                ["heed.json", '"alignment"', "sideways", "remove the entry"], keep=[model / "heed.json"])


@case("model-weights-flipped-byte")
def _(c: Ctx) -> Call:
    model = c.model()
    data = bytearray((model / "model.safetensors").read_bytes())
    data[-3] ^= 0x01  # a weight, not the header: the file still loads
    (model / "model.safetensors").write_bytes(bytes(data))
    return Call(["translate", model], ["model.safetensors", "sha256"], stdin="x\n")


@case("model-vocabulary-edited-after-saving")
def _(c: Ctx) -> Call:
    return Call(["translate", c.swapped_vocab(rehash=False)], ["tgt.vocab.json", "sha256"], stdin="x\n")


@case("model-weights-nan")
def _(c: Ctx) -> Call:
    from safetensors.torch import load_file, save_file

    model = c.model()
    weights = load_file(str(model / "model.safetensors"))
    next(v for v in weights.values() if v.is_floating_point()).view(-1)[0] = float("nan")
    save_file(weights, str(model / "model.safetensors"))
    return Call(["translate", rehash_model_files(model)], ["model.safetensors", "NaN"], stdin="x\n")


@case("model-weights-are-a-fifo")
def _(c: Ctx) -> Call:
    model = c.model()
    (model / "model.safetensors").unlink()
    os.mkfifo(model / "model.safetensors")
    return Call(["translate", model], ["model.safetensors", "FIFO"], stdin="x\n")


@case("model-vocabulary-is-a-fifo")
def _(c: Ctx) -> Call:
    model = c.model()
    (model / "src.vocab.json").unlink()
    os.mkfifo(model / "src.vocab.json")
    return Call(["--no-verify", "translate", model], ["src.vocab.json", "FIFO"], stdin="x\n")


@case("model-config-is-a-fifo")
def _(c: Ctx) -> Call:
    model = c.model()
    (model / "config.yaml").unlink()
    os.mkfifo(model / "config.yaml")
    return Call(["--no-verify", "translate", model], ["config.yaml", "FIFO"], stdin="x\n")


@case("model-too-large-to-build")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["model"].update(hidden_size=1_000_000_000))],
                ["field 'model'", "too large"])


@case("model-embeddings-too-large-to-build")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["model"].update(embed_size=2**40))],
                ["field 'model'", "too large", "GB"])


@case("model-rnn-layers-past-the-deepest-published")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["model"].update(encoder_layers=100000))],
                ["model.encoder_layers", "1000"])


@case("model-transformer-layers-past-the-deepest-published")
def _(c: Ctx) -> Call:
    transformer = {"family": "transformer", "layers": 100000, "d_model": 16, "heads": 2, "ff_size": 32}
    return Call(["train", c.yaml_config(edit=lambda d: d.update(model=transformer))], ["model.layers", "1000"])


# ------------------------------------------------------------------------------ numbers in configs


@case("config-betas-nan")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["train"].update(betas=[float("nan"), 0.999]))],
                ["train.betas"])


@case("config-betas-out-of-range")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["train"].update(betas=[2.0, 3.0]))], ["train.betas"])


@case("config-seed-too-large")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--set", "train.seed=1180591620717411303424"], ["train.seed"])


@case("config-threads-too-many")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--set", "train.threads=100000"], ["train.threads"])


@case("config-early-stopping-target-nan")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--set", "train.early_stopping.target=.nan"],
                ["train.early_stopping.target"])


@case("config-model-number-inf")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--set", "model.coverage=true", "--set", "model.attention=additive",
                 "--set", "model.coverage_loss=.inf"], ["model.coverage_loss"])


@case("config-max-minutes-inf")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(), "--set", "train.max_minutes=.inf"], ["train.max_minutes"])


# ------------------------------------------------------------------------------------ translate


@case("translate-device-tpu")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--device", "tpu"], ["device", "tpu"], stdin="x\n")


@case("translate-bf16-without-cpu-support")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--bf16", "--device", "cpu"], ["--bf16", "bfloat16"], stdin="x\n",
                env=AVX2_ONLY)


@case("translate-int8-without-cpu-kernels")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--int8"], ["--int8", "AVX2"], stdin="x\n",
                env={"ATEN_CPU_CAPABILITY": "default"})  # a CPU without AVX2, as ATen sees it


@case("translate-int8-on-cuda")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--int8", "--device", "cuda"], ["--int8", "CPU"], stdin="x\n")


@case("translate-int8-with-bf16")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--int8", "--bf16"], ["--int8", "--bf16"], stdin="x\n")


@case("translate-int8-of-an-export")
def _(c: Ctx) -> Call:
    return Call(["translate", c.exported(), "--int8"], ["--int8", "heed export --int8"], stdin="x\n")


def _shortlist_file(c: Ctx, name: str, edit: Callable[[str], str]) -> tuple[Path, Path]:
    """(a private model, a shortlist file of it counted from the tiny corpus and then `edit`ed)."""
    from heed.data.codec import Codec
    from heed.search.shortlist import Vocabularies, build_shortlist

    model = c.model()
    codec = Codec.load(model)
    pairs = [(codec.src_ids(codec.src_tokens(src)), codec.tgt_ids(codec.tgt_tokens(tgt), []))
             for src, tgt in (line.split("\t")[:2] for line in c.corpus["train"].read_text(encoding="utf-8").splitlines())]
    shortlist = build_shortlist(pairs, src_vocab=len(codec.src_vocab), tgt_vocab=len(codec.tgt_vocab), k=3, common=3)
    return model, c.file(name, edit(Vocabularies.of(model, codec).text(shortlist)))


@case("translate-shortlist-on-a-model-without-one")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--shortlist"], ["records no vocabulary shortlist", "heed data shortlist"],
                stdin="1 mars 1999\n")


@case("data-shortlist-from-a-file-cut-short")
def _(c: Ctx) -> Call:
    model, cut = _shortlist_file(c, "cut.json", lambda text: text[:200])
    return Call(["data", "shortlist", model, "--from", cut], ["cut.json", "cut short"], keep=[model, model / "heed.json"])


@case("data-shortlist-from-a-file-whose-entries-do-not-count-its-table")
def _(c: Ctx) -> Call:
    def edit(text: str) -> str:
        data = json.loads(text)
        data["table"].popitem()
        return json.dumps(data)

    model, edited = _shortlist_file(c, "edited.json", edit)
    return Call(["data", "shortlist", model, "--from", edited], ["edited.json", "entries"],
                keep=[model, model / "heed.json"])


@case("data-shortlist-from-a-file-of-another-vocabulary")
def _(c: Ctx) -> Call:
    model, other = _shortlist_file(c, "other.json", lambda text: json.dumps({**json.loads(text), "target_vocab": "0" * 64}))
    return Call(["data", "shortlist", model, "--from", other], ["other.json", "another target vocabulary"],
                keep=[model, model / "heed.json"])


@case("evaluate-int8-on-cuda")
def _(c: Ctx) -> Call:
    src = c.file("src.txt", "x\n")
    return Call(["evaluate", c.run, "--src", src, "--ref", src, "--int8", "--device", "cuda:0"], ["--int8", "CPU"])


@case("serve-int8-with-bf16")
def _(c: Ctx) -> Call:
    return Call(["serve", c.run, "--int8", "--bf16"], ["--int8", "--bf16"])


@case("translate-stdin-closed")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run], ["stdin"], close_stdin=True, env={})


@case("translate-input-missing")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--input", c.tmp / "in.txt"], ["in.txt"])


@case("translate-input-is-a-directory")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--input", c.tmp], [str(c.tmp)])


@case("translate-input-invalid-utf8")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--input", c.file("in.txt", b"1 May 2001\n\xff\n")], ["in.txt:2"])


@case("translate-output-dev-full")
def _(c: Ctx) -> Call:
    full = c.full_device()
    return Call(["translate", c.run, "-o", full], [str(full)], keep=[full], stdin="1 May 2001\n")


@case("translate-output-is-a-directory")
def _(c: Ctx) -> Call:
    out = c.tmp / "outdir"
    out.mkdir()
    return Call(["translate", c.run, "-o", out], ["outdir"], keep=[out], stdin="1 May 2001\n")


@case("translate-output-parent-is-a-file")
def _(c: Ctx) -> Call:
    parent = c.file("plain", "keep\n")
    return Call(["translate", c.run, "-o", parent / "out.txt"], ["plain"], keep=[parent], stdin="1 May 2001\n")


@case("translate-output-fifo-without-reader")
def _(c: Ctx) -> Call:
    fifo = c.fifo("out.fifo")
    return Call(["translate", c.run, "-o", fifo], ["out.fifo"], keep=[fifo], stdin="1 May 2001\n")


@case("translate-output-symlink-to-dev-full")
def _(c: Ctx) -> Call:
    link, full = c.tmp / "link.txt", c.full_device()
    link.symlink_to(full)
    return Call(["translate", c.run, "-o", link], ["link.txt"], keep=[link, full], stdin="1 May 2001\n")


@case("translate-beam-zero")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--beam", "0"], ["--beam"], stdin="x\n")


@case("translate-stop-nope")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--stop", "nope"], ["--stop", "exact", "beam"], stdin="x\n")


@case("translate-batch-size-zero")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--batch-size", "0"], ["--batch-size"], stdin="x\n")


@case("translate-threads-zero")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--threads", "0"], ["--threads"], stdin="x\n")


@case("translate-max-len-a-inf")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--max-len-a", "inf"], ["--max-len-a", "finite"], stdin="x\n")


@case("translate-beam-a-million")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--beam", "1000000"], ["--beam", "256"], stdin="x\n")


@case("translate-max-len-b-a-hundred-million")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--max-len-b", "100000000"], ["--max-len-b", "4096"], stdin="x\n")


@case("translate-threads-a-hundred-thousand")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--threads", "100000"], ["--threads", "1024"], stdin="x\n")


@case("translate-temperature-inf")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--sampling", "--temperature", "inf"], ["--temperature"], stdin="x\n")


@case("translate-coverage-penalty-huge")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--beam", "3", "--coverage-penalty", "1e308"], ["--coverage-penalty"],
                stdin="x\n")


@case("translate-impossible-min-len-without-repeats")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--no-repeat-ngram", "1", "--min-len", "50"], ["--min-len", "--no-repeat-ngram"],
                stdin="x\n")


@case("translate-dictionary-missing")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, "--dictionary", c.tmp / "dict.tsv"], ["dict.tsv"], stdin="x\n")


@case("translate-ensemble-of-another-vocabulary")
def _(c: Ctx) -> Call:
    return Call(["translate", c.run, c.swapped_vocab()], ["swapped", "target vocabulary", "ensemble"],
                stdin="1 May 2001\n")


# ------------------------------------------------------------------------------------- average


@case("average-one-checkpoint")
def _(c: Ctx) -> Call:
    last = c.run / "checkpoints" / "last"
    return Call(["average", last, "-o", c.tmp / "avg"], ["at least two", str(last)])


@case("average-another-architecture")
def _(c: Ctx) -> Call:
    return Call(["average", c.run / "checkpoints" / "last", c.narrow_model(), "-o", c.tmp / "avg"],
                ["narrow", "model.hidden_size"])


@case("average-another-vocabulary")
def _(c: Ctx) -> Call:
    return Call(["average", c.run / "checkpoints" / "last", c.swapped_vocab(), "-o", c.tmp / "avg"],
                ["swapped", "target vocabulary"])


@case("average-not-a-checkpoint")
def _(c: Ctx) -> Call:
    c.file("notes/readme.txt", "not a model\n")
    return Call(["average", c.run / "checkpoints" / "last", c.tmp / "notes", "-o", c.tmp / "avg"],
                ["notes", "not a heed model directory"])


@case("average-output-is-a-foreign-directory")
def _(c: Ctx) -> Call:
    keep = c.file("mine/keep.txt", "mine\n").parent
    ckpts = c.run / "checkpoints"
    return Call(["average", ckpts / "last", ckpts / "best", "-o", keep], ["mine", "not a model directory"],
                keep=[keep, keep / "keep.txt"])


# ------------------------------------------------------------------------------------- evaluate


@case("evaluate-ref-missing")
def _(c: Ctx) -> Call:
    return Call(["evaluate", c.run, "--src", c.corpus["test_src"], "--ref", c.tmp / "ref.txt"], ["ref.txt"])


@case("evaluate-lengths-differ")
def _(c: Ctx) -> Call:
    ref = c.file("short.ref", "2001-05-01\n")
    return Call(["evaluate", c.run, "--src", c.corpus["test_src"], "--ref", ref], ["short.ref"])


@case("evaluate-plot-suffix")
def _(c: Ctx) -> Call:
    return Call(["evaluate", c.run, "--src", c.corpus["test_src"], "--ref", c.corpus["test_ref"],
                 "--plot", c.tmp / "plot.bmp"], ["plot.bmp"])


@case("evaluate-buckets-malformed")
def _(c: Ctx) -> Call:
    return Call(["evaluate", c.run, "--src", c.corpus["test_src"], "--ref", c.corpus["test_ref"],
                 "--buckets", "1-x"], ["--buckets"])


@case("evaluate-hyps-dev-full")
def _(c: Ctx) -> Call:
    full = c.full_device()
    return Call(["evaluate", c.run, "--src", c.corpus["test_src"], "--ref", c.corpus["test_ref"],
                 "--hyps", full], [str(full)], keep=[full])


@case("evaluate-hyps-keeps-the-old-file-on-error")
def _(c: Ctx) -> Call:
    hyps = c.file("hyps.txt", "old\n")
    ref = c.file("short.ref", "2001-05-01\n")
    return Call(["evaluate", c.run, "--src", c.corpus["test_src"], "--ref", ref, "--hyps", hyps], ["short.ref"],
                keep=[hyps])


# ------------------------------------------------------------------------- attention, align, compare


@case("attention-figure-suffix")
def _(c: Ctx) -> Call:
    return Call(["attention", c.run, "1 May 2001", "-o", c.tmp / "fig.bmp"], ["fig.bmp"])


@case("attention-sentence-too-long")
def _(c: Ctx) -> Call:
    # A model trained on long inputs (max_src_len 5000): the input is not cut to a readable size.
    model = c.model()
    config = yaml.safe_load((model / "config.yaml").read_text(encoding="utf-8"))
    config["data"]["max_src_len"] = 5000
    (model / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    out = c.file("fig.png", b"old figure")
    return Call(["attention", rehash_model_files(model), "1 May 2001 " * 400, "-o", out], ["tokens", "200"], keep=[out])


@case("attention-a-head-the-model-lacks")
def _(c: Ctx) -> Call:
    out = c.file("fig.png", b"old figure")
    return Call(["attention", c.run, "1 May 2001", "--head", "9", "-o", out], ["--head 9 does not exist"], keep=[out])


@case("attention-grid-of-two-sentences")
def _(c: Ctx) -> Call:
    out = c.file("fig.png", b"old figure")
    return Call(["attention", c.run, "1 May 2001", "2 May 2001", "--grid", "-o", out],
                ["--grid", "one sentence", "got 2"], keep=[out])


@case("attention-output-is-a-directory")
def _(c: Ctx) -> Call:
    out = c.tmp / "fig.png"
    out.mkdir()
    return Call(["attention", c.run, "1 May 2001", "-o", out], ["fig.png"], keep=[out])


@case("align-gold-line-count")
def _(c: Ctx) -> Call:
    gold = c.file("gold.align", "0-0\n")
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--gold", gold],
                ["gold.align"])


@case("align-gold-link-outside")
def _(c: Ctx) -> Call:
    n = len(c.corpus["test_src"].read_text(encoding="utf-8").splitlines())
    gold = c.file("gold.align", "0-99\n" + "0-0\n" * (n - 1))
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--gold", gold],
                ["gold.align:1"])


@case("align-layer-missing")
def _(c: Ctx) -> Call:
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--layer", "3"],
                ["--layer 3 does not exist"])


@case("align-head-missing")
def _(c: Ctx) -> Call:
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--head", "2"],
                ["--head 2 does not exist"])


@case("align-head-not-a-number")
def _(c: Ctx) -> Call:
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--head", "top"],
                ["--head must be a 0-based index", "got 'top'"])


@case("align-alignment-layer-missing")
def _(c: Ctx) -> Call:
    out = c.file("hyp.align", "old\n")
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--weights",
                 "alignment-layer", "-o", out], ["has no alignment layer", "model.alignment_layer: true"], keep=[out])


@case("explain-alignment-layer-missing")
def _(c: Ctx) -> Call:
    return Call(["explain", "alignment_layer", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"]],
                ["the reading 'alignment_layer' needs an AlignmentLayerModel"])


@case("align-gold-chars-outside")
def _(c: Ctx) -> Call:
    n = len(c.corpus["test_src"].read_text(encoding="utf-8").splitlines())
    gold = c.file("gold.align", "0-10\n" + "0-0\n" * (n - 1))  # an ISO date has characters 0..9
    out = c.file("hyp.align", "old\n")
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--tgt-units", "chars",
                 "--gold", gold, "-o", out], ["gold.align:1", "10 target characters"], keep=[out])


@case("align-reference-line-count")
def _(c: Ctx) -> Call:
    n = len(c.corpus["test_src"].read_text(encoding="utf-8").splitlines())
    gold = c.file("gold.align", "0-0\n" * n)
    reference = c.file("fast_align.out", "0-0\n")
    out = c.file("hyp.align", "old\n")
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--gold", gold,
                 "--reference", reference, "-o", out], ["fast_align.out", "1 alignment lines"], keep=[out])


@case("align-sweep-without-gold")
def _(c: Ctx) -> Call:
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--sweep"],
                ["--sweep", "--gold"])


@case("config-dev-align-link-outside")
def _(c: Ctx) -> Call:
    n = len(c.corpus["dev"].read_text(encoding="utf-8").splitlines())
    gold = c.file("dev.align", "0-0\n" * (n - 1) + "0-5\n")

    def edit(data: dict) -> None:
        data["data"]["dev"] = {"tsv": str(c.corpus["dev"]), "align": str(gold)}

    return Call(["train", c.yaml_config(edit=edit)], [f"dev.align:{n}", "link 0-5 is outside the sentence pair"])


@case("config-test-align")
def _(c: Ctx) -> Call:
    def edit(data: dict) -> None:
        data["data"]["test"] = {"tsv": str(c.corpus["test"]), "align": str(c.corpus["test"])}

    return Call(["train", c.yaml_config(edit=edit)], ["test.align", "dev corpus only"])


@case("align-output-dev-full")
def _(c: Ctx) -> Call:
    full = c.full_device()
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "-o", full],
                [str(full)], keep=[full])


@case("compare-names-count")
def _(c: Ctx) -> Call:
    return Call(["compare", c.run, c.run, "--src", c.corpus["test_src"], "--ref", c.corpus["test_ref"],
                 "--names", "a"], ["--names"])


@case("demo-into-a-foreign-directory")
def _(c: Ctx) -> Call:
    other = c.tmp / "mine"
    other.mkdir()
    notes = c.file("mine/notes.txt", "keep me\n")
    return Call(["demo", "--output-dir", other, "--quick"], ["mine"], keep=[notes])


# --------------------------------------------------------------------------- prepared corpora


@case("prepare-corpus-missing")
def _(c: Ctx) -> Call:
    return Call(["prepare", c.corpus_config(tsv=c.tmp / "none.tsv"), "-o", c.tmp / "p"], ["none.tsv"])


@case("prepare-corpus-fifo-without-writer")
def _(c: Ctx) -> Call:
    return Call(["prepare", c.corpus_config(tsv=c.fifo("pairs.tsv")), "-o", c.tmp / "p"], ["pairs.tsv"])


@case("prepare-corpus-dev-zero")
def _(c: Ctx) -> Call:
    return Call(["prepare", c.corpus_config(tsv="/dev/zero"), "-o", c.tmp / "p"], ["/dev/zero"])


@case("prepare-corpus-invalid-utf8")
def _(c: Ctx) -> Call:
    bad = c.file("bad.tsv", b"a\tb\n\xc3\x28\tx\n")
    return Call(["prepare", c.corpus_config(tsv=bad), "-o", c.tmp / "p"], ["bad.tsv:2", "UTF-8"])


@case("prepare-into-a-non-empty-directory")
def _(c: Ctx) -> Call:
    notes = c.file("mine/notes.txt", "keep me\n")
    return Call(["prepare", c.yaml_config(), "-o", c.tmp / "mine"], ["mine", "not empty"], keep=[notes, c.tmp / "mine"])


@case("prepare-a-generated-task")
def _(c: Ctx) -> Call:
    def edit(d: dict) -> None:
        d["data"] = {"task": "dates"}

    return Call(["prepare", c.yaml_config("task.yaml", edit), "-o", c.tmp / "p"], ["data.task"])


@case("prepare-with-split")
def _(c: Ctx) -> Call:
    def edit(d: dict) -> None:
        d["data"].pop("dev")
        d["data"].pop("test")
        d["data"]["split"] = {"dev": 5, "test": 5}

    return Call(["prepare", c.yaml_config("split.yaml", edit), "-o", c.tmp / "p"], ["data.split"])


@case("prepare-verify-with-a-config")
def _(c: Ctx) -> Call:
    return Call(["prepare", c.yaml_config(), "--verify", c.prepared()], ["--verify"])


@case("prepare-verify-flipped-byte")
def _(c: Ctx) -> Call:
    directory = c.prepared()
    shard = directory / "shard-00001.tgt.npy"
    data = bytearray(shard.read_bytes())
    data[-2] ^= 0x10
    shard.write_bytes(bytes(data))
    return Call(["prepare", "--verify", directory], [str(shard), "sha256"], keep=[shard])


@case("prepared-and-train-corpus")
def _(c: Ctx) -> Call:
    return Call(["train", c.yaml_config(edit=lambda d: d["data"].update(prepared=str(c.tmp)))],
                ["data", "prepared", "train"])


@case("prepared-with-copy-attention")
def _(c: Ctx) -> Call:
    def edit(data: dict) -> None:
        data["data"].pop("train")
        data["data"]["prepared"] = str(c.tmp)
        data.setdefault("model", {})["copy"] = True

    return Call(["train", c.yaml_config("copy.yaml", edit)], ["model.copy", "prepared corpus"])


@case("prepared-not-a-directory")
def _(c: Ctx) -> Call:
    return Call(["train", c.prepared_config(c.tmp / "nowhere")], ["nowhere", "no such directory"])


@case("prepared-manifest-missing")
def _(c: Ctx) -> Call:
    (c.tmp / "empty").mkdir()
    return Call(["train", c.prepared_config(c.tmp / "empty")], ["manifest.json", "missing"])


@case("prepared-shard-truncated")
def _(c: Ctx) -> Call:
    directory = c.prepared()
    shard = directory / "shard-00002.src.npy"
    shard.write_bytes(shard.read_bytes()[:-7])
    return Call(["train", c.prepared_config(directory)], [str(shard), "truncated"], keep=[shard])


@case("prepared-shard-flipped-byte")
def _(c: Ctx) -> Call:
    directory = c.prepared()
    shard = directory / "shard-00000.src.npy"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01
    shard.write_bytes(bytes(data))
    return Call(["train", c.prepared_config(directory)], [str(shard), "sha256"], keep=[shard])


@case("prepared-shard-missing")
def _(c: Ctx) -> Call:
    directory = c.prepared()
    (directory / "shard-00001.offsets.npy").unlink()
    return Call(["train", c.prepared_config(directory)], ["shard-00001.offsets.npy", "missing"])


@case("prepared-manifest-mismatch")
def _(c: Ctx) -> Call:
    import json

    directory = c.prepared()
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["shards"][0]["src_tokens"] += 5
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return Call(["train", c.prepared_config(directory)], [str(directory / "shard-00000.src.npy"), "manifest"])


@case("prepared-manifest-not-json")
def _(c: Ctx) -> Call:
    directory = c.prepared()
    (directory / "manifest.json").write_text("{ not json")
    return Call(["train", c.prepared_config(directory)], ["manifest.json"])


@case("prepared-shard-ids-beyond-the-vocabulary")
def _(c: Ctx) -> Call:
    import numpy as np

    from heed.data.prepared import MANIFEST_FILE, read_manifest
    from heed.plumbing.files import file_digest

    directory = c.prepared()
    shard = directory / "shard-00000.tgt.npy"
    ids = np.load(shard)
    ids[0] = np.iinfo(ids.dtype).max  # an id no vocabulary of this corpus has, in a consistent manifest
    np.save(shard, ids)
    manifest = read_manifest(directory)
    entry = manifest["shards"][0]["files"]["tgt"]
    entry["bytes"], entry["sha256"] = file_digest(shard)
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")
    return Call(["train", c.prepared_config(directory)], [str(shard), "vocabulary"])


@case("prepared-verify-ids-beyond-the-vocabulary")
def _(c: Ctx) -> Call:
    CASES["prepared-shard-ids-beyond-the-vocabulary"](c)  # breaks c.tmp / "prepared" the same way
    return Call(["prepare", "--verify", c.tmp / "prepared"], ["shard-00000.tgt.npy", "vocabulary"])


@case("prepared-shard-outside-the-directory")
def _(c: Ctx) -> Call:
    directory = c.prepared()
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["shards"][0]["files"]["src"]["file"] = "../outside.npy"
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return Call(["train", c.prepared_config(directory)], ["manifest.json", "../outside.npy", "plain file name"])


@case("prepared-shard-absolute-path")
def _(c: Ctx) -> Call:
    directory = c.prepared()
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["shards"][0]["files"]["src"]["file"] = str(directory / "shard-00000.src.npy")
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return Call(["train", c.prepared_config(directory)], ["manifest.json", "plain file name"])


# ------------------------------------------------------------------------------------- exports


def _swap_graphs(manifest: dict, out: Path) -> None:
    encoder, step = (out / "encoder.onnx").read_bytes(), (out / "decoder_step.onnx").read_bytes()
    (out / "encoder.onnx").write_bytes(step)
    (out / "decoder_step.onnx").write_bytes(encoder)


@case("export-graphs-swapped")
def _(c: Ctx) -> Call:
    return Call(["translate", c.exported(_swap_graphs)], ["encoder.onnx", "swapped"], stdin="x\n")


@case("export-eos-out-of-range")
def _(c: Ctx) -> Call:
    return Call(["translate", c.exported(lambda m, _: m["special_ids"].update(eos=99))],
                ["manifest.json", "special_ids.eos", "99"], stdin="x\n")


@case("export-eos-not-a-number")
def _(c: Ctx) -> Call:
    return Call(["translate", c.exported(lambda m, _: m["special_ids"].update(eos="two"))],
                ["manifest.json", "special_ids.eos"], stdin="x\n")


@case("export-a-file-left-out-of-the-manifest")
def _(c: Ctx) -> Call:
    def leave_out(manifest: dict, out: Path) -> None:
        manifest["files"].pop("tgt.vocab.json")
        (out / "tgt.vocab.json").write_text('["<pad>", "<s>", "</s>", "<unk>", "tampered"]', encoding="utf-8")

    return Call(["translate", c.exported(leave_out)], ["manifest.json", "tgt.vocab.json"], stdin="x\n")


@case("export-model-config-broken")
def _(c: Ctx) -> Call:
    return Call(["translate", c.exported(lambda m, _: m["model"].update(hidden_size="wide"))],
                ["manifest.json", "model.hidden_size"], stdin="x\n")


@case("export-kind-changed-to-ctranslate2")
def _(c: Ctx) -> Call:
    return Call(["translate", c.exported(lambda m, _: m.update(kind="ctranslate2"))],
                ["manifest.json", "model.bin"], stdin="x\n")


@case("export-ctranslate2-model-file-corrupt")
def _(c: Ctx) -> Call:
    def corrupt(manifest: dict, out: Path) -> None:
        (out / "model.bin").write_bytes(b"not a CTranslate2 model")

    return Call(["translate", c.exported(corrupt, kind="ctranslate2")], ["exp", "CTranslate2 cannot load"],
                stdin="x\n")


# ------------------------------------------------------------------- attribution, faithfulness


@case("attribute-empty-source-line")
def _(c: Ctx) -> Call:
    out = c.file("attr.json", "earlier\n")
    return Call(["attribute", c.run, "--src", c.file("src.txt", "3 mars 1998\n \n"), "-o", out],
                ["src.txt", "line 2 is empty"], keep=[out])


@case("attribute-contrast-the-vocabulary-cannot-spell")
def _(c: Ctx) -> Call:
    out = c.file("attr.json", "earlier\n")
    return Call(["attribute", c.run, "--src", c.file("one.txt", "3 mars 1998\n"), "-o", out,
                 "--contrast", "1998-ж3-03"], ["the other output of line 1", "'ж' is not a token"], keep=[out])


@case("attribute-contrast-for-several-sources")
def _(c: Ctx) -> Call:
    out = c.file("attr.json", "earlier\n")
    return Call(["attribute", c.run, "--src", c.corpus["test_src"], "-o", out, "--contrast", "1998-03-03"],
                ["--contrast gives one other output", "--contrast-file"], keep=[out])


@case("attribute-contrast-file-line-count")
def _(c: Ctx) -> Call:
    out = c.file("attr.json", "earlier\n")
    others = c.file("others.txt", "1998-03-03\n")
    return Call(["attribute", c.run, "--src", c.file("two.txt", "3 mars 1998\nle 12 juin 2004\n"), "-o", out,
                 "--contrast-file", others], ["others.txt", "1 lines", "2"], keep=[out])


@case("attribute-contrast-empty")
def _(c: Ctx) -> Call:
    out = c.file("attr.json", "earlier\n")
    return Call(["attribute", c.run, "--src", c.file("one.txt", "3 mars 1998\n"), "-o", out, "--contrast", " "],
                ["--contrast is empty"], keep=[out])


@case("lens-of-an-rnn")
def _(c: Ctx) -> Call:
    out = c.file("lens.json", "earlier\n")
    return Call(["lens", c.run, "--src", c.corpus["test_src"], "-o", out], ["logit_lens", "Transformer"], keep=[out])


@case("translate-explain-source-share-of-an-rnn")
def _(c: Ctx) -> Call:
    out = c.file("out.txt", "earlier\n")
    return Call(["translate", c.run, "--explain", "source-share", "-o", out], ["--explain source-share",
                                                                              "Transformer"], stdin="x\n", keep=[out])


@case("align-alti-with-a-head")
def _(c: Ctx) -> Call:
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--weights", "alti",
                 "--head", "0"], ["ALTI+ mixes every head", "choose a layer, not a head"])


@case("attribute-figure-format")
def _(c: Ctx) -> Call:
    out = c.file("attr.json", "earlier\n")
    return Call(["attribute", c.run, "--src", c.corpus["test_src"], "-o", out, "--plot", c.tmp / "attr.bmp"],
                ["attr.bmp"], keep=[out])


@case("attribute-steps-past-the-maximum")
def _(c: Ctx) -> Call:
    out = c.file("attr.json", "earlier\n")
    return Call(["attribute", c.run, "--src", c.corpus["test_src"], "-o", out, "--steps", "100000"],
                ["--steps", "200"], keep=[out])


@case("attribute-an-export")
def _(c: Ctx) -> Call:
    out = c.file("attr.json", "earlier\n")
    return Call(["attribute", c.exported(), "--src", c.corpus["test_src"], "-o", out],
                ["the reading 'attribution' needs", "not an ensemble or an exported model"], keep=[out])


@case("faithfulness-ref-line-count")
def _(c: Ctx) -> Call:
    out = c.file("faith.json", "earlier\n")
    return Call(["faithfulness", c.run, "--src", c.corpus["test_src"], "--ref", c.file("ref.txt", "1998-03-03\n"),
                 "-o", out], ["ref.txt"], keep=[out])


@case("faithfulness-an-export")
def _(c: Ctx) -> Call:
    out = c.file("faith.json", "earlier\n")
    return Call(["faithfulness", c.exported(), "--src", c.corpus["test_src"], "--ref", c.corpus["test_ref"],
                 "-o", out], ["exported model"], keep=[out])


@case("attention-checkpoints-none-kept")
def _(c: Ctx) -> Call:
    out = c.file("over.png", "earlier\n")
    return Call(["attention", c.run, "1 May 2001", "--checkpoints", "-o", out],
                ["checkpoints/step-NNNNNNN", "train.keep_checkpoints"], keep=[out])


@case("attention-entropy-with-sentences")
def _(c: Ctx) -> Call:
    out = c.file("entropy.png", "earlier\n")
    return Call(["attention", c.run, "1 May 2001", "--entropy", "-o", out], ["leave out the sentences"], keep=[out])


@case("align-beside-missing-model")
def _(c: Ctx) -> Call:
    out = c.file("hyp.align", "old\n")
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--beside",
                 c.tmp / "no-such-model", "-o", out], ["no-such-model"], keep=[out])


# ---------------------------------------------------------------------------------- NumPy engine


@case("scratch-negative-hidden")
def _(c: Ctx) -> Call:
    return Call(["--hidden", "-5"], ["--hidden"], env={}, module="heed.scratch")


@case("scratch-zero-epochs")
def _(c: Ctx) -> Call:
    return Call(["--epochs", "0"], ["--epochs"], env={}, module="heed.scratch")


@case("scratch-unknown-language")
def _(c: Ctx) -> Call:
    return Call(["--languages", "en,xx"], ["languages", "xx"], env={}, module="heed.scratch")


# ----------------------------------------------------------------------------------- the runner


def snapshot(path: Path) -> tuple:
    """What must not change: the kind of node, a link's target, a regular file's bytes."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISREG(info.st_mode):
        return ("file", path.read_bytes())
    if stat.S_ISDIR(info.st_mode):
        return ("dir", sorted(p.name for p in path.iterdir()))
    return ("node", stat.S_IFMT(info.st_mode), info.st_rdev)


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_in_subprocess(call: Call) -> Outcome:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "80", **(call.env or {})}
    kwargs: dict[str, Any] = {"stdin": subprocess.DEVNULL} if call.stdin is None else {"input": call.stdin}
    if call.close_stdin:
        kwargs = {"stdin": subprocess.DEVNULL, "preexec_fn": lambda: os.close(0)}
    done = subprocess.run([sys.executable, "-m", call.module, *map(str, call.argv)], capture_output=True, text=True,
                          env=env, timeout=TIME_LIMIT, **kwargs)
    return Outcome(done.returncode, done.stdout, done.stderr)


def run_in_process(call: Call) -> Outcome:
    def too_long(signum: int, frame: Any) -> None:
        raise TimeoutError(f"no answer in {TIME_LIMIT} s: a hang")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(TIME_LIMIT)
    try:
        result = CliRunner().invoke(app, [str(a) for a in call.argv], input=call.stdin)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        trace = "".join(traceback.format_exception(result.exception))
        return Outcome(1, result.stdout, f"{result.stderr}\nTraceback (escaped to the runner):\n{trace}")
    return Outcome(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def ctx(tmp_path: Path, tiny_corpus, tiny_config, trained_run) -> Iterator[Ctx]:
    yield Ctx(tmp_path, tiny_corpus, tiny_config, trained_run)
    while _HELD:
        _HELD.pop().close()


def test_there_are_at_least_sixty_cases():
    assert len(CASES) >= 60, len(CASES)


READING = re.compile(r"reading data\.(train|dev|test) \(.+\): [\d,]+ pairs")


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_gets_one_clear_line_and_harms_nothing(name: str, ctx: Ctx) -> None:
    call = CASES[name](ctx)
    before = {path: snapshot(path) for path in call.keep}
    outcome = run_in_subprocess(call) if call.env is not None else run_in_process(call)
    assert "Traceback" not in outcome.stdout + outcome.stderr, outcome.stderr
    assert outcome.code == 2, (outcome.code, outcome.stderr)
    # a read that takes long says how far it is before the error (heed.data.codec.READ_REPORT_SECONDS)
    lines = [line for line in outcome.stderr.splitlines() if line.strip() and not READING.fullmatch(line)]
    if lines and lines[0].lower().startswith("usage:"):
        # An option's range or type, checked by click or argparse: their usual usage + error lines.
        message = lines[-1]
        assert "error" in message.lower(), outcome.stderr
    else:
        assert len(lines) == 1 and lines[0].startswith("error:"), outcome.stderr
        message = lines[0]
    for fragment in call.expect:
        assert fragment in message, (fragment, message)
    for path, was in before.items():
        assert snapshot(path) == was, f"{path} changed"


# =============================================================================================
# Issue 56 (the command line's findings): given targets named by file and line, the progress
# interval. Cases registered here are run by the test just below (the table's own test above
# collects the cases defined before it).
# =============================================================================================
ISSUE_56_CASES: list[str] = []


def issue_56_case(name: str) -> Callable[[Callable[[Ctx], Call]], Callable[[Ctx], Call]]:
    ISSUE_56_CASES.append(name)
    return case(name)


@issue_56_case("lens-tgt-token-the-vocabulary-lacks")
def _(c: Ctx) -> Call:
    from heed.nn.model_config import ModelConfig

    model = c.random_model("transformer", ModelConfig(family="transformer", d_model=16, heads=2, layers=1, ff_size=16))
    src = c.file("two.src", "le 3 mars 1998\n1 May 2001\n")
    tgt = c.file("two.tgt", "1998-03-03\n2001 05 01\n")  # a space: never in the dates targets
    return Call(["lens", model, "--src", src, "--tgt", tgt], [f"{tgt}: line 2:", "is not a token"])


@issue_56_case("attribute-tgt-token-the-vocabulary-lacks-on-line-2")
def _(c: Ctx) -> Call:
    out = c.file("attr.json", "earlier\n")
    src = c.file("two.src", "le 3 mars 1998\n1 May 2001\n")
    tgt = c.file("two.tgt", "1998-03-03\n2001-ж5-01\n")
    return Call(["attribute", c.run, "--src", src, "--tgt", tgt, "--steps", "1", "-o", out],
                [f"{tgt}: line 2:", "'ж' is not a token"], keep=[out])


@issue_56_case("progress-interval-not-a-number")
def _(c: Ctx) -> Call:
    src = c.file("one.src", "le 3 mars 1998\n")
    out = c.file("kept.txt", "an earlier output\n")
    return Call(["translate", c.run, "-i", src, "-o", out, "--progress"], ["HEED_PROGRESS_SECONDS", "above 0"],
                keep=[out], env={"HEED_PROGRESS_SECONDS": "soon"})


@pytest.mark.parametrize("name", ISSUE_56_CASES)
def test_issue_56_bad_input_gets_one_clear_line_and_harms_nothing(name: str, ctx: Ctx) -> None:
    test_bad_input_gets_one_clear_line_and_harms_nothing(name, ctx)


# =====================================================================================================
# Hostile pretrained models and Pharaoh files: `heed import DIR` (a Hugging Face directory, a Marian
# release) and the alignment readers, attacked. Each case: one line, exit 2, nothing written. The
# cases that once cost gigabytes run in a subprocess under a memory cap (test_a_hostile_file_costs_
# little_memory), the rest through the runner above (test_hostile_pretrained_input_gets_one_clear_line).

HOSTILE: list[str] = []
BOMB_ALIASES = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))  # 9^9 nodes expanded


def hostile(name: str) -> Callable[[Callable[[Ctx], Call]], Callable[[Ctx], Call]]:
    """`case`, and listed for test_hostile_pretrained_input_gets_one_clear_line (CASES is read by the
    runner's parametrize before this part of the file runs)."""
    HOSTILE.append(name)
    return case(name)


def _import(source: Path, c: Ctx, *fragments: str) -> Call:
    out = c.empty_dir("imported")
    return Call(["import", source, "-o", out], list(fragments), keep=[out])


def _npz_members(path: Path) -> dict[str, bytes]:
    import zipfile

    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def _write_npz(path: Path, members: dict[str, bytes], extra: Callable[[Any], None] | None = None) -> None:
    """A .npz of raw .npy `members`; `extra(zipfile)` adds more."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name, data in members.items():
            z.writestr(name, data)
        if extra is not None:
            extra(z)


def _npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def _set_options(release: Path, text: str) -> None:
    """The release's "special:model.yml" replaced by `text`."""
    import io

    import numpy as np

    members = _npz_members(release / "model.npz")
    buffer = io.BytesIO()
    np.save(buffer, np.frombuffer(text.encode() + b"\0", dtype=np.int8))
    members["special:model.yml.npy"] = buffer.getvalue()
    _write_npz(release / "model.npz", members)


def _m2m(c: Ctx, name: str = "m2m") -> Path:
    """A tiny random Hugging Face M2M-100 directory (skipped without transformers)."""
    from pretrained_models import make_m2m100

    pytest.importorskip("transformers", reason="transformers (heed-nmt[dev]) is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_m2m100(c.tmp / name)


def _edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data = edit(data) or data
    path.write_text(json.dumps(data), encoding="utf-8")


def _foreign_spm(c: Ctx, path: Path) -> None:
    """`path` overwritten by a SentencePiece model of made-up words, another model's tokenizer."""
    import random

    from pretrained_models import train_spm

    rng = random.Random(0)
    words = ["".join(rng.choice("qxzjkvw") for _ in range(rng.randint(3, 8))) for _ in range(400)]
    texts = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(2000)]
    train_spm(texts, path, 200)


# ------------------------------------------------------------------ tracebacks become one line


@hostile("import-a-pickle-as-pytorch-model-bin")
def _(c: Ctx) -> Call:
    import fractions
    import pickle

    source = c.marian()
    (source / "model.safetensors").unlink()
    (source / "pytorch_model.bin").write_bytes(pickle.dumps({"w": fractions.Fraction(1, 2)}))
    return _import(source, c, "pytorch_model.bin", "not a plain weights file", "will not unpickle")


@hostile("import-a-config-json-nested-100000-deep")
def _(c: Ctx) -> Call:
    source = c.marian()
    (source / "config.json").write_text('{"model_type": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    return _import(source, c, "config.json", "nested too deeply")


@hostile("import-a-config-json-with-a-5000-digit-number")
def _(c: Ctx) -> Call:
    source = c.marian()
    text = (source / "config.json").read_text(encoding="utf-8")
    (source / "config.json").write_text(text.replace('"d_model": 32', '"d_model": ' + "7" * 5000), encoding="utf-8")
    return _import(source, c, "config.json", "a number too long")


@hostile("import-a-config-json-whose-model-type-is-a-list")
def _(c: Ctx) -> Call:
    source = c.marian()
    _edit_json(source / "config.json", lambda config: config.update(model_type=["marian"],
                                                                    architectures=[1, "X" * 10_000]))
    return _import(source, c, "config.json", "model_type None", "is not an architecture heed converts")


@hostile("import-a-config-json-dropout-of-the-wrong-type")
def _(c: Ctx) -> Call:
    source = c.marian()
    _edit_json(source / "config.json", lambda config: config.update(dropout="high"))
    return _import(source, c, "config.json", "dropout is 'high'")


@hostile("import-a-decoder-yml-that-is-a-list")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    (source / "decoder.yml").write_text("- model.npz\n- vocab.yml\n", encoding="utf-8")
    return _import(source, c, "decoder.yml", "expected a mapping")


@hostile("import-a-decoder-yml-naming-a-list-as-the-model")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    (source / "decoder.yml").write_text("models: [[model.npz]]\nvocabs: [vocab.yml, vocab.yml]\n", encoding="utf-8")
    return _import(source, c, "decoder.yml", "names a file as a list")


@hostile("import-a-tokenizer-config-json-that-is-a-list")
def _(c: Ctx) -> Call:
    source = c.marian()
    (source / "tokenizer_config.json").write_text("[1, 2]", encoding="utf-8")
    return _import(source, c, "tokenizer_config.json", "expected a JSON object")


@hostile("import-an-m2m-tokenizer-config-with-a-list-of-language-codes")
def _(c: Ctx) -> Call:
    source = _m2m(c)
    _edit_json(source / "tokenizer_config.json", lambda settings: settings.update(language_codes=["fr", "en"]))
    return _import(source, c, "tokenizer_config.json", "language_codes a list of 2 items")


@hostile("import-an-npy-member-declaring-4-tib")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    members = _npz_members(source / "model.npz")
    members["encoder_l1_self_Wq.npy"] = _npy_header((1 << 20, 1 << 20)) + b"\0" * 64
    _write_npz(source / "model.npz", members)
    return _import(source, c, "model.npz", "encoder_l1_self_Wq is 1,048,576 x 1,048,576", "make it 32 x 32")


@hostile("import-an-empty-source-spm")
def _(c: Ctx) -> Call:
    source = c.marian()
    (source / "source.spm").write_bytes(b"")
    return _import(source, c, "source.spm", "not a SentencePiece model (it has no pieces)")


@hostile("import-a-release-with-an-empty-source-spm")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    (source / "source.spm").write_bytes(b"")
    return _import(source, c, "source.spm", "not a SentencePiece model (it has no pieces)")


@hostile("align-gold-with-a-5000-digit-position")
def _(c: Ctx) -> Call:
    n = len(c.corpus["test_src"].read_text(encoding="utf-8").splitlines())
    gold = c.file("gold.align", "0-" + "9" * 5000 + "\n" + "0-0\n" * (n - 1))
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--gold", gold],
                ["gold.align:1", "position of 5,000 digits"])


@hostile("align-reference-with-a-5000-digit-position")
def _(c: Ctx) -> Call:
    n = len(c.corpus["test_src"].read_text(encoding="utf-8").splitlines())
    reference = c.file("silver.align", "0-0\n" + "9" * 5000 + "?0\n" + "0-0\n" * (n - 2))
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"],
                 "--reference", reference], ["silver.align:2", "position of 5,000 digits"])


@hostile("guided-supervision-with-a-5000-digit-position")
def _(c: Ctx) -> Call:
    config, out = _guided(c, supervision=str(_links_file(c, "digits.align", 4, "1" * 5000 + "-0")))
    return Call(["train", config], ["digits.align:4", "position of 5,000 digits"], keep=[out])


@hostile("align-gold-line-longer-than-any-alignment")
def _(c: Ctx) -> Call:
    n = len(c.corpus["test_src"].read_text(encoding="utf-8").splitlines())
    gold = c.file("gold.align", "0-0 " * 300_000 + "\n" + "0-0\n" * (n - 1))
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--gold", gold],
                ["gold.align:1", "more than 1,048,576 characters"])


@hostile("align-gold-line-with-more-links-than-its-pair-has")
def _(c: Ctx) -> Call:
    n = len(c.corpus["test_src"].read_text(encoding="utf-8").splitlines())
    gold = c.file("gold.align", "0-0\n" + "0-0 " * 100_000 + "\n" + "0-0\n" * (n - 2))
    return Call(["align", c.run, "--src", c.corpus["test_src"], "--tgt", c.corpus["test_ref"], "--gold", gold],
                ["gold.align:2", "links, but the sentence pair has", "at most one link for each pair"])


# ------------------------------------------------------------------ unclear becomes clear


@hostile("import-all-nan-weights")
def _(c: Ctx) -> Call:
    from safetensors.torch import load_file, save_file

    source = c.marian()
    state = load_file(str(source / "model.safetensors"))
    state["model.encoder.layers.1.fc1.weight"].fill_(float("nan"))
    save_file(state, str(source / "model.safetensors"), metadata={"format": "pt"})
    return _import(source, c, "model.encoder.layers.1.fc1.weight", "NaN or infinite")


@hostile("import-an-infinite-weight-in-a-release")
def _(c: Ctx) -> Call:
    import io

    import numpy as np

    source = c.marian_release()
    members = _npz_members(source / "model.npz")
    array = np.load(io.BytesIO(members["decoder_l2_ffn_W2.npy"]))
    array[3, 4] = np.inf
    buffer = io.BytesIO()
    np.save(buffer, array)
    members["decoder_l2_ffn_W2.npy"] = buffer.getvalue()
    _write_npz(source / "model.npz", members)
    return _import(source, c, "model.npz", "decoder_l2_ffn_W2", "NaN or infinite")


@hostile("import-a-source-spm-of-another-model")
def _(c: Ctx) -> Call:
    source = c.marian()
    _foreign_spm(c, source / "source.spm")
    return _import(source, c, "source.spm", "pieces are not in vocab.json", "not this model's")


@hostile("import-a-release-with-a-target-spm-of-another-model")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    _foreign_spm(c, source / "target.spm")
    return _import(source, c, "target.spm", "pieces are not in vocab.yml", "not this model's")


@hostile("import-a-release-whose-decoder-yml-reaches-outside")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    outside = c.tmp / "elsewhere"
    outside.mkdir()
    shutil.move(source / "model.npz", outside / "model.npz")
    (source / "decoder.yml").write_text("models: [../elsewhere/model.npz]\nvocabs: [vocab.yml, vocab.yml]\n",
                                        encoding="utf-8")
    return _import(source, c, "decoder.yml", "'../elsewhere/model.npz' leads out of the release directory")


@hostile("import-a-release-whose-vocab-is-a-symlink-outside")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    foreign = c.file("private/notes.yml", "SECRET-FIRST-KEY: not an id\nmore: 2\n")
    (source / "vocab.yml").unlink()
    (source / "vocab.yml").symlink_to(foreign)
    return _import(source, c, "decoder.yml", "'vocab.yml' leads out of the release directory")


@hostile("import-a-release-without-decoder-yml-whose-npz-is-a-symlink-outside")
def _(c: Ctx) -> Call:
    source = c.marian_release()
    (source / "decoder.yml").unlink()
    shutil.move(source / "model.npz", c.tmp / "model.npz")
    (source / "model.npz").symlink_to(c.tmp / "model.npz")
    return _import(source, c, "model.npz", "leads out of the release directory")


@hostile("import-a-npy-file-as-the-npz")
def _(c: Ctx) -> Call:
    import numpy as np

    source = c.marian_release()
    with open(source / "model.npz", "wb") as f:
        np.save(f, np.zeros(4, dtype=np.float32))
    return _import(source, c, "model.npz", "a single .npy array, not a .npz archive")


@hostile("import-a-pickle-as-the-npz")
def _(c: Ctx) -> Call:
    import pickle

    source = c.marian_release()
    (source / "model.npz").write_bytes(pickle.dumps({"Wemb": [1.0]}))
    return _import(source, c, "model.npz", "a Python pickle, not a .npz archive")


def test_a_release_refused_for_a_foreign_file_shows_none_of_it(ctx: Ctx) -> None:
    call = CASES["import-a-release-whose-vocab-is-a-symlink-outside"](ctx)
    outcome = run_in_process(call)
    assert outcome.code == 2 and "SECRET" not in outcome.stdout + outcome.stderr, outcome.stderr


def test_a_bad_vocab_yml_entry_is_named_by_its_place_not_its_text(ctx: Ctx) -> None:
    source = ctx.marian_release()
    (source / "vocab.yml").write_text("</s>: 0\nSECRET-PIECE: many\n<unk>: 1\n", encoding="utf-8")
    outcome = run_in_process(_import(source, ctx, "vocab.yml", "entry 2's id"))
    assert outcome.code == 2 and "entry 2's id" in outcome.stderr and "SECRET" not in outcome.stderr, outcome.stderr


def test_a_bad_vocab_json_entry_is_named_by_its_place_not_its_text(ctx: Ctx) -> None:
    source = ctx.marian()
    _edit_json(source / "vocab.json", lambda vocab: {"SECRET-PIECE": "one", **vocab})
    outcome = run_in_process(_import(source, ctx, "vocab.json"))
    assert outcome.code == 2 and "entry 1's id" in outcome.stderr and "SECRET" not in outcome.stderr, outcome.stderr


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_pretrained_input_gets_one_clear_line(name: str, ctx: Ctx) -> None:
    test_bad_input_gets_one_clear_line_and_harms_nothing(name, ctx)


def test_eflomal_warns_of_the_pairs_it_leaves_unaligned_for_their_length() -> None:
    pytest.importorskip("eflomal", reason="eflomal (heed-nmt[align]) is not installed")
    from heed.data.corpus import Pair
    from heed.explain.external import EFLOMAL_MAX_WORDS, eflomal_links

    long_side = " ".join(["mot"] * (EFLOMAL_MAX_WORDS + 1))
    longest = " ".join(f"w{i % 50}" for i in range(EFLOMAL_MAX_WORDS))
    pairs = [Pair("le chat dort", "the cat sleeps"), Pair(long_side, "word"), Pair(longest, "w1 w2 w3"),
             Pair("oui", " ".join(["yes"] * (EFLOMAL_MAX_WORDS + 5)))]
    heard: list[str] = []
    links = eflomal_links(pairs, warn=heard.append)
    assert [bool(pair_links) for pair_links in links] == [True, False, True, False]  # what eflomal does
    assert len(heard) == 1 and "2 pairs (lines 2, 4)" in heard[0] and "more than 1,023 words" in heard[0], heard
    heard.clear()
    eflomal_links(pairs[:1] + pairs[2:3], warn=heard.append)
    assert heard == []


# ------------------------------------------------------------------ a few bytes that once cost gigabytes

MEMORY_CAP = 2 << 30  # address space for `heed import` (torch and all); each bomb once needed 2 to 8 GB
PEAK_RSS = 1 << 30  # what the refusal may cost at most; a valid tiny import peaks near a third of this


def _bomb_vocab_size(c: Ctx) -> Call:
    source = c.marian()
    _edit_json(source / "config.json", lambda config: config.update(vocab_size=10**9))
    return _import(source, c, "config.json", "vocab_size 1,000,000,000", "model.safetensors",
                   "not this checkpoint's")


def _bomb_m2m_vocab_size(c: Ctx) -> Call:
    source = _m2m(c)
    _edit_json(source / "config.json", lambda config: config.update(vocab_size=3 * 10**7))
    return _import(source, c, "config.json", "vocab_size 30,000,000", "not this checkpoint's")


def _bomb_options(c: Ctx) -> Call:
    source = c.marian_release()
    _set_options(source, BOMB_ALIASES + "type: *i\n")
    return _import(source, c, "model.npz", "special:model.yml", "anchors and aliases")


def _bomb_vocab_yml(c: Ctx) -> Call:
    source = c.marian_release()
    (source / "vocab.yml").write_text(BOMB_ALIASES, encoding="utf-8")
    return _import(source, c, "vocab.yml", "anchors and aliases")


def _bomb_unused_member(c: Ctx) -> Call:
    """A 1 GiB member of zeros, deflated to about a megabyte, that no model needs."""
    source = c.marian_release()
    members = _npz_members(source / "model.npz")

    def padding(z: Any) -> None:
        with z.open("unused.npy", "w", force_zip64=True) as f:
            f.write(_npy_header((1 << 28,)))
            chunk = bytes(1 << 22)
            for _ in range(1 << 8):
                f.write(chunk)

    _write_npz(source / "model.npz", members, padding)
    (source / "vocab.yml").write_text("</s>: 0\n<unk>: 1\n", encoding="utf-8")  # refused after the options
    return _import(source, c, "vocab.yml: 2 pieces")


BOMBS: dict[str, Callable[[Ctx], Call]] = {
    "config-vocab-size-a-billion": _bomb_vocab_size,
    "m2m-config-vocab-size-thirty-million": _bomb_m2m_vocab_size,
    "alias-bomb-in-special-model-yml": _bomb_options,
    "alias-bomb-in-vocab-yml": _bomb_vocab_yml,
    "npz-member-inflating-to-1-gib": _bomb_unused_member,
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_hostile_file_costs_little_memory(name: str, ctx: Ctx) -> None:
    import resource
    import time

    call = BOMBS[name](ctx)
    before = {path: snapshot(path) for path in call.keep}

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "80"}
    out, err = ctx.tmp / "bomb.stdout", ctx.tmp / "bomb.stderr"
    with open(out, "w") as stdout_file, open(err, "w") as stderr_file:
        process = subprocess.Popen([sys.executable, "-m", "heed", *map(str, call.argv)], stdin=subprocess.DEVNULL,
                                   stdout=stdout_file, stderr=stderr_file, env=env,
                                   # setrlimit must run in the child before exec: no other hook does that
                                   preexec_fn=cap)  # noqa: PLW1509
    deadline = time.monotonic() + TIME_LIMIT * 2
    pid, status, usage = os.wait4(process.pid, os.WNOHANG)
    while pid == 0 and time.monotonic() < deadline:  # reaped here, not by Popen: its own peak memory is in `usage`
        time.sleep(0.1)
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
    if pid == 0:
        process.kill()
        os.wait4(process.pid, 0)
        pytest.fail(f"no answer in {TIME_LIMIT * 2} s: a hang")
    process.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = out.read_text(), err.read_text()
    peak = usage.ru_maxrss * 1024  # bytes; Linux reports KiB
    assert "Traceback" not in stdout + stderr and "MemoryError" not in stderr, stderr
    assert process.returncode == 2, (process.returncode, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    for fragment in call.expect:
        assert fragment in lines[0], (fragment, lines[0])
    assert peak < PEAK_RSS, f"peak memory {peak / 2**20:.0f} MiB"
    for path, was in before.items():
        assert snapshot(path) == was, f"{path} changed"
