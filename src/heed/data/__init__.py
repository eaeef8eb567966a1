"""Data: corpora, tokenizers, vocabularies, batches, the Codec (codec.py: tokenizers and vocabularies
together, and a config's corpora), `heed prepare`'s shards (prepare.py, prepared.py), Pharaoh
alignment files (pharaoh.py), the downloader, and the generated tasks (dates, names).

text files --corpus--> Pair(src, tgt) --tokenize--> tokens --vocab--> ids --batching--> Batch
"""
from heed.data.batching import (
    Batch,
    SourceBatch,
    collate,
    filter_by_length,
    padding_fraction,
    sentence_batches,
    token_batches,
)
from heed.data.corpus import Pair, load_pairs, normalize, read_parallel, read_tsv
from heed.data.dates import DATE_LANGUAGES, DateSplits, generate_dates, write_splits
from heed.data.tokenize import (
    TOKENIZER_KINDS,
    CharTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    WordTokenizer,
    load_tokenizer,
    train_tokenizer,
)
from heed.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab

__all__ = [
    "BOS",
    "DATE_LANGUAGES",
    "EOS",
    "PAD",
    "SPECIALS",
    "TOKENIZER_KINDS",
    "UNK",
    "Batch",
    "CharTokenizer",
    "DateSplits",
    "Pair",
    "SentencePieceTokenizer",
    "SourceBatch",
    "Tokenizer",
    "Vocab",
    "WordTokenizer",
    "collate",
    "filter_by_length",
    "generate_dates",
    "load_pairs",
    "load_tokenizer",
    "normalize",
    "padding_fraction",
    "read_parallel",
    "read_tsv",
    "sentence_batches",
    "token_batches",
    "train_tokenizer",
    "write_splits",
]
