"""A Marian release as OPUS-MT publishes it (a zip of `*.npz` weights, `*.vocab.yml`, `source.spm`,
`target.spm` and `decoder.yml`) -> heed's Transformer, the same model transformers' own conversion
of the release gives (tests/pretrained/test_pretrained_marian_npz.py checks both, and CTranslate2's reading
of the same file).

The .npz holds the training options as YAML under "special:model.yml" and the weights under
Marian's names, every matrix (in, out):
- `Wemb` (one table: `tied-embeddings-all`), else `encoder_Wemb` and `decoder_Wemb`;
- per layer `{encoder,decoder}_l{i}_self_W{q,k,v,o}` / `_b*`, the decoder's `_context_*`, the
  feed-forward `_ffn_W1`, `_b1`, `_W2`, `_b2`, and each sublayer's norm `..._Wo_ln_{scale,bias}`
  (`_ffn_ffn_ln_*` for the feed-forward; with a `_pre` suffix in a pre-norm model, whose stacks end
  in `{encoder,decoder}_top_ln_*`);
- `decoder_ff_logit_out_b`, the logits' bias, and `decoder_ff_logit_out_Wt` unless the output
  shares the target table.
Marian starts decoding from a zero embedding. As transformers' conversion does, the vocabulary
gains `<pad>` as its last id with a zero row: decoding starts from it, and heed's ids stay
MarianTokenizer's. Unlike that conversion (which gives it a logit of 0, in every softmax), <pad>'s
logit bias is PAD_LOGIT_BIAS, so the probabilities are Marian's own. Positions are sinusoidal,
all sines then all cosines (`sinusoid_layout: halves`).
decoder.yml gives the beam size and `normalize` (log P / |Y|^normalize).

A release is read as untrusted: every file it names must lie inside its directory (no `../`, no
absolute path, no symlink out of it); its YAML (decoder.yml, the vocabularies, the options) is read
by heed.plumbing.yamlio without anchors or aliases; the .npz is opened as a zip and only the
members the model needs are read, each after its .npy header's shape is checked against the shape
the options and the vocabulary give it."""
from __future__ import annotations

import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import torch

from heed.data.codec import Codec
from heed.data.vocab import Specials, Vocab
from heed.errors import ModelDirError
from heed.nn.transformer.convert.common import Converted, Tensors, buildable, check_pieces, read_spm, shown
from heed.plumbing import yamlio
from heed.plumbing.files import open_regular, reason

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

ARCHITECTURE = "Marian transformer (.npz)"
CONFIG_KEY = "special:model.yml"
# Marian's "gelu" is x * sigmoid(1.702 x), not the erf GELU heed's Transformer has: refused.
ACTIVATIONS = {"swish": "swish", "relu": "relu"}
PAD = "<pad>"
PAD_LOGIT_BIAS = -1e4  # exp(-1e4) is 0 in float32 and bf16: <pad> takes no share of any softmax
# A vocabulary of 64k pieces is about 1 MB of YAML, which PyYAML holds in some 150 MB while it reads;
# decoder.yml and the options are a few KB.
MAX_VOCAB_BYTES = 4 << 20
MAX_OPTIONS_BYTES = yamlio.MAX_BYTES
WEIGHT_TYPES = ("<f4", "<f2", "<f8")  # the .npy dtypes a weight may have


def is_release(directory: Path) -> bool:
    """Whether `directory` looks like a Marian release: a decoder.yml, or .npz weights."""
    return (directory / "decoder.yml").is_file() or any(directory.glob("*.npz"))


def inside(directory: Path, name: Any, named_by: Path | None = None) -> Path:
    """`directory / name`, a file of the release: a ModelDirError when `name` is not a relative
    path, or the path (its symlinks followed) leads out of `directory`. A release names its own
    files; one that reaches elsewhere is not read, and nothing of it is shown."""
    where = named_by or directory / str(name)
    if not isinstance(name, str) or not name or "\0" in name or Path(name).is_absolute():
        raise ModelDirError(f"{where}: names a file as {shown(name)}; a release names its files by their names "
                            "in its directory")
    path = directory / name
    try:
        inner = path.resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL in the name
        inner = False
    if not inner:
        raise ModelDirError(f"{where}: {shown(name) if named_by else 'the file'} leads out of the release directory "
                            f"{directory}; heed reads a release's files only from inside it")
    return path


def _yaml(path: Path, *, strings: bool = False, limit: int = MAX_OPTIONS_BYTES) -> Any:
    """A YAML file of the release (heed.plumbing.yamlio: no anchors or aliases, no key twice, at
    most `limit` bytes); with `strings`, every scalar a string (a vocabulary's `yes`, `null` or `1`
    are pieces)."""
    try:
        with open_regular(path) as f:
            raw = yamlio.read_capped(f, limit)
        return yamlio.parse(raw.decode("utf-8"), strings=strings)
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing") from None
    except OSError as e:
        raise ModelDirError(f"{path}: cannot read: {reason(e)}") from None
    except (yamlio.TooLargeError, yamlio.YamlError) as e:
        raise ModelDirError(f"{path}: not a Marian release's YAML ({e})") from None
    except UnicodeDecodeError as e:
        raise ModelDirError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def release_files(directory: Path) -> tuple[Path, list[Path], dict[str, Any]]:
    """(the .npz, the vocabulary files [source, target], decoder.yml's settings) of a release:
    decoder.yml names them; without it, the directory's one .npz and one *.yml vocabulary. Each
    inside the directory."""
    decoder = directory / "decoder.yml"
    if decoder.is_file() or decoder.is_symlink():
        inside(directory, "decoder.yml")
        settings = _yaml(decoder, strings=True)
        if not isinstance(settings, dict):
            raise ModelDirError(f"{decoder}: expected a mapping with `models:` (the .npz) and `vocabs:` (source and "
                                "target .yml)")
        models, vocabs = settings.get("models"), settings.get("vocabs")
        if not isinstance(models, list) or not models or not isinstance(vocabs, list) or len(vocabs) < 2:
            raise ModelDirError(f"{decoder}: expected `models:` (the .npz) and `vocabs:` (source and target .yml)")
        if len(models) > 1:
            raise ModelDirError(f"{decoder}: names {len(models)} models (an ensemble); import each .npz on its own "
                                "and give heed the directories together")
        return (inside(directory, models[0], decoder),
                [inside(directory, vocabs[0], decoder), inside(directory, vocabs[-1], decoder)], settings)
    weights = sorted(directory.glob("*.npz"))
    vocab = sorted(p for p in directory.glob("*.yml") if "vocab" in p.name)
    if len(weights) != 1 or len(vocab) != 1:
        raise ModelDirError(f"{directory}: {len(weights)} .npz and {len(vocab)} vocabulary .yml files and no "
                            "decoder.yml to say which to use; a Marian release has one of each, or a decoder.yml")
    return inside(directory, weights[0].name), [inside(directory, vocab[0].name)] * 2, {}


def _what_it_is(head: bytes) -> str:
    """What a file that is not a zip archive is, by its first bytes."""
    if head.startswith(b"\x93NUMPY"):
        return "a single .npy array, not a .npz archive of Marian's weights"
    if head[:1] == b"\x80":
        return "a Python pickle, not a .npz archive (heed does not unpickle weights)"
    if not head:
        return "empty, not a .npz archive"
    return "not a .npz archive (a zip of .npy arrays), as Marian's weights are"


class Npz(Mapping[str, torch.Tensor]):
    """A Marian .npz opened as the zip it is, its members read one at a time, when taken: only the
    members a model needs are ever read. `shape(name)` reads a member's .npy header alone; taking a
    member (`npz[name]`) checks the header against `expected[name]` (set once the model's sizes are
    known) before a byte of the data is read, so a header that declares terabytes reads nothing.
    Errors are ModelDirErrors naming the file and the member."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.expected: dict[str, tuple[int, ...]] = {}
        try:
            self._file: IO[bytes] = open_regular(path)
        except FileNotFoundError:
            raise ModelDirError(f"{path}: missing") from None
        except OSError as e:
            raise ModelDirError(f"{path}: cannot read: {reason(e)}") from None
        try:
            head = self._file.read(8)
            self._file.seek(0)
            if not head.startswith(b"PK"):
                raise ModelDirError(f"{path}: {_what_it_is(head)}")
            self._zip = zipfile.ZipFile(self._file)
            self._members = {info.filename[:-4]: info for info in self._zip.infolist()
                             if info.filename.endswith(".npy")}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            self.close()
            raise self._damaged(e) from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _damaged(self, e: BaseException, member: str | None = None) -> ModelDirError:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        where = f" (its {member})" if member else ""
        return ModelDirError(f"{self.path}: unreadable weights{where} ({first}); the file is truncated or damaged, "
                             "download it again")

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def _header(self, f: IO[bytes], name: str) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(f)
        raise ValueError(f".npy version {version} is not one Marian writes")

    def shape(self, name: str) -> tuple[int, ...]:
        """The member's shape from its .npy header, its data unread."""
        with self._open(name) as f:
            try:
                return tuple(self._header(f, name)[0])
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
                raise self._damaged(e, name) from None

    def _open(self, name: str) -> IO[bytes]:
        if name not in self._members:
            raise KeyError(name)
        try:
            return self._zip.open(self._members[name])
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise self._damaged(e, name) from None

    def read(self, name: str, expected: tuple[int, ...], dtypes: tuple[str, ...] = WEIGHT_TYPES) -> np.ndarray:
        """The member `name`: its header's dtype one of `dtypes` and its shape `expected` (a (1, n)
        row and an (n,) vector are the same), or a ModelDirError before its data is read."""
        with self._open(name) as f:
            try:
                shape, fortran, dtype = self._header(f, name)
                if dtype.str not in dtypes:
                    raise ModelDirError(f"{self.path}: {name} holds {dtype} values; Marian's weights are floats")
                if _flat(shape) != _flat(expected):
                    raise ModelDirError(f"{self.path}: {name} is {_size(shape)}, but the model's options and "
                                        f"vocabulary make it {_size(expected)}; the file is not a model heed reads")
                count = int(np.prod(shape, dtype=np.int64))
                data = f.read(count * dtype.itemsize)
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
                raise self._damaged(e, name) from None
        if len(data) != count * dtype.itemsize:
            raise self._damaged(EOFError("the member ends early"), name)
        return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._members:
            raise KeyError(name)
        assert name in self.expected, f"no expected shape for {name}"  # heed's bug: the table below lacks it
        return torch.from_numpy(self.read(name, self.expected[name]).copy())

    def options(self) -> dict[str, Any]:
        """The training options, "special:model.yml" (a NUL-terminated YAML string of int8)."""
        if CONFIG_KEY not in self._members:
            raise ModelDirError(f"{self.path}: has no {CONFIG_KEY!r}; not a Marian model")
        shape = self.shape(CONFIG_KEY)
        if len(shape) != 1 or shape[0] > MAX_OPTIONS_BYTES:
            raise ModelDirError(f"{self.path}: its {CONFIG_KEY!r} is {_size(shape)}, not Marian's options")
        text = self.read(CONFIG_KEY, shape, ("|i1", "|u1", "|S1")).tobytes().rstrip(b"\0")
        try:
            options = yamlio.parse(text.decode("utf-8"))
        except (yamlio.YamlError, UnicodeDecodeError) as e:
            raise ModelDirError(f"{self.path}: its {CONFIG_KEY!r} is not Marian's options ({e})") from None
        if not isinstance(options, dict):
            raise ModelDirError(f"{self.path}: its {CONFIG_KEY!r} is not Marian's options")
        return options


def _flat(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A (1, n) row as (n,): Marian writes biases and norms as rows."""
    return tuple(shape[1:]) if len(shape) == 2 and shape[0] == 1 else tuple(shape)


def _size(shape: tuple[int, ...]) -> str:
    return " x ".join(f"{n:,}" for n in shape) if shape else "a scalar"


def read_vocab_yml(path: Path) -> list[str]:
    """A Marian vocabulary ({piece: id}) as its pieces in id order; ids must be 0 .. n - 1. The
    messages name an entry by its place, never its text."""
    entries = _yaml(path, strings=True, limit=MAX_VOCAB_BYTES)
    if not isinstance(entries, dict) or not entries:
        raise ModelDirError(f"{path}: not a Marian vocabulary (a YAML map of piece: id)")
    by_id: dict[int, str] = {}
    for place, (piece, value) in enumerate(entries.items(), 1):
        i = int(value) if isinstance(value, str) and value.isdigit() and len(value) <= 9 else -1
        if not isinstance(piece, str) or not 0 <= i < len(entries) or i in by_id:
            raise ModelDirError(f"{path}: entry {place:,}'s id is not one of 0 to {len(entries) - 1}, or repeats "
                                "another's; ids must be distinct")
        by_id[i] = piece
    return [by_id[i] for i in range(len(by_id))]


def model_fields(options: dict[str, Any], path: Path) -> dict[str, Any]:
    """The Transformer family's `model:` fields for Marian's training options; a ModelDirError
    naming the option heed's Transformer cannot hold."""
    def option(name: str, default: Any = None) -> Any:
        return options.get(name, default)

    def refuse(what: str) -> ModelDirError:
        return ModelDirError(f"{path}: {what}; heed's Transformer cannot hold this model")

    decoder = option("transformer-decoder-autoreg", "self-attention")
    if option("type") not in ("transformer", None) or decoder != "self-attention":
        raise refuse(f"type {shown(option('type'))} with a {shown(decoder)} decoder is not a Transformer")
    if option("enc-depth") != option("dec-depth"):
        raise refuse(f"enc-depth {shown(option('enc-depth'))} and dec-depth {shown(option('dec-depth'))} differ")
    if option("transformer-dim-ffn") != option("transformer-decoder-dim-ffn", option("transformer-dim-ffn")) or \
            option("transformer-ffn-depth", 2) != 2 or option("transformer-decoder-ffn-depth", 2) not in (0, 2):
        raise refuse("its encoder and decoder feed-forward networks differ in size or depth")
    activation = option("transformer-ffn-activation", "swish")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise refuse(f"transformer-ffn-activation {shown(activation)} is not one heed has ({', '.join(ACTIVATIONS)}; "
                     "Marian's gelu is its sigmoid approximation)")
    layout = (option("transformer-preprocess", ""), option("transformer-postprocess", "dan"),
              option("transformer-postprocess-top", ""))
    if layout not in (("", "dan", ""), ("n", "da", "n")):
        raise refuse(f"transformer-preprocess/postprocess/postprocess-top ({', '.join(map(shown, layout))}) is "
                     "neither post-norm ('', dan, '') "
                     "nor pre-norm (n, da, n)")
    if "n" in str(option("transformer-postprocess-emb", "d")):
        raise refuse("a norm after the embeddings (transformer-postprocess-emb n)")
    if option("transformer-train-position-embeddings", False):
        raise refuse("learned positions (transformer-train-position-embeddings)")
    sizes = {"layers": option("enc-depth"), "heads": option("transformer-heads"), "d_model": option("dim-emb"),
             "ff_size": option("transformer-dim-ffn")}
    for name, value in sizes.items():
        if type(value) is not int or value < 1:
            raise ModelDirError(f"{path}: its {name} ({shown(value)}) is not a positive whole number")
    every = bool(option("tied-embeddings-all", False))
    return {
        "family": "transformer", **sizes, "norm": "pre" if layout[0] == "n" else "post",
        "activation": ACTIVATIONS[activation], "scale_embeddings": True, "positions": "sinusoidal",
        "sinusoid_layout": "halves", "share_embeddings": every or bool(option("tied-embeddings-src", False)),
        "tie_embeddings": every or bool(option("tied-embeddings", False)),
        "dropout": _fraction(options, "transformer-dropout", 0.1, path),
        "attention_dropout": _fraction(options, "transformer-dropout-attention", 0.0, path),
    }


def _fraction(options: dict[str, Any], name: str, default: float, path: Path) -> float:
    """A dropout option, 0 to 1 (an empty one is 0)."""
    value = options.get(name, default) or 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ModelDirError(f"{path}: {name} is {shown(value)}, not a number from 0 to 1")
    return float(value)


def _take(w: Tensors, name: str, *, linear: bool = False) -> torch.Tensor:
    """The array `name` as float32: a matrix transposed to torch's (out, in) with `linear` (Marian
    keeps (in, out)), a (1, n) bias or norm flattened."""
    value = w[name]
    if linear:
        return value.t().contiguous()
    return value.reshape(-1) if value.dim() == 2 and value.size(0) == 1 else value


def _layers(w: Tensors, stack: str, layers: int, pre: bool) -> dict[str, torch.Tensor]:
    """One stack's layers, Marian's names -> heed's."""
    suffix = "_pre" if pre else ""
    out: dict[str, torch.Tensor] = {}
    parts = [("self", "self_attn", "self_attn_norm")]
    if stack == "decoder":
        parts.append(("context", "cross_attn", "cross_attn_norm"))
    for i in range(layers):
        s, t = f"{stack}_l{i + 1}", f"{stack}.layers.{i}"
        for marian, attention, norm in parts:
            out[f"{t}.{attention}.in_proj_weight"] = torch.cat([_take(w, f"{s}_{marian}_W{p}", linear=True)
                                                                 for p in "qkv"])
            out[f"{t}.{attention}.in_proj_bias"] = torch.cat([_take(w, f"{s}_{marian}_b{p}") for p in "qkv"])
            out[f"{t}.{attention}.out_proj.weight"] = _take(w, f"{s}_{marian}_Wo", linear=True)
            out[f"{t}.{attention}.out_proj.bias"] = _take(w, f"{s}_{marian}_bo")
            out[f"{t}.{norm}.weight"] = _take(w, f"{s}_{marian}_Wo_ln_scale{suffix}")
            out[f"{t}.{norm}.bias"] = _take(w, f"{s}_{marian}_Wo_ln_bias{suffix}")
        for k, heed_name in (("1", "inner"), ("2", "outer")):
            out[f"{t}.feed_forward.{heed_name}.weight"] = _take(w, f"{s}_ffn_W{k}", linear=True)
            out[f"{t}.feed_forward.{heed_name}.bias"] = _take(w, f"{s}_ffn_b{k}")
        out[f"{t}.feed_forward_norm.weight"] = _take(w, f"{s}_ffn_ffn_ln_scale{suffix}")
        out[f"{t}.feed_forward_norm.bias"] = _take(w, f"{s}_ffn_ffn_ln_bias{suffix}")
    if pre:
        out[f"{stack}.norm.weight"] = _take(w, f"{stack}_top_ln_scale")
        out[f"{stack}.norm.bias"] = _take(w, f"{stack}_top_ln_bias")
    return out


def _with_pad(table: torch.Tensor) -> torch.Tensor:
    """(vocab, d) -> (vocab + 1, d): <pad>'s zero row last, Marian's zero start embedding."""
    return torch.cat([table, table.new_zeros(1, table.size(1))])


def weights(w: Tensors, model: dict[str, Any]) -> dict[str, torch.Tensor]:
    """heed's state dict from a release's arrays."""
    pre = model["norm"] == "pre"
    out = {**_layers(w, "encoder", model["layers"], pre), **_layers(w, "decoder", model["layers"], pre)}
    if model["share_embeddings"]:
        out["decoder.embed.tokens.weight"] = _with_pad(w.first("Wemb", "decoder_Wemb"))
    else:
        out["encoder.embed.tokens.weight"] = _with_pad(_take(w, "encoder_Wemb"))
        out["decoder.embed.tokens.weight"] = _with_pad(_take(w, "decoder_Wemb"))
    if not model["tie_embeddings"]:
        out["decoder.generator.weight"] = _with_pad(_take(w, "decoder_ff_logit_out_Wt"))
    bias = _take(w, "decoder_ff_logit_out_b")
    out["decoder.generator.bias"] = torch.cat([bias, bias.new_full((1,), PAD_LOGIT_BIAS)])
    return out


def _vocab(path: Path, rows: int, where: Path) -> Vocab:
    """A vocabulary file plus <pad> as its last id (the embedding's `rows` + 1)."""
    pieces = read_vocab_yml(path)
    if len(pieces) != rows:
        raise ModelDirError(f"{path}: {len(pieces)} pieces, but {where.name}'s embedding has {rows} rows; the "
                            "vocabulary is not this model's")
    for needed in ("</s>", "<unk>"):
        if needed not in pieces:
            raise ModelDirError(f"{path}: has no {needed}; not a Marian vocabulary")
    tokens = [*pieces, PAD]
    pad = len(pieces)
    return Vocab(tokens, Specials(pad=pad, bos=pad, eos=pieces.index("</s>"), unk=pieces.index("<unk>")))


def _decode(settings: dict[str, Any]) -> dict[str, Any]:
    """DecodeConfig fields from decoder.yml: beam-size, and normalize as the power length norm."""
    decode: dict[str, Any] = {"length_norm": "power", "length_penalty": 1.0}
    for key, field, cast in (("beam-size", "beam_size", int), ("normalize", "length_penalty", float)):
        try:
            value = cast(settings[key])
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        if (field == "beam_size" and 1 <= value <= 64) or (field == "length_penalty" and 0.0 <= value <= 10.0):
            decode[field] = value
    return decode


def expected_shapes(model: dict[str, Any], src_rows: int, tgt_rows: int) -> dict[str, tuple[int, ...]]:
    """Every member `weights` may take, by Marian's name, with the shape the model's sizes give it
    (`src_rows`, `tgt_rows`: the vocabularies' pieces)."""
    d, ff, pre = model["d_model"], model["ff_size"], model["norm"] == "pre"
    suffix = "_pre" if pre else ""
    row = (1, d)
    shapes: dict[str, tuple[int, ...]] = {
        "Wemb": (tgt_rows, d), "encoder_Wemb": (src_rows, d), "decoder_Wemb": (tgt_rows, d),
        "decoder_ff_logit_out_Wt": (tgt_rows, d), "decoder_ff_logit_out_b": (1, tgt_rows)}
    for stack, parts in (("encoder", ("self",)), ("decoder", ("self", "context"))):
        for i in range(1, model["layers"] + 1):
            s = f"{stack}_l{i}"
            for part in parts:
                shapes.update({f"{s}_{part}_W{p}": (d, d) for p in "qkvo"})
                shapes.update({f"{s}_{part}_b{p}": row for p in "qkvo"})
                shapes.update({f"{s}_{part}_Wo_ln_{k}{suffix}": row for k in ("scale", "bias")})
            shapes.update({f"{s}_ffn_W1": (d, ff), f"{s}_ffn_b1": (1, ff), f"{s}_ffn_W2": (ff, d), f"{s}_ffn_b2": row,
                           f"{s}_ffn_ffn_ln_scale{suffix}": row, f"{s}_ffn_ffn_ln_bias{suffix}": row})
        if pre:
            shapes.update({f"{stack}_top_ln_scale": row, f"{stack}_top_ln_bias": row})
    return shapes


def _rows(npz: Npz, names: tuple[str, ...]) -> int:
    """The rows of the first of the embedding tables `names` the .npz has, from its header."""
    name = next((n for n in names if n in npz), names[0])
    if name not in npz:
        raise ModelDirError(f"{npz.path}: the weights lack {name}; not a complete checkpoint of this architecture")
    shape = npz.shape(name)
    if len(shape) != 2:
        raise ModelDirError(f"{npz.path}: {name} is {_size(shape)}, not an embedding table")
    return shape[0]


def convert(directory: Path, _config: dict[str, Any] | None = None) -> Converted:
    """A Marian release directory -> heed's Transformer (see the module doc)."""
    npz_path, (src_yml, tgt_yml), settings = release_files(directory)
    what = "a Marian release's tokenizer is its source.spm and target.spm"
    src_spm = read_spm(directory, inside(directory, "source.spm").name, what)
    tgt_spm = read_spm(directory, inside(directory, "target.spm").name, what)
    with Npz(npz_path) as npz:
        options = npz.options()
        model = buildable(model_fields(options, npz_path), npz_path)
        shared = model["share_embeddings"]
        src_rows = _rows(npz, ("Wemb", "decoder_Wemb") if shared else ("encoder_Wemb",))
        tgt_rows = src_rows if shared else _rows(npz, ("decoder_Wemb",))
        src_vocab = _vocab(src_yml, src_rows, npz_path)
        tgt_vocab = src_vocab if src_yml == tgt_yml else _vocab(tgt_yml, tgt_rows, npz_path)
        if shared and src_vocab.tokens != tgt_vocab.tokens:
            raise ModelDirError(f"{npz_path}: one table for both sides, but {src_yml.name} and {tgt_yml.name} differ")
        check_pieces(src_spm, src_vocab, directory / "source.spm", src_yml)
        check_pieces(tgt_spm, tgt_vocab, directory / "target.spm", tgt_yml)
        npz.expected = expected_shapes(model, src_rows, tgt_rows)
        state = weights(Tensors(npz, npz_path), model)
    return Converted(model, state, Codec(src_spm, tgt_spm, src_vocab, tgt_vocab), _decode(settings),
                     {"architecture": ARCHITECTURE, "weights": npz_path.name},
                     alignment=trained_reading(options, model),
                     described_by=npz_path)


def trained_reading(options: dict[str, Any], model: dict[str, Any]) -> dict[str, Any] | None:
    """heed.json's "alignment" for a model Marian trained with guided alignment (OPUS-MT's
    "transformer-align"): the first head of `transformer-guided-alignment-layer`'s cross-attention
    (1-based, or "last"), which is the head Marian supervises, read at the step predicting each
    token (argmax); None without guided alignment or for a layer it does not name."""
    if str(options.get("guided-alignment", "none")) in ("none", ""):
        return None
    layer = str(options.get("transformer-guided-alignment-layer", "last"))
    index = model["layers"] - 1 if layer == "last" else int(layer) - 1 if layer.isdigit() and len(layer) < 10 else -1
    if not 0 <= index < model["layers"]:
        return None
    return {"method": "argmax", "layer": index, "head": [0], "weights": "attention", "units": "words", "trained": True}
