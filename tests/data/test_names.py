"""The generated names task: invented names that train and test never share."""
from __future__ import annotations

import pytest

from heed.data.names import TEMPLATES, copied_names, generate_names


def test_names_are_invented_capitalized_words_and_the_splits_share_none() -> None:
    splits = generate_names(n_train=300, n_dev=50, n_test=100, seed=3)
    pools = [{n for e in split for n in e.names} for split in splits]
    assert not (pools[0] & pools[2]) and not (pools[0] & pools[1]) and not (pools[1] & pools[2])
    template_words = {w for pair in TEMPLATES for side in pair[:2] for w in side.split()}
    for example in splits.test:
        for name in example.names:
            assert name[0].isupper() and name[1:].islower() and name not in template_words
            # the name passes through: it is a word of both sides
            assert name in example.pair.src.split() and name in example.pair.tgt.split()


def test_generation_is_deterministic_in_the_seed() -> None:
    assert generate_names(n_train=20, n_dev=5, n_test=5, seed=1) == generate_names(n_train=20, n_dev=5, n_test=5, seed=1)
    assert generate_names(n_train=20, n_dev=5, n_test=5, seed=1) != generate_names(n_train=20, n_dev=5, n_test=5, seed=2)


def test_copied_names_counts_each_name_found_in_its_output() -> None:
    splits = generate_names(n_train=2, n_dev=2, n_test=4, seed=0)
    examples = splits.test[:2]
    outputs = [examples[0].pair.tgt, " ".join("<unk>" if w in examples[1].names else w
                                                for w in examples[1].pair.tgt.split())]
    total = len(examples[0].names) + len(examples[1].names)
    assert copied_names(examples, outputs) == (len(examples[0].names), total)
    with pytest.raises(ValueError, match="2 examples but 1 outputs"):
        copied_names(examples, outputs[:1])
