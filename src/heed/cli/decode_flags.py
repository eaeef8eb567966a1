"""The decoding flags every translating command takes (--beam, --n-best, --min-len, ...): one table
from DecodeConfig's fields to flag names, one decorator that adds them, and the resolution of
the given flags over a model's decode config, with errors that name the flag."""
from __future__ import annotations

import inspect
import re
import typing
from typing import TYPE_CHECKING, Any, Optional

import typer

from heed.cli.app import F, flags_in_place, stderr
from heed.errors import ConfigError, HeedError

if TYPE_CHECKING:
    from heed.api import Translator
    from heed.decode_config import DecodeConfig


REPLACE_UNK_HELP = ("Replace each <unk> in the output by the source token it attended to most "
                    "(copied, or translated by --dictionary).")


DICTIONARY_HELP = "A source<TAB>target word list for --replace-unk (implies it); first entry wins."


# What the flag does; how fast it was where (slower on every CPU measured) is in bench/RESULTS.md,
# "bf16 decoding", where a figure keeps its CPU and date.
BF16_HELP = ("Decode in bfloat16 (weights cast once, products under autocast, scores in float32): meant for "
             "batches of a large model on a GPU; on a CPU, measure before you use it. The outputs may differ a "
             "little from float32's.")
INT8_HELP = ("Decode on the CPU with dynamic int8 matrix products (weights int8 per output row, activations "
             "quantized at each product; PyTorch's fbgemm kernels, AVX2 or later). The outputs may differ a "
             "little from float32's. Not for exported models: heed export --int8 makes an int8 export.")


DECODE_PANEL = "Decoding options"  # the heading the decode flags stand under in --help, after a command's own


# The one thing written here by hand: each DecodeConfig field's flag (with its --no- form for a switch).
DECODE_FLAG_NAMES: dict[str, str] = {
    "beam_size": "--beam", "n_best": "--n-best", "length_penalty": "--length-penalty", "length_norm": "--length-norm",
    "stopping": "--stop", "coverage_penalty": "--coverage-penalty", "min_len": "--min-len", "max_len_a": "--max-len-a",
    "max_len_b": "--max-len-b", "no_repeat_ngram": "--no-repeat-ngram", "forbid_unk": "--forbid-unk/--allow-unk",
    "shortlist": "--shortlist/--no-shortlist", "sampling": "--sampling/--no-sampling", "temperature": "--temperature",
    "top_k": "--top-k", "top_p": "--top-p", "seed": "--seed",
}
# What only a command line needs to know besides the field's meaning.
_COMMAND_LINE_NOTES = {
    "n_best": "`heed translate` writes them all (see its help); the other commands use the best.",
    "sampling": "--sampling without --beam samples with --beam 1.",
    "seed": "Without --seed the seed drawn is printed on stderr.",
}
DECODE_FLAG = {field: flag.split("/")[0] for field, flag in DECODE_FLAG_NAMES.items()}

# Field names: those with an underscore anywhere; plain words ("seed") only where they lead the text
# or follow its "with" ("sampling: ...", "with sampling: ..."), as elsewhere they are English ("the random seed").
_PLAIN = "|".join(f for f in DECODE_FLAG if "_" not in f)
_DECODE_FIELD_WORD = re.compile(r"\b(" + "|".join(f for f in DECODE_FLAG if "_" in f) + r")\b|^(" + _PLAIN
                                + r")\b|(?<=^[Ww]ith )(" + _PLAIN + r")\b")


def flag_words(text: str) -> str:
    """`text` with DecodeConfig field names written as their flags ("n_best" -> "--n-best")."""
    return _DECODE_FIELD_WORD.sub(lambda m: DECODE_FLAG[m.group(m.lastindex or 0)], text)


def flag_type(annotation: Any) -> Any:
    """int, float, str, bool or a Literal of choices: a pydantic field's type without its None
    (seed: int | None), as a typer flag takes it."""
    if typing.get_origin(annotation) is typing.Literal:
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if args else annotation


def decode_flags() -> list[tuple[str, str, type, str]]:
    """(field, flag, type, help) for every DecodeConfig field: the help is the field's description in
    flag words, as a sentence, with what only a command line needs to know."""
    from heed.decode_config import DecodeConfig

    flags = []
    for field, info in DecodeConfig.model_fields.items():
        words = flag_words(info.description or field)
        text = words[:1].upper() + words[1:] + "."
        note = _COMMAND_LINE_NOTES.get(field)
        flags.append((field, DECODE_FLAG_NAMES[field], flag_type(info.annotation), f"{text} {note}" if note else text))
    return flags


def decode_options(command: F) -> F:
    """Give `command` the decode flags (decode_flags()), each None (= the model's decode config) unless given. The
    command takes a keyword-only `decode`: {DecodeConfig field: value} of the flags given."""
    # Optional[...], not `| None`: an annotation built at run time from a field's type, whichever typing
    # form that is (`|` is defined on classes, not on every form typing has)
    flags = [inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[kind],  # noqa: UP045
                               default=typer.Option(None, flag, help=f"{help} Default: the model's decode config.",
                                                    show_default=False, rich_help_panel=DECODE_PANEL))
             for field, flag, kind, help in decode_flags()]
    return flags_in_place(command, "decode", flags, lambda given: {k: v for k, v in given.items() if v is not None})


def resolve_decode(translator: Translator, decode: dict[str, Any], *, label: str = "") -> DecodeConfig:
    """The translator's decode config with the flags given (`decode`, from `decode_options`) applied,
    validated; a bad value is a HeedError naming its flag. Sampling without --seed gets one seed,
    printed on stderr, for all the input (and for the user to draw the same again)."""
    overrides = {field: value for field, value in decode.items() if field != "beam_size"}
    beam = decode.get("beam_size")
    if beam is None and overrides.get("sampling"):
        beam = 1  # sampling draws instead of searching: the model's beam size would only clash
    try:
        cfg = translator.resolve_decode(overrides, beam=beam)
    except ConfigError as e:
        raise HeedError(_decode_flag_message(e, decode)) from None
    if cfg.sampling and decode.get("seed") is None:
        stderr().print(f"{label + ': ' if label else ''}sampling with seed {cfg.seed} (--seed {cfg.seed} draws "
                        "the same samples again)", markup=False, soft_wrap=True)
    return cfg


def _decode_flag_message(error: ConfigError, given: dict[str, Any]) -> str:
    """A decode ConfigError ("field 'decode.top_p': Input should be ...") in flag words:
    "--top-p: input should be ... (got 1.5)"."""
    field = (error.field or "").removeprefix("decode.")
    message = flag_words(error.message[:1].lower() + error.message[1:])
    flag = DECODE_FLAG.get(field)
    if flag is None:
        return f"decode settings: {message}"
    if flag not in message and field in given:  # a one-field check; pydantic's message omits the value
        message += f" (got {given[field]})"
    # A clash with a value the user did not give ("--n-best (2) cannot exceed --beam (1)"): say where it is from.
    implicit = [f for name, f in DECODE_FLAG.items()
                if name not in given and re.search(f"{f} (\\(|-?\\d)", message)]  # "--beam (1)", "--max-len-b 0"
    if implicit:
        message += f" ({', '.join(implicit)}: the model's decode config)"
    return message if message.startswith(flag) else f"{flag}: {message}"
