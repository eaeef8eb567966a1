"""Reading alignments off attention (argmax and shift-att, a layer or head, words or characters), the
baselines, symmetrization, AER by construction on the generated tasks, and `heed align --sweep`."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from cli_helpers import assert_user_error, invoke

from heed.data.dates import generate_dates, generate_dates_aligned
from heed.data.names import TEMPLATES, generate_names
from heed.data.pharaoh import gold_pharaoh, parse_gold_pharaoh, read_gold_alignments
from heed.data.units import char_token_index
from heed.explain.align import AerCounts, agreement, alignment_error_rate, hard_alignment
from heed.explain.align_methods import (
    WEIGHTS,
    AlignOptions,
    UnitMaps,
    diagonal_alignment,
    method_rows,
    parse_index,
    select_attention,
    symmetrize,
)

# ------------------------------------------------------------------------------ AER, by hand


def test_aer_on_a_sure_and_possible_example_by_hand():
    # S = {0-0, 1-2}, P = S + {1-1, 2?2}; A = {0-0, 1-1, 2-1}
    #   |A∩S| = 1, |A∩P| = 2 (0-0, 1-1), |A| = 3, |S| = 2  ->  AER = 1 - 3/5 = 0.4
    sure, possible = parse_gold_pharaoh("0-0 2-1 1?1 2p2")
    assert sure == {(0, 0), (2, 1)} and possible == {(0, 0), (2, 1), (1, 1), (2, 2)}
    hyp = {(0, 0), (1, 1), (1, 2)}
    assert alignment_error_rate([hyp], [sure], [possible]) == pytest.approx(1 - 3 / 5)
    counts = AerCounts()
    counts.add(hyp, sure, possible)
    assert counts.aer == pytest.approx(0.4)
    # The model's links equal to the gold's sure links: AER 0, whatever the possible ones.
    assert alignment_error_rate([sure], [sure], [possible]) == 0.0


def test_gold_pharaoh_writes_sure_and_possible_and_reads_back():
    line = gold_pharaoh({(0, 0), (2, 1)}, {(0, 0), (2, 1), (1, 1)})
    assert line == "0-0 1?1 2-1"
    assert parse_gold_pharaoh(line) == ({(0, 0), (2, 1)}, {(0, 0), (2, 1), (1, 1)})


# ------------------------------------------------------------------------------ the readings


def test_argmax_reads_the_predicting_row_and_shift_the_reading_row():
    # 3 target tokens + the </s> row, 3 source tokens; row k+1 looks one word further than row k.
    rows = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.1, 0.8, 0.1]])
    words = UnitMaps.build([0, 1, 2], [0, 1, 2], ["a", "b", "c"], "a b c", "words")
    assert hard_alignment(words.lift(method_rows(rows, "argmax"))) == [(0, 0), (1, 1), (2, 2)]
    assert hard_alignment(words.lift(method_rows(rows, "shift"))) == [(1, 0), (2, 1), (1, 2)]


def test_a_layer_a_head_and_their_means_are_picked_from_the_stack():
    stack = np.zeros((2, 3, 1, 2))  # (layers, heads, rows, src)
    stack[1, 2, 0] = [0.0, 1.0]
    stack[0, :, 0] = [1.0, 0.0]
    pick = lambda layer, head: select_attention(stack, AlignOptions(layer=layer, head=head), 1)[0].tolist()
    assert pick(1, 2) == [0.0, 1.0]
    assert pick(None, None) == pytest.approx([0.0, 1 / 3])  # the default layer (1), heads averaged
    assert pick("mean", 2) == [0.5, 0.5]
    with pytest.raises(ValueError, match=r"--layer 2 does not exist: the model has 2 decoder layers"):
        pick(2, None)
    with pytest.raises(ValueError, match=r"--head 3 does not exist: the model has 3 heads"):
        pick(0, 3)


def test_layer_and_head_values_parse_or_name_the_option():
    assert parse_index(None, "--layer") is None and parse_index("MEAN", "--layer") == "mean"
    assert parse_index("3", "--head") == 3
    for bad in ("-1", "last", "1.5"):
        with pytest.raises(ValueError, match="--head must be a 0-based index or 'mean'"):
            parse_index(bad, "--head")


def test_characters_take_the_row_of_the_token_that_writes_them():
    assert char_token_index(["▁ab", "c", "▁", "d"], "abc d") == [0, 0, 1, 3]
    with pytest.raises(ValueError, match="do not spell"):
        char_token_index(["<unk>", "c"], "xc")
    maps = UnitMaps.build([0, 1], [0, 0], ["ab", "c"], "abc", "chars")
    token_rows = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert hard_alignment(maps.lift(token_rows)) == [(0, 0), (0, 1), (1, 2)]


def test_the_diagonal_baseline():
    assert diagonal_alignment(4, 4) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    # j * 2 / 5 = 0, 0.4, 0.8, 1.2, 1.6 -> 0, 0, 1, 1, 2 -> kept inside the 2 words
    assert diagonal_alignment(2, 5) == [(0, 0), (0, 1), (1, 2), (1, 3), (1, 4)]
    assert diagonal_alignment(0, 3) == [] and diagonal_alignment(3, 0) == []


def test_symmetrization_intersects_unites_and_grows_along_the_diagonal():
    forward = {(0, 0), (1, 1), (2, 1)}
    backward = {(0, 0), (1, 1), (2, 2), (3, 3)}
    assert symmetrize(forward, backward, "intersect") == {(0, 0), (1, 1)}
    assert symmetrize(forward, backward, "union") == forward | backward
    # grow from the intersection, neighbours of (1, 1) in Moses's order: (2, 1) (source 2 still
    # unaligned) -> added; (2, 2) (target 2 unaligned) -> added; then (3, 3) beside (2, 2) -> added.
    assert symmetrize(forward, backward, "grow-diag-final") == {(0, 0), (1, 1), (2, 1), (2, 2), (3, 3)}
    # final-and: a directional link whose two words are both unaligned after growing
    assert symmetrize({(0, 0), (5, 5)}, {(0, 0)}, "grow-diag-final") == {(0, 0), (5, 5)}
    assert symmetrize({(0, 0), (1, 0)}, {(0, 0)}, "grow-diag-final") == {(0, 0), (1, 0)}  # grown: source 1 new


# ------------------------------------------------------------------------------ gold by construction


def test_dates_gold_links_each_field_word_to_the_digits_it_writes():
    splits, golds = generate_dates_aligned(n_train=3000, n_dev=0, n_test=0, seed=4)
    assert splits == generate_dates(n_train=3000, n_dev=0, n_test=0, seed=4)  # the gold changes no pair
    seen = set()
    for pair, (sure, possible) in zip(splits.train, golds.train):
        words = pair.src.split()
        writes = {j: {words[i] for i, jj in sure if jj == j} for j in range(10)}
        year, month, day = pair.tgt[:4], int(pair.tgt[5:7]), int(pair.tgt[8:])
        assert writes[4] == writes[7] == set() and sure <= possible  # a "-" is only possible
        if words[-1] == year:  # "... 14 juillet 1989": the year word writes the four year digits
            assert all(writes[j] == {year} for j in range(4))
            seen.add("year")
        if pair.src.lower().startswith("the ") and " of " in pair.src and words[-1].isdigit():
            # "the 14th of July 1989": the ordinal writes the day, the month name the month
            assert writes[8] == writes[9] == {words[1]} and words[1].lower().startswith(str(day))
            assert writes[5] == writes[6] == {words[3]}
            seen.add("ordinal")
        if "nineteen" in pair.src.lower().split()[-2:] and pair.tgt.startswith("19"):
            # "..., nineteen ninety-eight": each year word writes two digits
            at = {j: {i for i, jj in sure if jj == j} for j in range(4)}
            assert at[0] == at[1] == {len(words) - 2 - ("oh" in words)} and words[min(at[0])].lower() == "nineteen"
            assert at[2] | at[3] and not (at[2] | at[3]) & at[0]
            seen.add("year words")
        if len(words) == 1:  # "14/07/1989", "19890714": one word writes every digit
            assert all(writes[j] == {words[0]} for j in (0, 1, 2, 3, 5, 6, 8, 9))
            seen.add("one word")
        assert month >= 1  # a real date
    assert seen == {"year", "ordinal", "year words", "one word"}


def test_names_gold_is_the_templates_and_links_every_name_to_itself():
    for src, tgt, gold in TEMPLATES:
        sure, possible = parse_gold_pharaoh(gold)
        n_src, n_tgt = len(src.split()), len(tgt.split())
        assert all(i < n_src and j < n_tgt for i, j in possible | sure), src
        assert {j for _, j in possible | sure} == set(range(n_tgt)), tgt  # every target word has a link
    for example in generate_names(n_train=50, n_dev=0, n_test=0, seed=2).train:
        sure, _ = parse_gold_pharaoh(example.gold)
        src, tgt = example.pair.src.split(), example.pair.tgt.split()
        for name in example.names:
            assert (src.index(name), tgt.index(name)) in sure


def test_heed_data_task_writes_the_splits_and_their_gold(tmp_path):
    result = invoke("data", "task", "dates", tmp_path / "dates")
    assert result.exit_code == 0, result.output
    assert "--tgt-units chars --gold" in result.stdout
    src = (tmp_path / "dates" / "test.src").read_text(encoding="utf-8").splitlines()
    tgt = (tmp_path / "dates" / "test.tgt").read_text(encoding="utf-8").splitlines()
    sure, _possible = read_gold_alignments(tmp_path / "dates" / "test.align")
    assert len(src) == len(tgt) == len(sure) == 1000
    splits, golds = generate_dates_aligned(n_train=20000, n_dev=500, n_test=1000)
    assert src == [p.src for p in splits.test] and [set(s) for s, _ in golds.test] == sure
    result = invoke("data", "task", "names", tmp_path / "names")
    assert result.exit_code == 0 and (tmp_path / "names" / "dev.align").read_text().splitlines()[0]
    assert_user_error(invoke("data", "task", "poems", tmp_path / "x"), "TASK must be dates or names")


# ------------------------------------------------------------------------------ on trained models


def test_align_in_characters_scores_against_the_gold_beside_the_diagonal(trained_run, gold_files):
    args = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars",
            "--gold", gold_files / "test.align"]
    result = invoke("align", trained_run, *args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 20
    for line in lines:  # one link for each of the 10 characters of YYYY-MM-DD
        assert sorted(j for _, j in parse_gold_pharaoh(line)[1]) == list(range(10))
    sure, possible = read_gold_alignments(gold_files / "test.align")
    hyp = [parse_gold_pharaoh(line)[1] for line in lines]
    expected = alignment_error_rate(hyp, sure, possible)
    assert f"AER = {expected:.4f}" in result.stderr
    diagonal = [set(diagonal_alignment(len(s.split()), 10))
                for s in (gold_files / "test.src").read_text(encoding="utf-8").splitlines()]
    assert f"AER = {alignment_error_rate(diagonal, sure, possible):.4f}   the diagonal baseline" in result.stderr
    shifted = invoke("align", trained_run, *args, "--method", "shift")
    assert shifted.exit_code == 0 and "shift-att, the attention" in shifted.stderr


def test_sweep_scores_every_layer_and_head_and_the_default_reading_agrees(transformer_run, gold_files, tmp_path):
    from heed.api import Translator

    translator = Translator.load(transformer_run)
    src = (gold_files / "test.src").read_text(encoding="utf-8").splitlines()
    tgt = (gold_files / "test.tgt").read_text(encoding="utf-8").splitlines()
    sure, possible = read_gold_alignments(gold_files / "test.align")
    result = translator.align_sweep(src, tgt, sure, possible, tgt_units="chars")
    layers, heads = translator.model.head_grid
    assert result.grid("argmax").shape == (layers + 1, heads + 1) and result.sentences == 20
    # a Transformer gives value norms and its contributions through the layers too
    assert result.weights == ("attention", "value_norm", "rollout", "alti")
    assert np.isnan(result.grid("argmax", "alti")[:, :heads]).all()  # rollout and ALTI+ mix the heads
    assert not np.isnan(result.grid("argmax", "alti")[:, heads]).any()
    for options in (AlignOptions(tgt_units="chars"), AlignOptions(method="shift", layer=0, head=1, tgt_units="chars"),
                    AlignOptions(layer="mean", tgt_units="chars"),
                    AlignOptions(head=1, tgt_units="chars", weights="value_norm"),
                    AlignOptions(method="shift", layer="mean", tgt_units="chars", weights="value_norm"),
                    AlignOptions(tgt_units="chars", weights="alti"),
                    AlignOptions(method="shift", layer=0, tgt_units="chars", weights="rollout"),
                    AlignOptions(layer="mean", tgt_units="chars", weights="alti")):
        links = [set(a.links) for a in translator.align(src, tgt, options=options)]
        assert result.aer(options) == pytest.approx(alignment_error_rate(links, sure, possible))
    # the default reading is what align() gave before there were options: the reported attention
    plain = [set(a.links) for a in translator.align(src, tgt, options=AlignOptions(tgt_units="chars"))]
    via_heads = [set(a.links) for a in translator.align(src, tgt, options=AlignOptions(layer=layers - 1, head="mean",
                                                                                       tgt_units="chars"))]
    assert plain == via_heads
    plot = tmp_path / "aer.png"
    out = invoke("align", transformer_run, "--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt",
                 "--tgt-units", "chars", "--gold", gold_files / "test.align", "--sweep", "--plot", plot)
    assert out.exit_code == 0, out.output
    assert "AER % by decoder layer x head (shift-att" in out.stdout and "diagonal baseline: AER = " in out.stdout
    assert "AER % by decoder layer x head (argmax, value norms" in out.stdout
    assert f"best: AER = {result.best()[1]:.4f}" in out.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_align_options_a_model_lacks_are_one_line(transformer_run, trained_run, gold_files, tmp_path):
    files = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt"]
    assert_user_error(invoke("align", transformer_run, *files, "--layer", "9"), "--layer 9 does not exist")
    assert_user_error(invoke("align", transformer_run, *files, "--head", "99"), "--head 99 does not exist")
    assert_user_error(invoke("align", trained_run, *files, "--head", "1"), "--head 1 does not exist", "1 head")
    assert_user_error(invoke("align", trained_run, *files, "--layer", "top"), "--layer must be a 0-based index")
    assert_user_error(invoke("align", trained_run, *files, "--sweep"), "--sweep", "--gold")
    gold = gold_files / "test.align"
    # the dates gold counts characters: read as words, its links fall outside the one-word targets
    assert_user_error(invoke("align", trained_run, *files, "--gold", gold), "test.align:1:", "outside the sentence pair",
                      "--tgt-units chars")
    assert_user_error(invoke("align", trained_run, *files, "--tgt-units", "chars", "--gold", gold, "--sweep",
                             "--plot", tmp_path / "aer.gif"), "aer.gif", ".png")


# ------------------------------------------------------------------------------ dev AER in training


def test_training_reports_the_dev_aer_of_a_generated_task_and_of_data_dev_align(tmp_path, tiny_config, tiny_corpus):
    from heed.config import config_from_dict
    from heed.train import train

    def dev_records(output):
        lines = (output / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        return [r for r in map(json.loads, lines) if r["kind"] == "dev"]

    raw = tiny_config(tmp_path / "task", epochs=1)
    raw["data"] = {**{k: v for k, v in raw["data"].items() if k not in ("train", "dev", "test")}, "task": "dates",
                   "dates": {"n_train": 200, "n_dev": 20, "n_test": 20, "seed": 7, "languages": ["en", "fr"],
                             "verbose_forms": False}}
    train(config_from_dict(raw))
    (record,) = dev_records(tmp_path / "task")
    assert 0.0 <= record["aer"] <= 1.0
    # The same dev pairs and gold, from files: the same AER (the char units of the dates task aside,
    # a word-level gold of one-word targets is a link per pair). Reversed, the file is read transposed.
    pairs = [line.split("\t") for line in tiny_corpus["dev"].read_text(encoding="utf-8").splitlines()]
    gold = tmp_path / "dev.align"
    gold.write_text("".join(f"{len(s.split()) - 1}-0\n" for s, _ in pairs), encoding="utf-8")  # the year word
    raw = tiny_config(tmp_path / "files", epochs=1)
    raw["data"]["dev"] = {"tsv": str(tiny_corpus["dev"]), "align": str(gold)}
    train(config_from_dict(raw))
    (record,) = dev_records(tmp_path / "files")
    assert 0.0 <= record["aer"] <= 1.0
    raw = tiny_config(tmp_path / "reversed", epochs=1)
    raw["data"].update(reverse=True, dev={"tsv": str(tiny_corpus["dev"]), "align": str(gold)})
    train(config_from_dict(raw))
    (record,) = dev_records(tmp_path / "reversed")
    assert 0.0 <= record["aer"] <= 1.0


def test_bad_dev_gold_is_one_line_naming_the_file_or_field(tmp_path, tiny_config, tiny_corpus, heed_cli):
    import yaml

    n = len(tiny_corpus["dev"].read_text(encoding="utf-8").splitlines())
    outside = tmp_path / "outside.align"
    outside.write_text("0-0\n" + "0-9\n" + "0-0\n" * (n - 2), encoding="utf-8")
    raw = tiny_config(tmp_path / "run", epochs=1)
    raw["data"]["dev"] = {"tsv": str(tiny_corpus["dev"]), "align": str(outside)}
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert_user_error(heed_cli("train", config), "outside.align:2:", "link 0-9 is outside the sentence pair")
    raw["data"]["test"] = {"tsv": str(tiny_corpus["test"]), "align": str(outside)}
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert_user_error(heed_cli("train", config), "test.align", "dev corpus only")


def test_a_reference_file_is_scored_beside_the_model_and_checked_before_the_work(trained_run, gold_files, tmp_path):
    args = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars",
            "--gold", gold_files / "test.align"]
    hyp = tmp_path / "hyp.align"
    first = invoke("align", trained_run, *args, "-o", hyp)
    assert first.exit_code == 0, first.output
    model_aer = re.search(r"AER = (\d\.\d{4})   \(20 sentences", first.stdout).group(1)
    again = invoke("align", trained_run, *args, "--reference", hyp)  # the model's own links as the reference
    assert again.exit_code == 0, again.output
    assert f"AER = {model_aer}   {hyp}" in again.stderr
    short = tmp_path / "short.align"
    short.write_text("".join(hyp.read_text(encoding="utf-8").splitlines(keepends=True)[:5]), encoding="utf-8")
    out = tmp_path / "kept.align"
    out.write_text("keep me\n", encoding="utf-8")
    assert_user_error(invoke("align", trained_run, *args, "--reference", short, "-o", out), "short.align",
                      "5 alignment lines", "20 sentences")
    assert out.read_text(encoding="utf-8") == "keep me\n"  # refused before anything was written


def test_without_a_gold_a_reference_gives_precision_recall_and_f1(trained_run, gold_files, tmp_path):
    args = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars"]
    hyp = tmp_path / "hyp.align"
    assert invoke("align", trained_run, *args, "-o", hyp).exit_code == 0
    same = invoke("align", trained_run, *args, "--reference", hyp)  # the model's own links: full agreement
    assert same.exit_code == 0, same.output
    assert f"against {hyp}: precision 1.0000  recall 1.0000  F1 1.0000" in same.stderr
    other = tmp_path / "other.align"  # every line but its first link: recall drops, precision does not
    other.write_text("".join(" ".join(line.split()[1:]) + "\n" for line in hyp.read_text().splitlines()))
    links = sum(len(line.split()) for line in hyp.read_text().splitlines())
    found = invoke("align", trained_run, *args, "--reference", other, "-o", tmp_path / "again.align")
    assert f"precision {(links - 20) / links:.4f}  recall 1.0000" in found.stdout, found.output  # -o: scores on stdout


def test_agreement_by_hand():
    found = agreement([{(0, 0), (1, 1)}, {(0, 1)}], [{(0, 0)}, {(0, 1), (1, 0)}])
    assert (found.precision, found.recall, found.links, found.reference) == (2 / 3, 2 / 3, 3, 3)
    assert found.f1 == pytest.approx(2 / 3)
    assert agreement([set()], [set()]).f1 == 0.0


def test_training_logs_the_entropy_of_every_heads_attention(transformer_run, tiny_corpus):
    """metrics.jsonl's attention_entropy [layer][head] is the mean entropy of each head's attention
    over the source across the dev targets' tokens: recomputed here from the saved model's maps."""
    from heed.api import Translator

    records = [json.loads(line) for line in (transformer_run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    dev = [r for r in records if r["kind"] == "dev"]
    assert dev and all(np.shape(r["attention_entropy"]) == (2, 2) for r in dev)
    best = [r for r in dev if r["best"]][-1]
    translator = Translator.load(transformer_run, device="cpu")
    pairs = [line.split("\t") for line in tiny_corpus["dev"].read_text(encoding="utf-8").splitlines()]
    maps = translator.attention_layers([s for s, _ in pairs], [t for _, t in pairs])
    weights = [m.cross.astype(np.float64) for m in maps]  # (layers, heads, T+1, S+1) each
    entropy = sum((-(w * np.log(np.where(w > 0, w, 1))).sum(-1)).sum(-1) for w in weights)
    tokens = sum(w.shape[2] for w in weights)
    np.testing.assert_allclose(best["attention_entropy"], entropy / tokens, rtol=1e-4)
    longest = max(len(m.src_tokens) + 1 for m in maps)
    assert 0 < np.min(best["attention_entropy"]) and np.max(best["attention_entropy"]) <= np.log(longest)


# ------------------------------------------------------------------------------ value norms


def test_value_norms_are_the_norms_of_what_each_source_position_adds_through_each_head(transformer_run):
    """Kobayashi et al. 2020: a cross-attention's output is sum_h sum_j weight_ij^h f_h(x_j) + b_o.
    Rebuilt from head_outputs and the weights, it equals the layer's own output; value_norms are the
    norms of f_h(x_j), one per (layer, head, sentence, source position)."""
    import torch

    from heed.api import Translator
    from heed.nn.protocol import ValueNormModel

    model = Translator.load(transformer_run).model
    assert isinstance(model, ValueNormModel)
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    lengths = torch.tensor([4, 3])
    with torch.no_grad():
        enc = model.encode(src, lengths)
        attention = model.decoder.layers[0].cross_attn
        k, v = enc.memory[0]
        query = torch.randn(2, attention.heads, 3, attention.d_k, generator=torch.Generator().manual_seed(0))
        mask = enc.mask[:, None, None, :]
        attended = attention.attend(query, k, v, mask, need_weights=True)
        contributions = attention.head_outputs(v)  # (batch, heads, src_len, d_model)
        rebuilt = torch.einsum("bhij,bhjd->bid", attended.weights, contributions) + attention.out_proj.bias
        torch.testing.assert_close(rebuilt, attended.context, rtol=1e-5, atol=1e-5)
        norms = model.value_norms(src, lengths)
    layers, heads = model.head_grid
    assert norms.shape == (layers, heads, 2, 4)
    torch.testing.assert_close(norms[0], contributions.norm(dim=-1).transpose(0, 1))


def test_value_weighted_heads_are_the_heads_times_the_value_norms_from_one_pass(transformer_run):
    import torch

    from heed.api import Translator

    model = Translator.load(transformer_run).model
    src, lengths = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]]), torch.tensor([4, 3])
    tgt_in = torch.tensor([[1, 5, 6], [1, 7, 0]])
    with torch.no_grad():
        fused = model.value_weighted_heads(src, lengths, tgt_in)
        apart = model.attention_heads(src, lengths, tgt_in) * model.value_norms(src, lengths)[:, :, :, None, :]
    torch.testing.assert_close(fused, apart)


def test_align_weighs_attention_by_value_norms_on_a_transformer_and_refuses_it_elsewhere(
        transformer_run, trained_run, gold_files):
    from heed.api import Translator
    from heed.explain.align_methods import AlignOptions

    translator = Translator.load(transformer_run)
    src = (gold_files / "test.src").read_text(encoding="utf-8").splitlines()
    tgt = (gold_files / "test.tgt").read_text(encoding="utf-8").splitlines()
    plain = translator.align(src, tgt, options=AlignOptions(tgt_units="chars", head=0))
    weighed = translator.align(src, tgt, options=AlignOptions(tgt_units="chars", head=0, weights="value_norm"))
    # one head: each row is scaled column by column, so the links move where the norms differ
    assert [a.attention.shape for a in weighed] == [a.attention.shape for a in plain]
    assert any((a.attention != b.attention).any() for a, b in zip(plain, weighed))
    files = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars",
             "--gold", gold_files / "test.align"]
    out = invoke("align", transformer_run, *files, "--weights", "value-norm")
    assert out.exit_code == 0, out.output
    assert "weighed by value norms" in out.output and "AER = " in out.output
    assert_user_error(invoke("align", trained_run, *files, "--weights", "value-norm"), "value norms",
                      "Transformer model directory")


@pytest.mark.parametrize("weights, name", [("rollout", "rollout"), ("alti", "ALTI+")])
def test_align_reads_contributions_through_the_layers(transformer_run, trained_run, gold_files, weights, name):
    """--weights rollout / alti: the links are the argmax of each row's source contributions up to the
    chosen layer (heed.explain.contributions), scored like any reading; a head is refused (they mix the
    heads), and so is a model whose blocks cannot be read (an RNN)."""
    from heed.api import Translator
    from heed.data.batching import collate, specials_of
    from heed.explain.contributions import contributions

    files = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars",
             "--gold", gold_files / "test.align"]
    out = invoke("align", transformer_run, *files, "--weights", weights, "--layer", "0")
    assert out.exit_code == 0, out.output
    assert f"argmax, {name} up to decoder layer 0" in out.stderr and "AER = " in out.stderr
    # the first pair's links by hand: each character's row of layer 0's normalised source share
    translator = Translator.load(transformer_run)
    src = (gold_files / "test.src").read_text(encoding="utf-8").splitlines()[0]
    tgt = (gold_files / "test.tgt").read_text(encoding="utf-8").splitlines()[0]
    s_ids, t_ids = translator.codec.src_ids(translator.codec.src_tokens(src)), translator.codec.tgt_ids(
        translator.codec.tgt_tokens(tgt), [])
    batch = collate([(s_ids, t_ids)], [0], specials_of(translator.model))
    with torch.no_grad():
        share = contributions(translator.model, batch.src, batch.src_lengths, batch.tgt_in, reading=weights)
    rows = share.alignment()[0, 0, :len(t_ids), :len(s_ids)].numpy()  # (chars, src tokens), the row predicting each
    words = translator.codec.src_tokenizer.word_ids(translator.codec.src_tokens(src))
    expected = {(int(np.argmax([rows[j][[k for k, w in enumerate(words) if w == i]].sum()
                                for i in range(len(src.split()))])), j) for j in range(len(tgt))}
    assert set(parse_gold_pharaoh(out.stdout.splitlines()[0])[1]) == expected
    assert_user_error(invoke("align", transformer_run, *files, "--weights", weights, "--head", "0"), name,
                      "choose a layer, not a head")
    assert_user_error(invoke("align", trained_run, *files, "--weights", weights), name, "Transformer model directory")


def test_training_records_the_best_reading_on_the_dev_gold_and_heed_align_uses_it(tmp_path, tiny_config):
    """A Transformer trained on a task with gold: heed.json records the sweep's best reading on the
    dev pairs, beside the default reading's dev AER; `heed align` without reading flags uses it and
    says so, and a flag reads the model another way."""
    from heed.api import Translator
    from heed.checkpoint import read_meta
    from heed.config import config_from_dict
    from heed.explain.align_methods import AlignOptions
    from heed.train import train

    raw = tiny_config(tmp_path / "run", epochs=2)
    raw["data"] = {**{k: v for k, v in raw["data"].items() if k not in ("train", "dev", "test")}, "task": "dates",
                   "dates": {"n_train": 200, "n_dev": 20, "n_test": 20, "seed": 7, "languages": ["en", "fr"],
                             "verbose_forms": False}}
    raw["model"] = {"family": "transformer", "layers": 2, "d_model": 16, "heads": 2, "ff_size": 32, "dropout": 0.0,
                    "attention_dropout": 0.0}
    train(config_from_dict(raw))
    reading = read_meta(tmp_path / "run" / "model")["alignment"]
    assert reading["units"] == "chars" and 0.0 <= reading["dev_aer"] <= reading["default_dev_aer"] <= 1.0
    assert reading["weights"] in WEIGHTS and reading["method"] in ("argmax", "shift")
    translator = Translator.load(tmp_path / "run")
    assert translator.recorded_reading == reading
    src, tgt = ["3 March 1998", "le 4 mai 2001"], ["1998-03-03", "2001-05-04"]
    (tmp_path / "s").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "t").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    files = ["--src", tmp_path / "s", "--tgt", tmp_path / "t", "--tgt-units", "chars"]
    chosen = AlignOptions(method=reading["method"], layer=reading["layer"], head=reading["head"],
                          weights=reading["weights"], tgt_units="chars", join=reading["join"],
                          null_threshold=reading["null_threshold"])
    want = "".join(" ".join(f"{i}-{j}" for i, j in sorted(a.links)) + "\n" for a in translator.align(src, tgt, options=chosen))
    out = invoke("align", tmp_path / "run", *files)
    assert out.exit_code == 0, out.output
    assert out.stdout == want and "the best on the dev gold at training" in out.stderr
    told = invoke("align", tmp_path / "run", *files, "--method", "argmax")
    assert told.exit_code == 0 and "the best on the dev gold" not in told.stderr


def test_without_a_recorded_reading_heed_align_reads_the_rule_measured_for_the_model_s_kind(transformer_run, trained_run,
                                                                                           tmp_path, gold_files):
    """docs/look-inside.md, section 8: value norms of the second-to-last layer for a pre-norm
    Transformer (the mean of all layers for a post-norm one), argmax of the attention for an RNN;
    heed align uses it when training recorded no reading, and says so; a flag reads another way."""
    import shutil

    from model_files import rehash

    from heed.api import Translator
    from heed.checkpoint import read_meta

    model = tmp_path / "model"
    shutil.copytree(transformer_run / "model", model)
    meta_path = model / "heed.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta.pop("alignment", None)
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    rehash(model)
    assert "alignment" not in read_meta(model)
    translator = Translator.load(model)
    layers = translator.model.layers
    chosen, why = translator.default_reading("chars")
    assert chosen == AlignOptions(method="argmax", layer=max(layers - 2, 0), weights="value_norm", tgt_units="chars")
    assert "a pre-norm Transformer" in why
    files = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars"]
    out = invoke("align", model, *files)
    assert out.exit_code == 0, out.output
    assert "the rule measured for a pre-norm Transformer" in out.stderr and "weighed by value norms" in out.stderr
    src = (gold_files / "test.src").read_text(encoding="utf-8").splitlines()
    tgt = (gold_files / "test.tgt").read_text(encoding="utf-8").splitlines()
    expected = [a.pharaoh() for a in translator.align(src, tgt, options=chosen)]
    assert out.stdout.splitlines() == expected
    flagged = invoke("align", model, *files, "--layer", "mean")
    assert flagged.exit_code == 0 and "rule measured" not in flagged.stderr
    rnn = Translator.load(trained_run)  # the tiny Luong RNN, without input feeding: its attention as it is
    assert rnn.model.measured_reading == ("an RNN without input feeding", "argmax", None, "attention")
    assert rnn.recorded_reading is None  # its corpus has no dev gold
    assert rnn.default_reading() == (AlignOptions(), ("the rule measured for an RNN without input feeding "
                                                     "(docs/look-inside.md, section 8)"))


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "measured"])
def test_align_beside_an_int8_export_reads_it_plainly_where_it_cannot_give_the_models_default_reading(
        transformer_run, gold_files, tmp_path, recorded):
    """docs/guide/looking-inside.md's `heed align runs/demo ... --beside runs/demo-int8` after `make demo` (issue 56): the
    model's default reading (the heads training recorded, layer 0 head 0; or the measured rule's
    value norms) is one an export cannot give: the export is read by the attention it reports, said
    in one line, instead of the whole command failing. A reading flag the export cannot follow is
    still refused, naming --beside."""
    import shutil

    from model_files import rehash

    from heed.export.onnx import export_model

    model = tmp_path / "model"
    shutil.copytree(transformer_run / "model", model)
    meta = json.loads((model / "heed.json").read_text(encoding="utf-8"))
    meta.pop("alignment", None)
    if recorded:
        meta["alignment"] = {"method": "argmax", "layer": 0, "head": 0, "weights": "attention", "units": "words",
                             "trained": True}
    (model / "heed.json").write_text(json.dumps(meta), encoding="utf-8")
    rehash(model)
    int8 = export_model(model, tmp_path / "int8", int8=True)
    files = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars",
             "--gold", gold_files / "test.align"]
    out = invoke("align", model, *files, "--beside", int8)
    assert out.exit_code == 0, out.output
    notes = [line for line in out.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and f"--beside {int8}" in notes[0] and "the attention it reports" in notes[0], out.stderr
    assert ("layer 0, head 0" if recorded else "weighed by value norms") in notes[0]
    alone = invoke("align", model, *files)
    assert out.stdout.splitlines()[: 20] == alone.stdout.splitlines()[: 20]  # the model's own links are unchanged
    assert f"beside {int8}:" in out.stderr and f"{int8} (--beside)" in out.stderr  # the links hold stdout
    flagged = invoke("align", model, *files, "--layer", "0", "--head", "0", "--beside", int8)
    assert_user_error(flagged, f"--beside {int8}", "PyTorch model directory")


def test_align_help_and_sweep_name_the_reading_align_really_uses_by_default(transformer_run, gold_files):
    """Issue 56: --help said the last layer's heads' mean, and --sweep labelled that "default", while
    heed align reads Translator.default_reading (recorded, else the measured rule: value norms)."""
    from heed.api import Translator

    shown = " ".join(invoke("align", "--help").stdout.split()).replace("- ", "-")  # words broken at a hyphen
    assert "aligns by default with the cross-attention of its last decoder layer" not in shown
    assert "MeasuredReading" in shown and "value-norm-weighted attention" in shown
    assert "Default: the model's default reading" in shown
    reading, why = Translator.load(transformer_run).default_reading("chars")
    assert reading.weights == "value_norm"  # no dev gold, so no recorded reading: the measured rule
    files = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars",
             "--gold", gold_files / "test.align"]
    plain = invoke("align", transformer_run, *files, "-o", "/dev/null")
    assert plain.exit_code == 0, plain.output
    aer = next(line for line in plain.stdout.splitlines() if line.startswith("AER = ")).split()[2]
    swept = invoke("align", transformer_run, *files, "--sweep", "--plot", gold_files.parent / "sweep-default.png")
    assert swept.exit_code == 0, swept.output
    default = next(line for line in swept.stdout.splitlines() if line.startswith("default: "))
    assert default.startswith(f"default: AER = {aer} "), (default, aer)
    assert reading.describe() in default and why in default


def test_sweep_against_a_reference_gives_agreement_f1_by_layer_and_head(transformer_run, gold_files, tmp_path):
    """Issue 56: --sweep needed --gold; with --reference (eflomal's, say) it gives each reading's
    agreement F1 with those links. The model's own links of one head as the reference: that head
    agrees 100%, and the default reading's F1 is the one `heed align --reference` prints."""
    files = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars"]
    reference = tmp_path / "head.align"
    own = invoke("align", transformer_run, *files, "--layer", "0", "--head", "1", "--weights", "attention",
                 "-o", reference)
    assert own.exit_code == 0, own.output
    plot = tmp_path / "f1.png"
    swept = invoke("align", transformer_run, *files, "--reference", reference, "--sweep", "--plot", plot)
    assert swept.exit_code == 0, swept.output
    assert f"F1 % by decoder layer x head (argmax; 20 sentences, against {reference})" in swept.stdout
    assert "best: F1 = 1.0000" in swept.stdout and "AER" not in swept.stdout
    table = swept.stdout[swept.stdout.index("F1 % by decoder layer x head (argmax;"):]
    row = next(line for line in table.splitlines() if line.strip("│┃ ").startswith("0 "))
    assert row.replace("│", " ").split()[2] == "100.0"  # layer 0: head 0, head 1, ...
    plain = invoke("align", transformer_run, *files, "--reference", reference, "-o", tmp_path / "default.align")
    f1 = re.search(r"F1 (\d\.\d{4})", plain.stdout).group(1)
    assert re.search(rf"^default: F1 = {f1} ", swept.stdout, re.MULTILINE), (f1, swept.stdout)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_user_error(invoke("align", transformer_run, *files, "--sweep"), "--gold FILE", "--reference FILE")


def test_the_sweep_heatmap_prints_one_decimal_and_has_a_colour_bar():
    from heed.viz import aer_grid

    grids = {"argmax": np.array([[0.1234, 0.5], [0.25, np.nan]]), "shift-att": np.array([[0.3, 0.2], [0.1, 0.4]])}
    figure = aer_grid(grids, diagonal=0.6)
    cells = {t.get_text() for ax in figure.axes[:2] for t in ax.texts}
    assert {"12.3", "50.0", "25.0", "30.0"} <= cells
    assert len(figure.axes) == 3 and figure.axes[2].get_ylabel().startswith("AER %")  # the colour bar's axes
    f1 = aer_grid(grids, title="F1", lower_is_better=False)
    assert "best 50.0" in f1.axes[0].get_title() and f1.axes[2].get_ylabel().startswith("F1 %")


def test_align_beside_an_rnns_export_reads_its_one_attention_without_a_note(trained_run, gold_files, tmp_path):
    """An RNN's recorded layer 0, head 0 is its one attention, which its export reports too: no note."""
    import shutil

    from model_files import rehash

    from heed.export.onnx import export_model

    model = tmp_path / "model"
    shutil.copytree(trained_run / "model", model)
    meta = json.loads((model / "heed.json").read_text(encoding="utf-8"))
    meta["alignment"] = {"method": "argmax", "layer": 0, "head": 0, "weights": "attention", "units": "words",
                         "trained": True}
    (model / "heed.json").write_text(json.dumps(meta), encoding="utf-8")
    rehash(model)
    int8 = export_model(model, tmp_path / "int8", int8=True)
    files = ["--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt", "--tgt-units", "chars"]
    out = invoke("align", model, *files, "--beside", int8)
    assert out.exit_code == 0, out.output
    assert "note:" not in out.stderr and f"beside {int8}:" in out.stderr
