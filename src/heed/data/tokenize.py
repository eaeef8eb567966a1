"""Tokenizers: text <-> token strings. Ids are the Vocab's business (`heed.data.vocab`).

Five kinds, one interface:

- "char":    every character is a token; a space becomes "▁" so `detokenize` restores the text.
- "word":    whitespace split, joined back with single spaces.
- "bpe", "unigram": SentencePiece subwords, trained in memory on the training side.
- "sentencepiece": a pretrained model's own SentencePiece model, used as it came (`heed import`),
             with its normalisation; a leading language code `>>fr<<` (OPUS-MT's multilingual
             models) is a token of its own, as MarianTokenizer makes it.

Text is expected to be `heed.data.corpus.normalize`d already (single spaces, NFC); round trips are
exact for such text. A tokenizer is persisted as `to_spec()` (a small JSON-able dict the caller keeps,
e.g. in a checkpoint) plus, for SentencePiece, the model file `<name>.spm.model` that `save` writes.
`load_tokenizer` reads that file back; nothing is retrained and nothing is pickled.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import io
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import sentencepiece as spm

from heed.errors import HeedError, ModelDirError
from heed.plumbing.files import atomic_write_bytes, open_regular, reason

TokenizerKind = Literal["char", "word", "bpe", "unigram", "sentencepiece"]
TOKENIZER_KINDS: tuple[str, ...] = get_args(TokenizerKind)

SPACE = "▁"  # U+2581, SentencePiece's meta symbol for a space; the char tokenizer uses it too


class Tokenizer(ABC):
    """Turns a normalized sentence into a list of token strings and back."""

    kind: str

    @abstractmethod
    def tokenize(self, text: str) -> list[str]:
        """"a cat" -> e.g. ["a", "cat"]."""

    @abstractmethod
    def detokenize(self, tokens: list[str]) -> str:
        """Inverse of `tokenize` for normalized text."""

    def word_ids(self, tokens: list[str]) -> list[int | None]:
        """For each token, the 0-based index of the whitespace word of the text it belongs to, or
        None for a token that is only a word separator. The base case: one token per word."""
        return list(range(len(tokens)))

    @property
    def languages(self) -> Mapping[str, str]:
        """A many-language model's {language code: its token} (PretrainedPieces); none here."""
        return {}

    @property
    def frame(self) -> list[str]:
        """The tokens `tokenize` starts every text with (a language's token); none here."""
        return []

    def for_language(self, code: str | None) -> Tokenizer:
        """This tokenizer with texts in language `code` (PretrainedPieces); a HeedError for any
        code, since this tokenizer's model has no language tokens."""
        if code is not None:
            raise HeedError(f"language {code!r}: this model has no language tokens; it translates the one pair it "
                            "was trained on (an OPUS-MT model with several target languages takes >>xx<< at the "
                            "start of the source text instead)")
        return self

    def save(self, directory: Path, name: str) -> None:
        """Write whatever files `to_spec()` alone cannot describe (none for char/word)."""

    def to_spec(self) -> dict[str, Any]:
        """A JSON-able description; `load_tokenizer(directory, name, spec)` rebuilds the tokenizer."""
        return {"kind": self.kind}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_spec()})"


class CharTokenizer(Tokenizer):
    """Characters as tokens; " " is written "▁" so that spaces survive as visible tokens.

    A literal "▁" in the text would come back as a space: that character is not expected in text.
    """

    kind = "char"

    def tokenize(self, text: str) -> list[str]:
        return [SPACE if c == " " else c for c in text]

    def detokenize(self, tokens: list[str]) -> str:
        return "".join(tokens).replace(SPACE, " ")

    def word_ids(self, tokens: list[str]) -> list[int | None]:
        """"▁" tokens separate words and belong to none: ["a", "▁", "b", "c"] -> [0, None, 1, 1]."""
        ids: list[int | None] = []
        word, in_word = -1, False
        for token in tokens:
            if token == SPACE:
                ids.append(None)
                in_word = False
                continue
            if not in_word:
                word, in_word = word + 1, True
            ids.append(word)
        return ids


class WordTokenizer(Tokenizer):
    """Whitespace-separated words as tokens (punctuation stays attached: "Va !" -> ["Va", "!"])."""

    kind = "word"

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def detokenize(self, tokens: list[str]) -> str:
        return " ".join(tokens)


def spm_model_path(directory: Path, name: str) -> Path:
    """Where `SentencePieceTokenizer.save(directory, name)` writes its model."""
    return Path(directory) / f"{name}.spm.model"


class SentencePieceTokenizer(Tokenizer):
    """SentencePiece BPE or unigram subwords over a serialized model (bytes)."""

    def __init__(self, kind: Literal["bpe", "unigram"], model: bytes, *, vocab_size: int | None = None) -> None:
        if kind not in ("bpe", "unigram"):
            raise ValueError(f"SentencePiece kind must be 'bpe' or 'unigram', got {kind!r}")
        self.kind = kind
        self.model = model
        self._sp = spm.SentencePieceProcessor(model_proto=model)
        # As requested at training; the model may hold fewer pieces (soft limit).
        self.vocab_size = self._sp.get_piece_size() if vocab_size is None else vocab_size

    @classmethod
    def train(
        cls, kind: Literal["bpe", "unigram"], texts: Iterable[str], *, vocab_size: int
    ) -> SentencePieceTokenizer:
        """Train in memory. `vocab_size` is a soft limit (hard_vocab_limit=False), so a tiny
        corpus gives a smaller model instead of an error. One thread, so the same texts always give
        the same model bytes."""
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(texts),
                model_writer=model,
                model_type=kind,
                vocab_size=vocab_size,
                hard_vocab_limit=False,
                character_coverage=1.0,  # every training character gets a piece (dates, Hangul, ...)
                normalization_rule_name="identity",  # heed normalizes (NFC) before; keep text exact
                unk_id=0,
                bos_id=-1,  # sentence markers are the Vocab's job
                eos_id=-1,
                pad_id=-1,
                num_threads=1,
                minloglevel=2,
            )
        except RuntimeError as e:  # e.g. "Vocabulary size is smaller than required_chars. 5 vs 17."
            message = str(e).split("] ", 1)[-1]
            raise ValueError(f"cannot train a {kind} tokenizer with vocab_size={vocab_size}: {message}") from None
        return cls(kind, model.getvalue(), vocab_size=vocab_size)

    @classmethod
    def load(cls, directory: Path, name: str, spec: dict[str, Any]) -> SentencePieceTokenizer:
        path = spm_model_path(directory, name)
        model = read_spm_model(directory, name, spec)
        vocab_size = spec.get("vocab_size")
        try:
            return cls(spec["kind"], model, vocab_size=None if vocab_size is None else int(vocab_size))
        except (RuntimeError, TypeError, ValueError) as e:  # not a SentencePiece model, or a bad vocab_size
            raise ModelDirError(f"{path}: cannot load the SentencePiece model ({e})") from None

    def tokenize(self, text: str) -> list[str]:
        return self._sp.encode(text, out_type=str)

    def detokenize(self, tokens: list[str]) -> str:
        # SentencePiece writes a piece it does not know (one copied from the source by unknown-word
        # replacement, say "▁Zoltan") literally, "▁" and all, and strips the leading space only
        # of a known piece: turn the marks of unknown pieces into spaces, the first one into nothing.
        unk = self._sp.unk_id()
        pieces = [p.replace(SPACE, " ") if self._sp.piece_to_id(p) == unk else p for p in tokens]
        if pieces and pieces[0] != tokens[0]:
            pieces[0] = pieces[0].removeprefix(" ")
        return self._sp.decode_pieces(pieces)

    def word_ids(self, tokens: list[str]) -> list[int | None]:
        """A piece starting with "▁" starts a word, any other continues it:
        ["▁the", "▁c", "at", "▁", ","] -> [0, 1, 1, 2, 2]."""
        ids: list[int | None] = []
        word = -1
        for piece in tokens:
            if piece.startswith(SPACE) or word < 0:
                word += 1
            ids.append(word)
        return ids

    @property
    def num_pieces(self) -> int:
        """Pieces in the trained model, <unk> included."""
        return self._sp.get_piece_size()

    def save(self, directory: Path, name: str) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(spm_model_path(directory, name), self.model)

    def to_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "sha256": hashlib.sha256(self.model).hexdigest()}


def closest_languages(code: str, codes: Iterable[str], most: int = 3) -> list[str]:
    """The model's language codes a mistyped `code` most likely meant, best first: the same code in
    another case or separator (FR, fr-FR), the same language without or with a region or script
    (fr_FR -> fr; fr -> fra_Latn), then difflib's closest spellings. difflib alone offered nothing
    for fr_FR among two-letter codes, and the message fell back to the list's first (af, am, ar)."""
    codes = sorted(codes)

    def key(text: str) -> str:
        return text.lower().replace("-", "_")

    def base(text: str) -> str:
        return key(text).split("_")[0]

    same = [c for c in codes if key(c) == key(code)]
    if same:
        return same[:most]
    ranked = [c for c in codes if base(c) == base(code)]
    ranked += [c for c in codes if len(base(code)) >= 2 and (base(c).startswith(base(code))
                                                             or base(code).startswith(base(c)))]
    return list(dict.fromkeys(ranked or difflib.get_close_matches(key(code), codes, n=most, cutoff=0.5)))[:most]


class PretrainedPieces(SentencePieceTokenizer):
    """A pretrained model's SentencePiece model (OPUS-MT's source.spm or target.spm, M2M-100's and
    NLLB's sentencepiece.bpe.model), as it came: its own normalisation rules, no vocab_size of heed's.
    A leading language code (">>fr<<", in OPUS-MT's multi-target models) is split off as one token,
    as MarianTokenizer does.

    A many-language model (M2M-100, NLLB) also has `languages`, {code: its token} ("fr": "__fr__",
    "fra_Latn": "fra_Latn"), and reads every text after the token of its language: `for_language`
    gives the tokenizer of one, whose `tokenize` starts with that token (its `frame`). A language
    token is no part of the text: `detokenize` drops it and `word_ids` gives it no word."""

    def __init__(self, model: bytes, languages: dict[str, str] | None = None) -> None:
        self.kind = "sentencepiece"
        self.model = model
        self._sp = spm.SentencePieceProcessor(model_proto=model)
        self.vocab_size = self._sp.get_piece_size()
        if self.vocab_size == 0:  # SentencePiece takes an empty model without a word, and fails at the first text
            raise RuntimeError("an empty SentencePiece model: it has no pieces")
        self._languages = dict(languages or {})
        self.language: str | None = None
        self._language_tokens = frozenset(self._languages.values())

    @property
    def languages(self) -> Mapping[str, str]:
        return self._languages

    @classmethod
    def load(cls, directory: Path, name: str, spec: dict[str, Any]) -> PretrainedPieces:
        model = read_spm_model(directory, name, spec)
        languages = spec.get("languages", {})
        if not isinstance(languages, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in languages.items()):
            raise ModelDirError(f"{directory / 'tokenizers.json'}: '{name}' languages must map each language code to "
                                "its token")
        try:
            return cls(model, languages)
        except RuntimeError as e:
            raise ModelDirError(f"{spm_model_path(directory, name)}: cannot load the SentencePiece model ({e})") from None

    def text_pieces(self) -> list[str]:
        """The pieces a text can become: all but the control (<s>, </s>), unknown and unused ones."""
        sp = self._sp
        return [sp.id_to_piece(i) for i in range(self.vocab_size)
                if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))]

    def for_language(self, code: str | None) -> PretrainedPieces:
        """This tokenizer, its texts starting with language `code`'s token (None: no language token);
        a HeedError naming the code when the model has no such language, or none at all."""
        if code is not None and code not in self.languages:
            if not self.languages:
                return super().for_language(code)  # type: ignore[return-value]  # refused (raises): no language tokens
            close = closest_languages(code, self.languages)
            raise HeedError(f"language {code!r} is not one of this model's {len(self.languages)}"
                            + (f"; did you mean {', '.join(close)}?" if close else
                               f" ({', '.join(sorted(self.languages)[:8])}, ...)"))
        framed = copy.copy(self)
        framed.language = code
        return framed

    @property
    def frame(self) -> list[str]:
        """The tokens every text starts with: its language's token, or none."""
        if self.language is None:
            if self.languages:
                raise HeedError(f"this model translates between {len(self.languages)} languages; say which: "
                                "--src-lang and --tgt-lang (heed.load(..., src_lang=, tgt_lang=), or data.src_lang "
                                f"and data.tgt_lang in a config), e.g. {', '.join(sorted(self.languages)[:3])}")
            return []
        return [self.languages[self.language]]

    def tokenize(self, text: str) -> list[str]:
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:  # MarianTokenizer.remove_language_code
            code, text = [text[: end + 2]], text[end + 2:]
        return self.frame + code + self._sp.encode(text, out_type=str)

    def _is_language(self, token: str) -> bool:
        return token in self._language_tokens or (token.startswith(">>") and token.endswith("<<"))

    def detokenize(self, tokens: list[str]) -> str:
        return super().detokenize([t for t in tokens if not self._is_language(t)])

    def word_ids(self, tokens: list[str]) -> list[int | None]:
        """SentencePieceTokenizer's words, language tokens in none."""
        text = [t for t in tokens if not self._is_language(t)]
        words = iter(super().word_ids(text))
        return [None if self._is_language(t) else next(words) for t in tokens]

    def to_spec(self) -> dict[str, Any]:
        spec = {"kind": self.kind, "sha256": hashlib.sha256(self.model).hexdigest()}
        return {**spec, "languages": dict(self.languages)} if self.languages else spec


def read_spm_model(directory: Path, name: str, spec: dict[str, Any]) -> bytes:
    """The bytes of `<directory>/<name>.spm.model`, checked against the spec's sha256."""
    path = spm_model_path(directory, name)
    try:
        with open_regular(path) as f:
            model = f.read()
    except FileNotFoundError:
        raise ModelDirError(f"{path}: SentencePiece model missing ({spec['kind']} tokenizer '{name}')") from None
    except OSError as e:
        raise ModelDirError(f"{path}: cannot read: {reason(e)}") from None
    expected = spec.get("sha256")
    if expected is not None and hashlib.sha256(model).hexdigest() != expected:
        raise ModelDirError(f"{path}: SentencePiece model does not match the one this model was trained with")
    return model


def train_tokenizer(kind: TokenizerKind, texts: Iterable[str], *, vocab_size: int = 8000) -> Tokenizer:
    """A tokenizer of `kind`, trained on `texts` where training means something (bpe, unigram).

    `vocab_size` only matters for SentencePiece; char and word vocabularies are sized by
    `Vocab.build(min_freq=, max_size=)`.
    """
    if kind == "char":
        return CharTokenizer()
    if kind == "word":
        return WordTokenizer()
    if kind in ("bpe", "unigram"):
        return SentencePieceTokenizer.train(kind, texts, vocab_size=vocab_size)
    if kind == "sentencepiece":
        raise ValueError("kind 'sentencepiece' is a pretrained model's own tokenizer: it comes with the model "
                         "(heed import), it is not trained; choose char, word, bpe or unigram")
    raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(TOKENIZER_KINDS)}")


def load_tokenizer(directory: Path, name: str, spec: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from its `to_spec()` and, for SentencePiece, `<directory>/<name>.spm.model`."""
    kind = spec.get("kind")
    if kind == "char":
        return CharTokenizer()
    if kind == "word":
        return WordTokenizer()
    if kind in ("bpe", "unigram"):
        return SentencePieceTokenizer.load(Path(directory), name, spec)
    if kind == "sentencepiece":
        return PretrainedPieces.load(Path(directory), name, spec)
    raise ModelDirError(f"{directory}: unknown tokenizer kind {kind!r} for '{name}'; expected one of {', '.join(TOKENIZER_KINDS)}")
