"""`heed data align`: eflomal's links of a corpus (heed.explain.external), scored on a gold by
construction, and the file guided alignment training reads."""
from __future__ import annotations

import random
import sys

import pytest
from cli_helpers import assert_user_error, invoke

from heed.data.corpus import Pair
from heed.data.pharaoh import read_alignments
from heed.data.supervision import read_supervision
from heed.explain.align import AerCounts
from heed.explain.external import eflomal_links

pytest.importorskip("eflomal")

SOURCE = [f"s{k}" for k in range(40)]
TARGET = [f"t{k}" for k in range(40)]


def _corpus(n: int, seed: int = 0) -> tuple[list[Pair], list[set[tuple[int, int]]]]:
    """Word for word translations (s_k -> t_k) of 3-8 words, with neighbours swapped now and then:
    the gold is known by construction."""
    rng = random.Random(seed)
    pairs, golds = [], []
    for _ in range(n):
        words = rng.sample(range(40), rng.randint(3, 8))
        order = list(range(len(words)))
        for i in range(0, len(order) - 1, 2):
            if rng.random() < 0.3:
                order[i], order[i + 1] = order[i + 1], order[i]
        pairs.append(Pair(" ".join(SOURCE[w] for w in words), " ".join(TARGET[words[i]] for i in order)))
        golds.append({(i, j) for j, i in enumerate(order)})
    return pairs, golds


def test_eflomal_finds_the_links_of_a_word_for_word_corpus():
    pairs, golds = _corpus(400)
    counts = AerCounts()
    for links, gold in zip(eflomal_links(pairs), golds):
        counts.add(links, gold, gold)
    assert counts.aer < 0.1, counts.aer


def test_heed_data_align_writes_one_line_per_pair_that_training_reads(tmp_path):
    pairs, golds = _corpus(300, seed=1)
    (tmp_path / "train.tsv").write_text("".join(f"{p.src}\t{p.tgt}\n" for p in pairs), encoding="utf-8")
    result = invoke("data", "align", "--tsv", tmp_path / "train.tsv", "-o", tmp_path / "train.align",
                    "--symmetrize", "intersect")
    assert result.exit_code == 0, result.output
    assert "300 pairs aligned by eflomal (intersect" in result.stdout
    written = read_alignments(tmp_path / "train.align")
    assert len(written) == 300
    assert all(i < len(p.src.split()) and j < len(p.tgt.split()) for p, links in zip(pairs, written)
               for i, j in links)
    hits = sum(len(links & gold) for links, gold in zip(written, golds))
    assert hits >= 0.9 * sum(map(len, written))  # intersected links: high precision
    read = read_supervision(tmp_path / "train.align", pairs, lines=None, total=300, reverse=False, units="words")
    assert read == written  # what train.alignment.supervision reads


def test_without_eflomal_the_command_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "eflomal", None)  # import eflomal raises ImportError
    (tmp_path / "a.tsv").write_text("a b\tc d\n", encoding="utf-8")
    result = invoke("data", "align", "--tsv", tmp_path / "a.tsv", "-o", tmp_path / "out.align")
    assert_user_error(result, "eflomal", "pip install 'heed-nmt[align]'")
    assert not (tmp_path / "out.align").exists()


def test_half_a_corpus_is_one_line(tmp_path):
    result = invoke("data", "align", "--src", tmp_path / "x.txt", "-o", tmp_path / "out.align")
    assert_user_error(result, "--src FILE --tgt FILE")
    assert not (tmp_path / "out.align").exists()


def test_an_unknown_symmetrization_is_refused_with_the_choices(tmp_path):
    (tmp_path / "a.tsv").write_text("a b\tc d\n", encoding="utf-8")
    result = invoke("data", "align", "--tsv", tmp_path / "a.tsv", "--symmetrize", "both", "-o", tmp_path / "out.align")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Invalid value for '--symmetrize'" in result.output and "'both'" in result.output
    assert "grow-diag-final" in result.output  # the choices
    assert not (tmp_path / "out.align").exists()


def test_a_corpus_over_the_size_limit_is_refused_before_eflomal_runs(tmp_path, monkeypatch):
    import heed.data.codec

    monkeypatch.setattr(heed.data.codec, "MAX_TEXT_PAIRS", 3)
    (tmp_path / "a.tsv").write_text("".join(f"a{k} b\tc d{k}\n" for k in range(5)), encoding="utf-8")
    (tmp_path / "kept.align").write_text("keep me\n", encoding="utf-8")
    result = invoke("data", "align", "--tsv", tmp_path / "a.tsv", "-o", tmp_path / "kept.align")
    assert_user_error(result, "a.tsv", "more than 3 pairs")
    assert (tmp_path / "kept.align").read_text(encoding="utf-8") == "keep me\n"
