"""Translating over (model, codec, device), never the facade: heed.api.Translator's search (decode:
sources cut to the model's length, a many-language model's frame, prefixes, Decoded hypotheses),
and what it makes of search's output over the model's codec: each hypothesis as a Translation
(unknown-word replacement by attention and a dictionary), the ids of forced prefixes, the
explorer's pieces (each step's likeliest tokens, read teacher-forced, and the beam search tree with
its tokens as strings) and the word alignment behind a translation."""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from heed.config import Config
from heed.data.batching import collate, specials_of
from heed.data.codec import Codec
from heed.data.vocab import BOS, SPECIALS, UNK
from heed.decode_config import DecodeConfig
from heed.errors import HeedError
from heed.explain.align import hard_alignment, load_dictionary, replace_unknowns, word_attention
from heed.explain.pairs import Stoppable, Subject, check_texts, known_target_ids, precision
from heed.results import Alignment, BeamNode, Translation
from heed.search import BeamTree, Decoded, OwnSearchModel, translate_ids
from heed.search.shortlist import Shortlist

UNK_TOKEN = SPECIALS[UNK]


def decode(subject: Subject, texts: Sequence[str], cfg: DecodeConfig, *, max_src_len: int, batch_size: int = 64,
           replace_unk: bool = False, dictionary: Mapping[str, str] | str | os.PathLike[str] | None = None,
           prefix: Sequence[str | Sequence[str] | None] | None = None, trace: bool = False,
           stop: Callable[[], bool] | None = None, shortlist: Shortlist | None = None,
           attention: bool = True) -> list[tuple[list[Translation], Decoded | None]]:
    """Decode `texts` with the subject's model, each cut to `max_src_len` source tokens (what
    heed.api.Translator.translate_nbest and explore run; their docs say what the options do): per
    text, its n-best Translations and the search's raw Decoded (None for an empty text, which is
    not decoded). With `cfg.shortlist` the search runs over `shortlist` (the model directory's;
    a CTranslate2 export uses its own vocabulary map). Without `attention` (and `replace_unk`) a
    runtime where it costs (a CTranslate2 export) may leave Translation.attention None."""
    model_in, codec, device = subject
    if isinstance(texts, str):
        raise TypeError("translate() takes a list of sentences; wrap a single one in a list")
    check_texts(texts, "texts")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    table = dictionary_table(dictionary)
    replace_unk = replace_unk or table is not None
    if replace_unk and not model_in.has_attention:
        raise HeedError("this model has no attention, so nothing says which source word an <unk> stands "
                        "for; translate without unknown-word replacement")
    full = [codec.src_tokens(t) for t in texts]
    src_tokens = [toks[: max_src_len] for toks in full]
    forced = prefix_ids(codec, prefix, len(texts), sources=src_tokens)
    frame = codec.target_frame()  # a many-language model's target language token, forced first
    if frame:
        forced = [_framed(frame, ids) for ids in (forced or [[] for _ in texts])]
    framing = len(codec.source_frame)  # a many-language model's source language token, not the text
    todo = [i for i, toks in enumerate(src_tokens) if toks[framing:]]
    sources = [codec.src_ids(src_tokens[i]) for i in todo]
    prefixes = None if forced is None else [forced[i] for i in todo]
    if isinstance(model_in, OwnSearchModel):  # a CTranslate2 export: its own search, in C++
        decoded = model_in.translate_ids(sources, cfg, batch_size=batch_size, prefixes=prefixes,
                                           free_prefix=len(frame), trace=trace, stop=stop,
                                           attention=attention or replace_unk)
    else:
        if cfg.shortlist:
            if shortlist is None:
                raise HeedError("--shortlist: this model records no vocabulary shortlist; build one from its training "
                                "corpus with `heed data shortlist MODEL --src FILE --tgt FILE`, or translate without "
                                "it")
            if trace:
                raise HeedError("the explorer's beam tree is drawn over the whole vocabulary; explore without "
                                "--shortlist")
        model = model_in if stop is None else Stoppable(model_in, stop)
        with precision(model_in, device):
            decoded = translate_ids(model, sources, cfg, device=device, batch_size=batch_size, prefixes=prefixes,
                                    free_prefix=len(frame), trace=trace, shortlist=shortlist if cfg.shortlist else None)
    no_attention = None if not model_in.has_attention else np.zeros((1, 1), np.float32)
    empty = Translation("", [], [], 0.0, no_attention)
    out: list[tuple[list[Translation], Decoded | None]] = [([empty], None) for _ in texts]
    for i, result in zip(todo, decoded):
        nbest = [translation(codec, h.tokens, h.attention, float(h.score), float(h.log_prob),
                                          src_tokens[i], len(full[i]) - len(src_tokens[i]), replace_unk, table)
                 for h in result.hypotheses]
        # No hypothesis finished with a finite score: the constraints left no allowed token.
        # An empty text scored -inf says so (0.0 would read as a certain, empty translation).
        weights = None if no_attention is None else np.zeros((1, len(src_tokens[i]) + 1), np.float32)
        failed = Translation("", [], src_tokens[i], float("-inf"), weights, len(full[i]) - len(src_tokens[i]),
                             float("-inf"))
        out[i] = (nbest or [failed], result)
    return out


def _framed(frame: list[int], ids: list[int]) -> list[int]:
    """A forced prefix starting with the target language's token `frame`: added unless the prefix
    (an explorer's, made of a translation's tokens) already starts with it."""
    return ids if ids[:len(frame)] == frame else frame + ids


def source_limit(config: Config) -> int:
    """The longest source, in tokens, a model of `config` reads: its `data.max_src_len`, or fewer where a
    Transformer learned fewer positions (`model.max_positions`, one for </s>)."""
    limit = config.model.position_limit
    return config.data.max_src_len if limit is None else min(config.data.max_src_len, limit - 1)


def translation(codec: Codec, ids: list[int], attention: torch.Tensor | None, score: float, log_prob: float,
                src_tokens: list[str], truncated: int, replace_unk: bool,
                table: dict[str, str] | None) -> Translation:
    """A hypothesis (target ids, its attention) as a Translation of `src_tokens`; with `replace_unk`,
    each <unk> replaced by the source token it attended to most, translated by `table`."""
    tokens, text = codec.decode_tgt(ids, src_tokens)  # a copy model's temporary ids: the source's tokens
    matrix = None if attention is None else attention.float().numpy()
    if replace_unk and UNK_TOKEN in tokens:
        assert matrix is not None
        # Rows: output tokens without </s>; columns: source tokens without </s>.
        tokens = replace_unknowns(tokens, src_tokens, matrix[: len(tokens), : len(src_tokens)],
                                  unk=UNK_TOKEN, dictionary=table)
        text = codec.tgt_tokenizer.detokenize(tokens)
    return Translation(text, tokens, src_tokens, score, matrix, truncated, log_prob)


def dictionary_table(dictionary: Mapping[str, str] | str | os.PathLike[str] | None) -> dict[str, str] | None:
    """A word dictionary for <unk> replacement: a mapping as given, or a `src<TAB>tgt` file read."""
    if dictionary is None:
        return None
    return dict(dictionary) if isinstance(dictionary, Mapping) else load_dictionary(Path(dictionary))


def prefix_ids(codec: Codec, prefix: Sequence[str | Sequence[str] | None] | None, count: int, *,
               sources: Sequence[Sequence[str]] | None = None) -> list[list[int]] | None:
    """Target ids of each text's forced prefix ([] for none); HeedError naming `prefix[k]` for a
    wrong count, a special token or a token the target vocabulary lacks. A copy model also takes
    a token it can copy from the text's source tokens (`sources[k]`)."""
    if prefix is None:
        return None
    if isinstance(prefix, str) or len(prefix) != count:
        raise HeedError(f"prefix must be a list with one entry per sentence ({count}); give None for no prefix")
    out: list[list[int]] = []
    for k, entry in enumerate(prefix):
        if entry is None:
            out.append([])
            continue
        tokens = codec.tgt_tokens(entry) if isinstance(entry, str) else list(entry)
        out.append(known_target_ids(codec, tokens, () if sources is None else sources[k], f"prefix[{k}]"))
    return out


def step_alternatives(subject: Subject, best: Sequence[Translation], k: int, *, batch_size: int,
                      stop: Callable[[], bool] | None = None) -> list[list[list[tuple[str, float]]]]:
    """For each translation, per output position (tokens, then </s>), the model's k most likely
    tokens there given the translation's tokens before it: one teacher-forced pass per batch."""
    codec, device = subject.codec, subject.device
    vocabs = [codec.target_vocab(t.src_tokens) for t in best]  # a copy model's: extended per sentence
    examples = [(codec.src_ids(t.src_tokens), vocab.encode(t.tokens)) for t, vocab in zip(best, vocabs)]
    todo = [i for i, t in enumerate(best) if t.src_tokens]
    out: list[list[list[tuple[str, float]]]] = [[] for _ in best]
    k = min(k, len(codec.tgt_vocab) - 2)  # PAD and BOS are never candidates
    model = subject.model if stop is None else Stoppable(subject.model, stop)
    with torch.inference_mode(), precision(subject.model, device):
        for start in range(0, len(todo), batch_size):
            group = todo[start : start + batch_size]
            batch = collate([examples[i] for i in group], group, specials_of(subject.model)).to(device)
            logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (batch, tgt_len, vocab)
            logp = torch.log_softmax(logits.float(), dim=-1)
            logp[..., [subject.model.pad_id, subject.model.bos_id]] = float("-inf")
            values, ids = (x.cpu().tolist() for x in logp.topk(k, dim=-1))  # (batch, tgt_len, k)
            for row, i in enumerate(group):
                # a copy model's temporary ids past this sentence's own have log-prob -inf: left out
                out[i] = [[(vocabs[i].lookup(t), lp) for t, lp in zip(ids[row][j], values[row][j])
                           if t < len(vocabs[i])]
                          for j in range(len(examples[i][1]) + 1)]
    return out


def beam_nodes(codec: Codec, tree: BeamTree, src_tokens: Sequence[str]) -> list[BeamNode]:
    """The beam search tree with its tokens as strings (the root's: <s>)."""
    vocab = codec.target_vocab(src_tokens)
    return [BeamNode(n.id, n.parent, n.step, SPECIALS[BOS] if n.token is None else vocab.lookup(n.token),
                     n.log_prob, n.score, n.status) for n in tree.nodes]


def word_alignment(codec: Codec, translation: Translation) -> Alignment | None:
    """The word alignment behind a translation: its token attention lifted to whitespace words
    (source pieces summed, output pieces averaged; `heed.explain.align.word_attention`), each output
    word linked to the source word with the most weight. None without attention."""
    if translation.attention is None:
        return None
    src_ids = codec.src_tokenizer.word_ids(translation.src_tokens)
    tgt_ids = codec.tgt_tokenizer.word_ids(translation.tokens)
    matrix = word_attention(translation.attention[: len(translation.tokens), : len(translation.src_tokens)],
                            src_ids, tgt_ids)  # (tgt_words, src_words)
    return Alignment(_words(codec.src_tokenizer, translation.src_tokens, src_ids),
                     _words(codec.tgt_tokenizer, translation.tokens, tgt_ids),
                     matrix.astype(np.float32), hard_alignment(matrix))


def _words(tokenizer: Any, tokens: list[str], word_ids: list[int | None]) -> list[str]:
    """The whitespace words `tokens` make, by `word_ids` (Tokenizer.word_ids)."""
    pieces: dict[int, list[str]] = {}
    for token, word in zip(tokens, word_ids):
        if word is not None:
            pieces.setdefault(word, []).append(token)
    return [tokenizer.detokenize(pieces[w]).strip() for w in sorted(pieces)]


__all__ = ["beam_nodes", "decode", "dictionary_table", "prefix_ids", "source_limit", "step_alternatives", "translation",
           "word_alignment"]
