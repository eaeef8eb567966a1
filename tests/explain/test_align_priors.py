"""Statistical priors at run time (heed.explain.priors): learned on a corpus by `heed data align
--priors-out`, recorded in a model directory by `heed data priors`, used by `heed align --aligner
priors|both` on new pairs alone; and the bad inputs, each one line, exit 2, nothing written."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy
import pytest
from cli_helpers import assert_user_error, invoke
from explain.test_external_aligner import _corpus

from heed.data.corpus import Pair
from heed.explain.align import AerCounts
from heed.explain.external import eflomal_directions, eflomal_links
from heed.explain.priors import join_links, priors_links, priors_text, read_priors

pytest.importorskip("eflomal")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "studies"))  # guide_rule: measured, not in heed


def _priors_file(path: Path, pairs: list[Pair], units: str = "words") -> Path:
    forward, backward = eflomal_directions(pairs)
    path.write_text(priors_text(pairs, forward, backward, units=units), encoding="utf-8")  # type: ignore[arg-type]
    return path


def _aer(links: list[set], golds: list[set]) -> float:
    counts = AerCounts()
    for found, gold in zip(links, golds):
        counts.add(found, gold, gold)
    return counts.aer


def test_priors_align_a_few_new_pairs_better_than_eflomal_on_them_alone(tmp_path):
    corpus, _ = _corpus(400, seed=3)
    new, golds = _corpus(12, seed=4)
    priors = read_priors(_priors_file(tmp_path / "p.eflomal", corpus))
    with_priors = _aer(priors_links(new, priors), golds)
    alone = _aer(eflomal_links(new), golds)
    assert with_priors < 0.1, with_priors
    assert with_priors < alone, (with_priors, alone)


def test_priors_links_join_directions_given_without_running_eflomal_again(tmp_path):
    priors = read_priors(_priors_file(tmp_path / "p.eflomal", _corpus(50, seed=3)[0]))
    pairs = [Pair("a b c", "x y z")]
    directions = ([{(0, 0), (1, 1)}], [{(0, 0), (2, 2)}])  # no eflomal run gives these on words it never saw
    assert priors_links(pairs, priors, how="intersect", directions=directions) == [{(0, 0)}]
    assert priors_links(pairs, priors, how="union", directions=directions) == [{(0, 0), (1, 1), (2, 2)}]


def test_join_is_the_intersection_or_the_union():
    model, theirs = [{(0, 0), (1, 1)}], [{(1, 1), (2, 2)}]
    assert join_links(model, theirs, "intersect") == [{(1, 1)}]
    assert join_links(model, theirs, "union") == [{(0, 0), (1, 1), (2, 2)}]
    for reads_attention in ("product", "arbitrate"):
        with pytest.raises(ValueError, match="aligner_links"):
            join_links(model, theirs, reads_attention)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 model alignments against 2"):
        join_links(model, theirs * 2, "union")


def test_fill_keeps_the_priors_links_and_takes_the_models_only_for_words_they_leave_unlinked():
    model = [{(0, 0), (0, 1), (2, 3)}]  # target 1: the priors link it elsewhere; target 3: they do not link it
    theirs = [{(0, 0), (1, 1), (1, 2)}]
    assert join_links(model, theirs, "fill") == [{(0, 0), (1, 1), (1, 2), (2, 3)}]


def test_grow_diag_final_grows_the_agreed_links_by_their_neighbours_the_priors_first():
    model, theirs = [{(0, 0), (1, 1), (4, 4)}], [{(0, 0), (1, 2), (2, 2)}]
    # from the agreed (0, 0): (1, 1) beside it, then (1, 2) and (2, 2) beside that; (4, 4) is no
    # neighbour but links two unlinked words (final)
    assert join_links(model, theirs, "grow-diag-final") == [{(0, 0), (1, 1), (1, 2), (2, 2), (4, 4)}]
    # final: unlinked source word 3 is the model's to target 2 and the priors' to target 1; the priors' first
    assert join_links([{(0, 0), (3, 2)}], [{(0, 0), (3, 1)}], "grow-diag-final") == [{(0, 0), (3, 1)}]


def _rows(shares: dict[tuple[int, int], float], shape: tuple[int, int]):  # type: ignore[no-untyped-def]
    """A model's attention (target units, source words) with these cells, every row summing to 1."""
    import numpy as np

    attention = np.zeros(shape)
    for (i, j), share in shares.items():
        attention[j, i] = share
    attention[:, -1] += 1 - attention.sum(axis=1)  # the rest of each row on the last source word
    return attention


def test_arbitrate_keeps_a_disputed_link_only_where_the_model_gives_it_its_share():
    from heed.explain.align_methods import symmetrize
    from heed.explain.priors import arbitrate_links

    # the directions agree on (0, 0) and dispute (1, 1), (1, 2) and (2, 1): grow-diag-final adds
    # (1, 1) beside (0, 0), then (1, 2) and (2, 1) beside that
    forward, backward = {(0, 0), (1, 1)}, {(0, 0), (1, 2), (2, 1)}
    assert symmetrize(forward, backward, "grow-diag-final") == {(0, 0), (1, 1), (1, 2), (2, 1)}
    # the model: target 1 reads source 2 (0.8) and source 1 hardly (0.01); target 2 reads source 1 (0.6)
    attention = _rows({(1, 1): 0.01, (2, 1): 0.8, (1, 2): 0.6}, (3, 4))
    # (1, 1) is under the share, so nothing disputed is beside (0, 0); the final step adds the other
    # two, each between two unlinked words
    assert arbitrate_links(forward, backward, attention, share=0.05) == {(0, 0), (1, 2), (2, 1)}
    # an empty target's reading, as a server's JSON gives it back: (0,), no links to dispute
    assert arbitrate_links(set(), set(), numpy.asarray([])) == set()
    # share 0: every disputed link may be added (here all of grow-diag-final's), the model only orders them
    assert arbitrate_links(forward, backward, attention, share=0.0) == {(0, 0), (1, 1), (1, 2), (2, 1)}


def test_arbitrate_takes_the_models_stronger_link_where_two_compete_for_a_word():
    from heed.explain.align_methods import symmetrize
    from heed.explain.priors import arbitrate_links

    # the directions agree on (1, 1); forward links source 3 to target 3, backward to target 4, no
    # neighbours of (1, 1): grow-diag-final's final step takes forward's first, and backward's then
    # links no unlinked word
    forward, backward = {(1, 1), (3, 3)}, {(1, 1), (3, 4)}
    assert symmetrize(forward, backward, "grow-diag-final") == {(1, 1), (3, 3)}
    # the model reads target 4 on source 3 (0.7), target 3 mostly elsewhere (0.1): backward's first
    attention = _rows({(3, 3): 0.1, (3, 4): 0.7}, (5, 5))
    assert arbitrate_links(forward, backward, attention, share=0.05) == {(1, 1), (3, 4)}
    # a link outside the model's reading (a pair cut to its lengths) weighs 0: kept only at share 0
    assert arbitrate_links({(0, 0), (6, 6)}, {(0, 0)}, attention, share=0.05) == {(0, 0)}
    assert arbitrate_links({(0, 0), (6, 6)}, {(0, 0)}, attention, share=0.0) == {(0, 0), (6, 6)}


def test_the_combine_help_gives_arbitrates_share():
    from heed.cli.explain import COMBINE_OPTION
    from heed.explain.priors import ARBITRATE_SHARE

    assert f"at least {ARBITRATE_SHARE:.0%} of the target word's row" in (COMBINE_OPTION.help or "")


def test_the_product_rule_lets_the_priors_break_the_models_doubt():
    import numpy as np

    from heed.explain.priors import product_links
    from heed.results import Alignment

    # target word 0 is torn between source words 0 and 1 (0.5 / 0.4); the priors have seen (b, y) twice
    reading = Alignment(["a", "b"], ["y", "z"], np.array([[0.5, 0.4], [0.1, 0.9]], dtype=np.float32), [])
    table = {("b", "y"): 2.0}
    # p(i | y) = (1, 3) / 4 and p(i | z) = (1, 1) / 2: 0.5 * 1/4 < 0.4 * 3/4
    assert product_links(reading, table, units="words", weight=1.0) == {(1, 0), (1, 1)}
    assert product_links(reading, table, units="words", weight=0.0) == {(0, 0), (1, 1)}  # the model alone


def _reading(src: str, tgt: str, links: set[tuple[int, int]]):  # type: ignore[no-untyped-def]
    """A model's reading that puts 0.9 of each target word's row on its linked source word."""
    import numpy as np

    from heed.results import Alignment

    attention = np.full((len(tgt.split()), len(src.split())), 0.02, dtype=np.float32)
    for i, j in links:
        attention[j, i] = 0.9
    return Alignment(src.split(), tgt.split(), attention, sorted(links))


def test_the_models_reading_becomes_lexical_counts_a_target_word_shared_by_its_row():
    import numpy as np
    from guide_rule import evidence_lines

    from heed.results import Alignment

    # rows normalised (0.6 + 0.2 = 0.8 of the row on the source), cells under 1% of the row dropped,
    # (source, target) summed over the pairs and lowercased as eflomal reads them
    first = Alignment(["Le", "chat"], ["the", "cat"], np.array([[0.6, 0.2], [0.001, 0.5]], dtype=np.float32), [])
    second = Alignment(["le", "chien"], ["the", "dog"], np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32), [])
    assert evidence_lines([first, second], units="words", weight=2.0) == [
        "LEX\tchat\tcat\t2", "LEX\tchat\tthe\t0.5", "LEX\tchien\tdog\t2", "LEX\tle\tthe\t3.5"]
    chars = Alignment(["deux"], ["2", "3"], np.array([[1.0], [1.0]], dtype=np.float32), [])
    assert evidence_lines([chars], units="chars", weight=1.0) == ["LEX\tdeux\t2\t1", "LEX\tdeux\t3\t1"]


def test_the_guide_rule_lets_the_models_evidence_move_links_eflomal_alone_gets_wrong(tmp_path):
    from guide_rule import guide_links

    priors = read_priors(_priors_file(tmp_path / "p.eflomal", _corpus(400, seed=3)[0]))
    # two words the priors never saw, their translations in swapped order: eflomal's jumps link them
    # monotonically (x -> v, y -> u); the model's reading says x -> u, y -> v
    new = [Pair(f"s1 s2 x{k} y{k} s3", f"t1 t2 v{k} u{k} t3") for k in range(6)]
    gold = {(0, 0), (1, 1), (2, 3), (3, 2), (4, 4)}
    readings = [_reading(p.src, p.tgt, gold) for p in new]
    swapped = lambda links: sum({(2, 3), (3, 2)} <= found for found in links)
    guided = guide_links(new, readings, priors, weight=1.0)
    assert swapped(priors_links(new, priors)) <= 2
    assert swapped(guided) >= 3, guided  # eflomal samples: 4-6 of 6 in 150 runs
    assert all({(0, 0), (1, 1), (4, 4)} <= found for found in guided)  # the words the priors know, as they were


@pytest.fixture(scope="module")
def dates_priors(tiny_corpus, tmp_path_factory) -> Path:
    """The tiny model's training corpus's priors, target in characters (the dates gold's units)."""
    out = tmp_path_factory.mktemp("priors")
    result = invoke("data", "align", "--tsv", tiny_corpus["train"], "-o", out / "train.align",
                    "--priors-out", out / "train.priors", "--priors-units", "chars")
    assert result.exit_code == 0, result.output
    assert "heed data priors MODEL" in result.stdout
    return out / "train.priors"


@pytest.fixture
def model_dir(trained_run, tmp_path) -> Path:
    shutil.copytree(trained_run / "model", tmp_path / "model")
    return tmp_path / "model"


def _align(model: Path, gold_files: Path, *flags) -> object:
    return invoke("align", model, "--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt",
                  "--tgt-units", "chars", "--gold", gold_files / "test.align", *flags)


def test_recorded_priors_are_listed_with_their_sha256_and_used_by_heed_align(model_dir, dates_priors, gold_files):
    result = invoke("data", "priors", model_dir, dates_priors)
    assert result.exit_code == 0, result.output
    meta = json.loads((model_dir / "heed.json").read_text(encoding="utf-8"))
    assert meta["priors"] == "priors.eflomal" and "priors.eflomal" in meta["files"]
    for aligner in ("priors", "both"):
        result = _align(model_dir, gold_files, "--aligner", aligner)
        assert result.exit_code == 0, result.output
        assert f"aligner: aligner {aligner}" in " ".join(result.stderr.split()), result.stderr
        assert len(result.stdout.splitlines()) == 20
    assert "product (weight 1) of" in " ".join(result.stderr.split())  # the last, both: the measured rule
    for rule in ("intersect", "arbitrate"):
        result = _align(model_dir, gold_files, "--aligner", "both", "--combine", rule)
        assert result.exit_code == 0 and f"{rule} of" in " ".join(result.stderr.split()), result.output
        assert len(result.stdout.splitlines()) == 20


def test_the_priors_aligner_reads_a_priors_file_given_by_flag(model_dir, dates_priors, gold_files):
    result = _align(model_dir, gold_files, "--aligner", "priors", "--priors", dates_priors)
    assert result.exit_code == 0, result.output
    assert str(dates_priors) in " ".join(result.stderr.split())


# --------------------------------------------------------------------------- bad inputs: one line, exit 2


def test_aligner_priors_needs_recorded_priors(model_dir, gold_files, tmp_path):
    result = _align(model_dir, gold_files, "--aligner", "priors", "-o", tmp_path / "out.align")
    assert_user_error(result, "records no statistical priors", "heed data priors")
    assert not (tmp_path / "out.align").exists()


def test_a_truncated_priors_file_is_refused(model_dir, dates_priors, tmp_path, gold_files):
    cut = tmp_path / "cut.priors"
    cut.write_text("".join(dates_priors.read_text(encoding="utf-8").splitlines(keepends=True)[:-3]), encoding="utf-8")
    assert_user_error(invoke("data", "priors", model_dir, cut), str(cut), "truncated")
    assert not (model_dir / "priors.eflomal").exists()
    result = _align(model_dir, gold_files, "--aligner", "priors", "--priors", cut, "-o", tmp_path / "out.align")
    assert_user_error(result, str(cut), "truncated")
    assert not (tmp_path / "out.align").exists()


def test_priors_of_another_vocabulary_are_refused(model_dir, tmp_path):
    greek = [Pair("ένα δύο τρία", "ψ ω φ"), Pair("δύο τρία", "ω φ")] * 20
    other = _priors_file(tmp_path / "greek.priors", greek, units="chars")
    assert_user_error(invoke("data", "priors", model_dir, other), str(other), "another corpus or vocabulary")
    assert "priors" not in json.loads((model_dir / "heed.json").read_text(encoding="utf-8"))


def test_priors_in_other_units_and_a_join_without_both_are_refused(model_dir, dates_priors, gold_files, tmp_path):
    result = invoke("align", model_dir, "--src", gold_files / "test.src", "--tgt", gold_files / "test.tgt",
                    "--aligner", "priors", "--priors", dates_priors)  # words, but the priors count chars
    assert_user_error(result, "--tgt-units chars")
    assert_user_error(_align(model_dir, gold_files, "--combine", "union"), "--aligner both")


@pytest.mark.parametrize("weight", ["-0.5", "11", "nan"])
def test_a_priors_weight_outside_its_range_is_refused(model_dir, dates_priors, gold_files, tmp_path, weight):
    result = _align(model_dir, gold_files, "--aligner", "both", "--priors", dates_priors, "--combine", "product",
                    "--priors-weight", weight, "-o", tmp_path / "out.align")
    assert_user_error(result, "weight must be between 0 and 10")
    assert not (tmp_path / "out.align").exists()


def test_edited_recorded_priors_fail_their_sha256(model_dir, dates_priors, gold_files):
    assert invoke("data", "priors", model_dir, dates_priors).exit_code == 0
    with open(model_dir / "priors.eflomal", "a", encoding="utf-8") as f:
        f.write("LEX\ta\tb\t1\n")
    assert_user_error(_align(model_dir, gold_files, "--aligner", "priors"), "sha256")


def test_markup_placed_by_the_priors_says_so(model_dir, dates_priors, gold_files, tmp_path):
    assert invoke("data", "priors", model_dir, dates_priors).exit_code == 0
    sources = (gold_files / "test.src").read_text(encoding="utf-8").splitlines()[:5]
    tagged = tmp_path / "tagged.src"
    tagged.write_text("".join(f"<b>{s.split()[0]}</b> {' '.join(s.split()[1:])}\n" for s in sources), encoding="utf-8")
    targets = tmp_path / "refs.tgt"
    targets.write_text("".join((gold_files / "test.tgt").read_text(encoding="utf-8").splitlines(keepends=True)[:5]),
                       encoding="utf-8")
    for aligner in ("priors", "both"):
        result = invoke("markup", model_dir, "--src", tagged, "--tgt", targets, "--aligner", aligner)
        assert result.exit_code == 0, result.output
        assert f"aligner: {aligner} (priors" in result.stderr
        assert len(result.stdout.splitlines()) == 5 and all("<b>" in line for line in result.stdout.splitlines())


def test_carry_without_priors_for_the_priors_aligner_is_an_error(trained_run):
    import heed
    from heed.errors import HeedError
    from heed.markup import carry, parse

    translator = heed.load(trained_run / "model", device="cpu")
    with pytest.raises(HeedError, match="needs statistical priors"):
        carry(translator, parse("<b>March</b> 3 2001", "html"), ["2001-03-03"], aligner="priors")


def test_markup_aligner_flags_out_of_place_are_refused(model_dir, gold_files, tmp_path):
    assert_user_error(invoke("markup", model_dir, "--src", gold_files / "test.src", "--aligner", "best"),
                      "--aligner must be one of model, priors, both")
    assert_user_error(invoke("markup", model_dir, "--src", gold_files / "test.src", "--aligner", "priors"),
                      "records no statistical priors")
    assert_user_error(invoke("translate", model_dir, "-i", gold_files / "test.src", "-o", tmp_path / "out.txt",
                             "--aligner", "both"), "--format html or xml")
    assert not (tmp_path / "out.txt").exists()


def test_v1_align_takes_the_aligner_and_says_which_it_used(model_dir, dates_priors, gold_files):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    import heed
    from heed.cli.serve import recorded_priors
    from heed.serve.app import create_app

    assert invoke("data", "priors", model_dir, dates_priors).exit_code == 0
    translator = heed.load(model_dir, device="cpu")
    sources = (gold_files / "test.src").read_text(encoding="utf-8").splitlines()[:4]
    targets = (gold_files / "test.tgt").read_text(encoding="utf-8").splitlines()[:4]
    body = {"sources": sources, "targets": targets, "tgt_units": "chars"}
    with TestClient(create_app({"m": translator}, priors=recorded_priors({"m": model_dir}))) as client:
        plain = client.post("/v1/align", json=body).json()
        assert plain["aligner"] == "model"
        for aligner in ("priors", "both"):
            got = client.post("/v1/align", json={**body, "aligner": aligner})
            assert got.status_code == 200, got.text
            assert got.json()["aligner"] == aligner and len(got.json()["results"]) == 4
        assert client.post("/v1/align", json={**body, "aligner": "priors", "tgt_units": "words"}).json()[
            "error"]["field"] == "tgt_units"
    with TestClient(create_app({"m": translator})) as client:
        refused = client.post("/v1/align", json={**body, "aligner": "priors"})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "aligner"
