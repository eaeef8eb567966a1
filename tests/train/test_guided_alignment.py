"""Guided alignment training (heed.train.alignment, heed.data.supervision): the supervision's
token links, the loss, the `self` labels, training with them, and what the model directory records."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import yaml
from cli_helpers import invoke

from heed.api import Translator
from heed.config import GuidedAlignmentConfig, config_from_dict, load_config, save_config
from heed.data.codec import Codec, Corpora, load_corpora, split_corpus
from heed.data.corpus import Pair, normalize
from heed.data.pharaoh import to_pharaoh
from heed.data.supervision import TokenLinks, read_supervision, token_links, training_links
from heed.data.tokenize import train_tokenizer
from heed.explain.align import hard_alignment
from heed.explain.align_methods import AlignOptions, UnitMaps, recorded_options, select_attention
from heed.nn.build import build_model
from heed.train import train
from heed.train.alignment import (
    GuidedAlignment,
    alignment_loss,
    alignment_reading,
    alignment_target,
    shift_att_target,
)

# ------------------------------------------------------------------------------ words and pieces

WORDS = ["the", "unbelievably", "fine", "reconstruction", "ｆｕｌｌ", "ﬁsh", "ok.", "(yes)", "zebras,", "x",
         "cafe\u0301s", "wo\ufeffrd"]  # the last two change under heed's normalize (NFC, zero-width dropped)


def _pairs(n: int, seed: int) -> tuple[list[Pair], list[set[tuple[int, int]]]]:
    """Gold by construction on the raw text: the target is the source's words shuffled (target word j
    is source word perm[j]); among them words of many pieces, punctuation glued to words, and
    characters that reading a corpus normalises (a decomposed accent, a zero-width no-break space).
    The pairs come back as a corpus reads them (heed.data.corpus.normalize)."""
    rng = random.Random(seed)
    pairs, golds = [], []
    for _ in range(n):
        words = rng.sample(WORDS, rng.randint(2, 7))
        perm = list(range(len(words)))
        rng.shuffle(perm)
        pairs.append(Pair(normalize(" ".join(words)), normalize(" ".join(words[i] for i in perm))))
        golds.append({(i, j) for j, i in enumerate(perm)})
    return pairs, golds


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_word_links_become_piece_links_and_read_back_as_the_same_words(kind):
    """The supervision maps word links onto pieces; heed align lifts piece attention back to words.
    An attention that is exactly the supervision must read back as exactly the gold: a wrong map
    either way would look like a poor model."""
    pairs, golds = _pairs(300, seed=3)
    tokenizer = train_tokenizer(kind, [p.src for p in pairs], vocab_size=60)
    pieces = 0
    for pair, gold in zip(pairs, golds):
        src_tokens, tgt_tokens = tokenizer.tokenize(pair.src), tokenizer.tokenize(pair.tgt)
        pieces = max(pieces, len(src_tokens) - len(pair.src.split()))
        links = token_links(gold, src_tokens, tgt_tokens, pair.tgt, src_word_ids=tokenizer.word_ids,
                            tgt_word_ids=tokenizer.word_ids, units="words")
        attention = np.zeros((len(tgt_tokens), len(src_tokens)))
        attention[links[:, 0], links[:, 1]] = 1.0
        attention /= attention.sum(1, keepdims=True)  # as alignment_target spreads each row
        maps = UnitMaps.build(tokenizer.word_ids(src_tokens), tokenizer.word_ids(tgt_tokens), tgt_tokens, pair.tgt,
                              "words")
        assert set(hard_alignment(maps.lift(attention))) == gold, (pair, src_tokens, tgt_tokens)
    assert pieces >= 5  # the words really were split into pieces
    assert any("cafés" in p.src for p in pairs) and not any("\ufeff" in p.src for p in pairs)  # normalised


def test_character_units_map_to_the_token_that_writes_each_character():
    tokenizer = train_tokenizer("char", [])
    tgt = "2041-04"
    tgt_tokens = tokenizer.tokenize(tgt)
    links = token_links({(0, 0), (1, 5), (1, 6)}, ["▁a", "▁b"], tgt_tokens, tgt, src_word_ids=lambda t: [0, 1],
                        tgt_word_ids=tokenizer.word_ids, units="chars")
    assert links.tolist() == [[0, 0], [5, 1], [6, 1]]


def test_token_links_store_each_pairs_links():
    store = TokenLinks.of([np.array([[0, 1]]), np.zeros((0, 2)), np.array([[2, 0], [3, 3]])])
    assert len(store) == 3 and store[1].shape == (0, 2) and store[2].tolist() == [[2, 0], [3, 3]]
    assert store[0].tolist() == [[0, 1]] and store.links.dtype == np.int32


# ------------------------------------------------------------------------------ the file


def test_a_supervision_file_follows_its_lines_through_split_and_reverse(tmp_path):
    pairs = [Pair(f"a{k} b{k}", f"x{k} y{k} z{k}") for k in range(12)] + [Pair("a0 b0", "other")]
    lines = [to_pharaoh([(0, k % 3), (1, 2 - k % 3)]) for k in range(12)] + ["0-0"]
    path = tmp_path / "train.align"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpora = split_corpus(pairs, dev=2, test=2, seed=1)
    read = read_supervision(path, corpora.train, lines=corpora.train_lines, total=corpora.train_read, reverse=False,
                            units="words")
    for pair, links in zip(corpora.train, read):
        k = int(pair.src.split()[0][1:])
        assert links == {(0, k % 3), (1, 2 - k % 3)} or pair.tgt == "other"
    # reversed, the model's source is the file's target: links turn round
    swapped = [Pair(p.tgt, p.src) for p in pairs]
    back = read_supervision(path, swapped, lines=None, total=len(pairs), reverse=True, units="words")
    assert back[4] == {(4 % 3, 0), (2 - 4 % 3, 1)}


def test_training_links_of_the_kept_pairs_are_token_links(tiny_config, tmp_path):
    config = config_from_dict({**tiny_config(tmp_path / "out"), "data": {"task": "dates", "dates": {
        "n_train": 30, "n_dev": 5, "n_test": 5, "languages": ["en"], "verbose_forms": False}}})
    corpora = load_corpora(config.data)
    codec = Codec.build(corpora.train, config.data)
    links = training_links(config.data, GuidedAlignmentConfig(supervision="task"), corpora, codec, keep=[3, 7])
    assert links is not None and len(links) == 2
    pair, gold = corpora.train[7], corpora.train_gold.possible[7]
    src_words = codec.src_tokenizer.word_ids(codec.src_tokens(pair.src))
    tgt_tokens = codec.tgt_tokens(pair.tgt)
    assert len(links[1]) > 0
    for t, s in links[1].tolist():  # char tokens: target token t writes character number t minus the spaces before it
        char = sum(1 for token in tgt_tokens[:t] if token != "▁")
        assert (src_words[s], char) in gold, (pair, t, s)
    assert {(src_words[s], sum(1 for token in tgt_tokens[:t] if token != "▁")) for t, s in links[1].tolist()} == gold


# ------------------------------------------------------------------------------ the loss


def test_the_target_spreads_each_tokens_links_evenly_and_leaves_unlinked_rows_zero():
    store = TokenLinks.of([np.array([[0, 0], [0, 2], [1, 1]]), np.array([[2, 1]])])
    target = alignment_target(store, torch.tensor([1, 0]), tgt_len=4, src_len=3)
    assert target.shape == (2, 4, 3)
    assert target[1, 0].tolist() == [0.5, 0.0, 0.5] and target[1, 1].tolist() == [0.0, 1.0, 0.0]
    assert target[0, 2].tolist() == [0.0, 1.0, 0.0] and target[0].sum() == 1.0 and target[1, 2:].sum() == 0


def test_the_loss_is_the_cross_entropy_of_the_chosen_heads_mean():
    attention = torch.softmax(torch.randn(2, 4, 3, 5, dtype=torch.float64), -1).requires_grad_()
    target = torch.zeros(2, 3, 5, dtype=torch.float64)
    target[0, 1, 2], target[1, 0, 4] = 1.0, 1.0
    loss = alignment_loss(attention, [1, 3], target)
    mean = (attention[:, 1] + attention[:, 3]) / 2
    expected = -(torch.log(mean[0, 1, 2]) + torch.log(mean[1, 0, 4]))
    assert torch.allclose(loss.double(), expected)
    loss.backward()
    assert attention.grad[:, [0, 2]].abs().sum() == 0 and attention.grad[:, [1, 3]].abs().sum() > 0


def test_self_labels_are_the_shifted_argmax_without_the_end_of_sentence():
    # one sentence: 3 source tokens + </s> (src_len 4, one padding column), target 2 tokens + </s>
    attention = torch.zeros(1, 2, 4, 5)
    attention[0, :, 1] = torch.tensor([0.1, 0.2, 0.6, 0.1, 0.0])  # row 1 reads token 0: source 2
    attention[0, :, 2] = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.0])  # row 2 reads token 1: mostly </s>, not a label
    attention[0, 0, 2] = torch.tensor([0.5, 0.0, 0.0, 0.5, 0.0])  # so the heads' mean picks source 0 (0.3)
    target = shift_att_target(attention, torch.tensor([4]), torch.tensor([3]))
    assert target[0, 0].tolist() == [0, 0, 1, 0, 0]
    assert target[0, 1].tolist() == [1, 0, 0, 0, 0]
    assert target[0, 2].sum() == 0 and target[0, 3].sum() == 0  # </s> and padding rows: no label


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_the_loss_returns_the_layers_heads_of_its_own_pass(family, tiny_config, tmp_path):
    model_cfg = ({"family": "transformer", "layers": 2, "d_model": 16, "heads": 4, "ff_size": 32, "dropout": 0.0}
                 if family == "transformer" else {"embed_size": 8, "hidden_size": 16, "dropout": 0.0})
    config = config_from_dict({**tiny_config(tmp_path), "model": model_cfg})
    torch.manual_seed(0)
    model = build_model(config.model, src_vocab_size=20, tgt_vocab_size=15).eval()
    src = torch.randint(4, 20, (3, 6))
    src[2, 4:] = 0
    batch = type("B", (), {"src": src, "src_lengths": torch.tensor([6, 6, 4]), "tgt_in": torch.randint(4, 15, (3, 5)),
                           "tgt_out": torch.randint(4, 15, (3, 5))})()
    layer = 1 if family == "transformer" else 0
    out = model.loss(batch, attention_layer=layer)
    heads = model.attention_heads(batch.src, batch.src_lengths, batch.tgt_in)[layer]  # (heads, batch, T, S)
    assert torch.allclose(out.attention, heads.transpose(0, 1), atol=1e-6)
    assert torch.allclose(out.total, model.loss(batch).total)
    with pytest.raises(ValueError, match="attention_layer"):
        model.loss(batch, attention_layer=5)


# ------------------------------------------------------------------------------ training


def _dates(tmp_path, name, **alignment):
    data = {"task": "dates", "dates": {"n_train": 1500, "n_dev": 60, "n_test": 30, "languages": ["en", "fr"],
                                       "verbose_forms": False}, "batch_tokens": 1200}
    config = {"data": data, "model": {"family": "transformer", "layers": 1, "d_model": 32, "heads": 2, "ff_size": 64,
                                      "dropout": 0.0, "attention_dropout": 0.0},
              "train": {"epochs": 8, "lr": 0.006, "betas": [0.9, 0.98], "threads": 1, "log_every": 20,
                        "schedule": {"name": "warmup", "warmup_steps": 50},
                        "early_stopping": {"metric": "loss", "patience": None},
                        **({"alignment": alignment} if alignment else {})},
              "output_dir": str(tmp_path / name)}
    return config_from_dict(config)


def _dev_aers(output_dir, step=None):
    """Every evaluation's dev AER, or the one at `step`."""
    lines = (output_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    rates = {r["step"]: r["aer"] for r in map(json.loads, lines) if r["kind"] == "dev"}
    return list(rates.values()) if step is None else rates[step]


def test_guided_heads_align_better_than_unguided_ones_and_heed_json_records_them(tmp_path):
    """The same run with and without the task's links on head 1: the guided head's dev AER ends
    far below the unguided model's default reading, and heed.json names the trained head."""
    plain = train(_dates(tmp_path, "plain"))
    guided = train(_dates(tmp_path, "guided", supervision="task", heads=[1], weight=0.5))
    assert _dev_aers(tmp_path / "guided")[-1] < 0.5 * _dev_aers(tmp_path / "plain")[-1]
    lines = (tmp_path / "guided" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    aligns = [r["align_loss"] for r in map(json.loads, lines) if r["kind"] == "train"]
    assert aligns[-1] < aligns[0] - 0.3
    meta = json.loads((guided.model_dir / "heed.json").read_text(encoding="utf-8"))
    reading = meta["alignment"]
    assert (reading["layer"], reading["head"], reading["method"], reading["trained"]) == (0, 1, "argmax", True)
    assert reading["dev_aer"] == pytest.approx(_dev_aers(tmp_path / "guided", step=meta["step"]), abs=1e-9)
    assert recorded_options(reading) == AlignOptions(layer=0, head=1, tgt_units="chars")
    assert plain.test is not None and guided.test is not None
    # heads that align worse than another reading (the unguided model's head 1, taken as trained) give way to it
    translator = Translator.load(plain.model_dir)
    corpora = load_corpora(_dates(tmp_path, "x").data)
    said = []
    worse = alignment_reading(translator.model, translator.codec, corpora.dev, corpora.dev_gold,
                              GuidedAlignment(0, [1], 0.05, 0, None, "chars"), device=torch.device("cpu"),
                              say=said.append)
    assert "trained" not in worse and worse["dev_aer"] < worse["default_dev_aer"] + 1e-9, said
    assert "heed align uses the sweep's best" in said[0], said


def test_self_supervision_starts_at_its_step(tmp_path):
    result = train(_dates(tmp_path, "self", supervision="self", start_step=30))
    lines = (tmp_path / "self" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    aligns = {r["step"]: r["align_loss"] for r in map(json.loads, lines) if r["kind"] == "train"}
    assert aligns[20] == 0.0 and aligns[40] > 0.0
    assert result.model_dir is not None


def test_an_rnn_trains_its_one_attention(tiny_config, tmp_path, gold_files):
    config = tiny_config(tmp_path / "rnn", epochs=1)
    config["data"] = {"task": "dates", "dates": {"n_train": 200, "n_dev": 20, "n_test": 10, "languages": ["en"],
                                                 "verbose_forms": False}, "batch_tokens": 300}
    config["train"]["alignment"] = {"supervision": "task"}
    result = train(config_from_dict(config))
    reading = json.loads((result.model_dir / "heed.json").read_text(encoding="utf-8"))["alignment"]
    assert (reading["layer"], reading["head"], reading["trained"]) == (0, 0, True)
    align = invoke("align", result.model_dir, "--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt",
                   "--tgt-units", "chars")
    assert align.exit_code == 0, align.output
    assert "the heads guided alignment trained" in align.stderr


def test_the_supervision_path_resolves_like_a_corpus_and_saves_relative(tmp_path, tiny_corpus, tiny_config):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.align").write_text("", encoding="utf-8")
    raw = tiny_config(tmp_path / "out")
    raw["train"]["alignment"] = {"supervision": "train.align"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({**raw, "data": {**raw["data"], "root": "data"}}),
                                       encoding="utf-8")
    config = load_config(tmp_path / "run.yaml", environment=False)
    assert config.train.alignment.supervision == tmp_path / "data" / "train.align"
    assert load_config(tmp_path / "run.yaml", ["train.alignment.supervision=self"],
                       environment=False).train.alignment.supervision == "self"
    save_config(config, tmp_path / "saved" / "config.yaml")
    text = (tmp_path / "saved" / "config.yaml").read_text(encoding="utf-8")
    assert "supervision: ../data/train.align" in text
    again = load_config(tmp_path / "saved" / "config.yaml", environment=False)
    assert again.train.alignment.supervision == tmp_path / "data" / "train.align"


def test_select_attention_averages_a_tuple_of_heads():
    stack = np.arange(2 * 3 * 1 * 2, dtype=float).reshape(2, 3, 1, 2)
    assert select_attention(stack, AlignOptions(layer=1, head=(0, 2)), 0).tolist() == [[8.0, 9.0]]
    with pytest.raises(ValueError, match="--head 3"):
        select_attention(stack, AlignOptions(layer=1, head=(0, 3)), 0)
    with pytest.raises(ValueError):
        AlignOptions(head=())


def test_corpora_without_a_split_keep_every_line():
    assert Corpora([], [], []).train_lines is None
