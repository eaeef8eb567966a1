"""A model's decode settings as a translating call uses them: its saved `decode:` with the caller's
overrides (DecodeConfig fields by name, and a beam size asked for by itself), checked once against
the model's target vocabulary, and a sampling run without a seed given a fresh one (so the config
says how to draw the same again). heed.api.Translator's translating methods, `resolve_decode`, the
CLI's decode flags and the server all come through here."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import ValidationError

from heed.config import decode_length_problem
from heed.data.vocab import SPECIALS
from heed.decode_config import DecodeConfig
from heed.errors import ConfigError


def with_beam(saved: DecodeConfig, overrides: Mapping[str, Any], beam: int | None) -> dict[str, Any]:
    """`overrides` with a beam size asked for by itself (translate()'s `beam=`, the CLI's --beam):
    beam_size, and n_best at most it (the `saved` config's) unless n_best is given too."""
    update = dict(overrides)
    if beam is not None:
        update["beam_size"] = beam
        update.setdefault("n_best", min(saved.n_best, beam))
    return update


def overridden(saved: DecodeConfig, update: Mapping[str, Any]) -> DecodeConfig:
    """`saved` with `update` applied and validated; a bad value is a ConfigError naming `decode.FIELD`."""
    if not update:
        return saved
    try:
        cfg = DecodeConfig.model_validate({**saved.model_dump(), **update})
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        # A check across fields (n_best <= beam_size) has no location; its message starts with the field.
        first_word = err["msg"].removeprefix("Value error, ").split(" ")[0]
        field = ".".join(str(p) for p in err["loc"]) or (first_word if first_word in DecodeConfig.model_fields
                                                         else None)
        raise ConfigError(err["msg"].removeprefix("Value error, "),
                          field=f"decode.{field}" if field else "decode") from None
    problem = decode_length_problem(cfg)
    if problem is not None:
        raise ConfigError(problem, field="decode.max_len_b")
    return cfg


def ready(cfg: DecodeConfig, *, tgt_vocab_size: int) -> DecodeConfig:
    """`cfg` checked against a model of `tgt_vocab_size` target ids (a ConfigError for constraints its
    vocabulary cannot meet) and, for sampling without a seed, given a fresh one."""
    distinct = tgt_vocab_size - len(SPECIALS) + 1  # every ordinary token, and <unk>
    if cfg.no_repeat_ngram == 1 and cfg.min_len > distinct:
        raise ConfigError(f"min_len {cfg.min_len} with no_repeat_ngram 1 asks for {cfg.min_len} different tokens, "
                          f"and the target vocabulary has {distinct}; lower min_len or no_repeat_ngram",
                          field="decode.min_len")
    if cfg.sampling and cfg.seed is None:
        cfg = cfg.model_copy(update={"seed": int(torch.randint(0, 2**31 - 1, ()).item())})
    return cfg


def resolve(saved: DecodeConfig, overrides: Mapping[str, Any] | None = None, *, beam: int | None = None,
            tgt_vocab_size: int) -> DecodeConfig:
    """`saved` with `overrides` and `beam` (with_beam) applied, made ready (see `ready`)."""
    return ready(overridden(saved, with_beam(saved, overrides or {}, beam)), tgt_vocab_size=tgt_vocab_size)


def chosen(saved: DecodeConfig, decode: DecodeConfig | None, beam: int | None, options: Mapping[str, Any], *,
           tgt_vocab_size: int) -> DecodeConfig:
    """What a translating call decodes with: `decode` as given, or `saved` with `beam` and `options`;
    never both."""
    if decode is None:
        return resolve(saved, options, beam=beam, tgt_vocab_size=tgt_vocab_size)
    if beam is not None or options:
        raise TypeError("give decode= (a whole DecodeConfig) or beam= and decoding options, not both")
    return ready(decode, tgt_vocab_size=tgt_vocab_size)


__all__ = ["chosen", "overridden", "ready", "resolve", "with_beam"]
