"""Export a heed Transformer as an Argos Translate package (`heed export --format argos`), the
format LibreTranslate installs: a zip (`.argosmodel`) of one directory,

    translate-SRC_TGT/
      metadata.json         Argos's: from_code/to_code and names, package_version, argos_version
      model/                heed's CTranslate2 export's model files (heed.export.ct2), nothing else
      sentencepiece.model   the model's one SentencePiece model: Argos tokenizes the source and
                            detokenizes the target with the same one
      minisbd/heed.onnx     the sentence splitter (heed.export.argos_sbd: a rule in MiniSBD's format),
                            which Argos uses as it is (its default ARGOS_CHUNK_TYPE, or MINISBD, as
                            LibreTranslate's image sets it): nothing is downloaded
      README.md             where it came from

Argos (1.11) reads exactly one `sentencepiece.model` for both sides, so only a model trained with
`data.shared_vocab: true` and a SentencePiece tokenizer (bpe or unigram) can be packaged; an RNN, a
char or word tokenizer, or separate source and target tokenizers are refused in one line, nothing
written. The package is written to a temp file beside the output and moved into place whole.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from heed.errors import ConfigError, HeedError, install_hint

INSTALL_HINT = install_hint("argos")
SUFFIX = ".argosmodel"
SPM_FILE = "sentencepiece.model"
PACKAGE_VERSION = "1.0"
ARGOS_VERSION = "1.11"  # the package format written: metadata fields and directory layout of argostranslate 1.11
_CODE = "abcdefghijklmnopqrstuvwxyz"


def check_language_code(code: str | None, flag: str) -> str:
    """A package's language code: ISO 639 letters ("en", "fra"), as LibreTranslate lists them."""
    if not code:
        raise HeedError(f"an Argos package needs its languages: give {flag} (an ISO 639 code such as 'en')")
    if not (2 <= len(code) <= 3 and all(c in _CODE for c in code)):
        raise HeedError(f"{flag} {code!r}: give an ISO 639 code of 2 or 3 lowercase letters, such as 'en'")
    return code


def check_packable(loaded: Any, config_path: Path) -> bytes:
    """The SentencePiece model an Argos package of `loaded` (a heed.checkpoint model directory)
    carries, or a one-line ConfigError saying why Argos cannot hold the model."""
    from heed.data.tokenize import SentencePieceTokenizer
    from heed.export import ct2

    cfg = loaded.config
    ct2.check_exportable(cfg.model, config_path)  # Argos runs CTranslate2: Transformers only
    src, tgt = loaded.codec.src_tokenizer, loaded.codec.tgt_tokenizer
    for side, tokenizer in (("src", src), ("tgt", tgt)):
        if not isinstance(tokenizer, SentencePieceTokenizer):
            kind = tokenizer.to_spec().get("kind", type(tokenizer).__name__)
            raise ConfigError(f"Argos Translate tokenizes with one SentencePiece model; this model's {side} "
                              f"tokenizer is '{kind}' (train with a bpe or unigram tokenizer and "
                              "data.shared_vocab: true)", field=f"data.tokenizer.{side}", path=config_path)
    if src.model != tgt.model or list(loaded.codec.src_vocab.tokens) != list(loaded.codec.tgt_vocab.tokens):
        raise ConfigError("Argos Translate holds one SentencePiece model for both languages; this model has "
                          "separate source and target tokenizers (train with data.shared_vocab: true)",
                          field="data.shared_vocab", path=config_path)
    return bytes(src.model)


def _add_source_eos(config_json: Path) -> None:
    """heed's models read every source ending in EOS, which heed.export.ct2_run appends itself;
    Argos hands CTranslate2 the bare pieces, so the package's model asks CTranslate2 to append it."""
    config = json.loads(config_json.read_text(encoding="utf-8"))
    config["add_source_eos"] = True
    config_json.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def _language_name(code: str) -> str:
    """CLDR's English name of `code` ("fr" -> "French") where babel (the [serve] extra) knows it, else the code."""
    try:
        from babel import Locale, UnknownLocaleError
    except ImportError:
        return code
    try:
        return str(Locale.parse(code).get_display_name("en") or code)
    except (UnknownLocaleError, ValueError):  # a code CLDR lacks: the code itself is an honest name
        return code


def _metadata(src: str, tgt: str, loaded: Any) -> dict[str, Any]:
    import heed

    name = _language_name

    return {"package_version": PACKAGE_VERSION, "argos_version": ARGOS_VERSION, "from_code": src,
            "from_name": name(src), "to_code": tgt, "to_name": name(tgt), "type": "translate",
            "links": [], "heed_version": heed.__version__, "heed_model": loaded.config.model.model_dump(mode="json")}


def export_argos(model_dir: str | os.PathLike[str], out: str | os.PathLike[str], *, source_lang: str | None,
                 target_lang: str | None, int8: bool = False) -> Path:
    """`heed export --format argos`: write the Argos package of the model directory `model_dir` to
    the file `out` (".argosmodel" appended if missing). Returns the package's path."""
    import heed
    from heed.checkpoint import CONFIG_FILE, load_model_dir
    from heed.export import ct2
    from heed.export.argos_sbd import write_minisbd
    from heed.export.onnx import export_model, is_exported_dir

    src, tgt = check_language_code(source_lang, "--source-lang"), check_language_code(target_lang, "--target-lang")
    ct2.require_ctranslate2()
    if is_exported_dir(model_dir):
        raise HeedError(f"{model_dir}: already an exported directory; export the model directory it came from")
    target = Path(out)
    if target.suffix != SUFFIX:
        target = target.with_name(target.name + SUFFIX)
    if target.is_dir():
        raise HeedError(f"{target}: is a directory; give the package's file name (-o en_fr{SUFFIX})")
    loaded = load_model_dir(model_dir, device="cpu")
    spm_model = check_packable(loaded, loaded.directory / CONFIG_FILE)
    root = f"translate-{src}_{tgt}"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".heed-argos-", dir=target.parent) as work:
        package = Path(work) / root
        exported = export_model(model_dir, Path(work) / "ct2", int8=int8, kind="ctranslate2")
        (package / "model").mkdir(parents=True)
        listed = json.loads((exported / "manifest.json").read_text(encoding="utf-8"))["files"]
        for name in ct2.model_files(set(listed)):  # only CTranslate2's files: Argos loads model/ as is
            os.replace(exported / name, package / "model" / name)
        _add_source_eos(package / "model" / "config.json")
        (package / SPM_FILE).write_bytes(spm_model)
        write_minisbd(package / "minisbd")
        (package / "metadata.json").write_text(json.dumps(_metadata(src, tgt, loaded), indent=2) + "\n",
                                               encoding="utf-8")
        (package / "README.md").write_text(
            f"# {src} -> {tgt}\n\nA heed Transformer ({loaded.directory.name}), exported by `heed export "
            f"--format argos` with heed {heed.__version__}.\n", encoding="utf-8")
        fd, partial = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(package.rglob("*")):
                    archive.write(path, path.relative_to(work))
            os.chmod(partial, 0o644)
            os.replace(partial, target)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
    return target
