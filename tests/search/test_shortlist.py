"""Vocabulary shortlists (heed.search.shortlist): built from a corpus, recorded in a model directory,
searched by heed's search and, as a vocabulary map, by a CTranslate2 export. Refused files and a
model without one: tests/test_bad_inputs.py ("shortlist" cases)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import heed
from heed.plumbing.runtime import cpu_int8_problem
from heed.search import DecodeConfig, translate_ids
from heed.search.shortlist import SHORTLIST_FILE, Shortlist, build_shortlist


def test_build_lists_each_source_ids_likeliest_other_targets() -> None:
    pairs = [([5, 6], [10, 11, 12]), ([5], [10, 11]), ([5, 7], [10, 13]), ([6], [10, 12])]
    got = build_shortlist(pairs, src_vocab=8, tgt_vocab=14, k=2, common=1)
    assert got.always == (10,)  # in every pair
    assert got.table[5] == (11, 12)  # c(5, 11) = 2 ranks before c(5, 12) = 1 = c(5, 13), 12 < 13 breaks the tie
    assert got.table[6] == (12, 11)
    assert got.table[7] == (13,)
    assert got.pairs == 4
    assert Shortlist((1,), {3: (4,)}, 1, 1, 1).candidates([[3, 9]], specials=[0], prefixes=[[7]]) == [0, 1, 4, 7]


@pytest.fixture
def model_dir(converged_transformer: Path, tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    shutil.copytree(converged_transformer / "model", directory)
    return directory


def _sources(tiny_corpus: dict[str, Path]) -> list[str]:
    return tiny_corpus["test_src"].read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("int8", [False, pytest.param(True, marks=pytest.mark.skipif(
    cpu_int8_problem() is not None, reason=f"no int8 kernels: {cpu_int8_problem()}"))], ids=["float32", "int8"])
@pytest.mark.parametrize("beam", [1, 4])
def test_a_shortlist_of_every_piece_searches_exactly_as_the_whole_vocabulary(model_dir: Path, tiny_corpus, beam,
                                                                             int8):
    """An int8 model's shortlist rows are its int8 rows themselves (same values, same scales)."""
    translator = heed.load(model_dir, device="cpu", int8=int8)
    codec, model = translator.codec, translator.model
    ids = [codec.src_ids(codec.src_tokens(s)) for s in _sources(tiny_corpus)]
    cfg = DecodeConfig(beam_size=beam, n_best=beam, length_penalty=0.6)
    everything = Shortlist(tuple(range(len(codec.tgt_vocab))), {}, 1, len(codec.tgt_vocab), 1)
    with torch.inference_mode():
        full = translate_ids(model, ids, cfg, device=torch.device("cpu"), batch_size=7)
    with torch.inference_mode():
        listed = translate_ids(model, ids, cfg, device=torch.device("cpu"), batch_size=7, shortlist=everything)
    assert [[h.tokens for h in d.hypotheses] for d in listed] == [[h.tokens for h in d.hypotheses] for d in full]
    assert [h.log_prob for d in listed for h in d.hypotheses] == pytest.approx(
        [h.log_prob for d in full for h in d.hypotheses], abs=1e-5)


def test_recorded_translated_with_and_exported_as_a_vocabulary_map(model_dir: Path, tiny_corpus, heed_cli, tmp_path):
    result = heed_cli("data", "shortlist", str(model_dir), "--tsv", str(tiny_corpus["train"]), "--k", "3",
                      "--common", "4")
    assert result.exit_code == 0, result.stderr
    meta = json.loads((model_dir / "heed.json").read_text(encoding="utf-8"))
    assert meta["shortlist"] == SHORTLIST_FILE and SHORTLIST_FILE in meta["files"]
    translator = heed.load(model_dir, device="cpu")
    assert translator.shortlist is not None and len(translator.shortlist.always) == 4
    sources = _sources(tiny_corpus)
    listed = translator.translate(sources, beam=4, shortlist=True)
    codec = translator.codec
    for source, out in zip(sources, listed):  # only the batch's candidates are ever written
        ids = codec.tgt_ids(out.tokens, [])
        allowed = translator.shortlist.candidates([codec.src_ids(codec.src_tokens(s)) for s in sources],
                                                  specials=[codec.tgt_vocab.specials.eos])
        assert set(ids) <= set(allowed), source
    cli = heed_cli("translate", str(model_dir), "--shortlist", "--beam", "4", input="\n".join(sources[:3]) + "\n")
    assert cli.exit_code == 0, cli.stderr
    assert cli.stdout.splitlines() == [t.text for t in translator.translate(sources[:3], beam=4, shortlist=True)]

    pytest.importorskip("ctranslate2")
    from heed.export.onnx import export_model

    exported = export_model(model_dir, tmp_path / "ct2", kind="ctranslate2")
    assert (Path(exported) / "vmap.txt").is_file()
    vmap = (Path(exported) / "vmap.txt").read_text(encoding="utf-8").splitlines()
    assert vmap[0].startswith("\t") and len(vmap[0].split("\t")[1].split(" ")) == 4  # the common pieces
    ct2 = heed.load(str(exported))
    # In batches of 3: CTranslate2 keeps its first batch's map of ids to the restricted output layer,
    # so </s> must sit where every batch has it (the export puts the always-searched pieces first).
    outs = ct2.translate(sources, beam=4, shortlist=True, batch_size=3, length_penalty=1.0, length_norm="power")
    eos = codec.tgt_vocab.specials.eos
    assert all(eos not in codec.tgt_ids(o.tokens, []) and len(o.tokens) < 20 for o in outs)
    assert all(set(codec.tgt_ids(o.tokens, [])) <= set(translator.shortlist.always) | {
        t for s in sources for i in codec.src_ids(codec.src_tokens(s)) for t in translator.shortlist.table.get(i, ())}
        for o in outs)


def test_a_ct2_vocabulary_map_ends_hypotheses_in_every_batch(model_dir: Path, tiny_corpus, heed_cli, tmp_path):
    """CTranslate2 keeps its first batch's map of ids to the restricted output layer: where a later
    batch searches a piece below </s> that the first did not (here <pad>, listed for one source
    piece), </s> moves and, unless the export puts the always-searched pieces first, no hypothesis
    of that batch ends."""
    pytest.importorskip("ctranslate2")
    from heed.export.onnx import export_model

    out = tmp_path / "list.json"
    assert heed_cli("data", "shortlist", str(model_dir), "--tsv", str(tiny_corpus["train"]), "--k", "3",
                    "--common", "4", "-o", str(out)).exit_code == 0
    translator = heed.load(model_dir, device="cpu")
    codec = translator.codec
    sources = _sources(tiny_corpus)
    pieces = [set(codec.src_tokens(s)) for s in sources]
    first = max(range(len(sources)), key=lambda k: len(codec.src_tokens(sources[k])))  # CTranslate2's first batch
    data = json.loads(out.read_text(encoding="utf-8"))
    marked = next(p for p in data["table"] if p not in pieces[first] and any(p in ps for ps in pieces))
    data["table"][marked].append("<pad>")
    out.write_text(json.dumps(data), encoding="utf-8")
    assert heed_cli("data", "shortlist", str(model_dir), "--from", str(out)).exit_code == 0
    exported = export_model(model_dir, tmp_path / "ct2", kind="ctranslate2")
    import ctranslate2

    translator = ctranslate2.Translator(str(exported), device="cpu", intra_threads=1)
    later = next(k for k, ps in enumerate(pieces) if marked in ps)
    for k in (first, later):  # two calls with a map, nothing between them
        tokens = [*codec.src_tokens(sources[k]), "</s>"]
        result = translator.translate_batch([tokens], beam_size=2, max_decoding_length=30, use_vmap=True,
                                            return_end_token=True)[0]
        assert result.hypotheses[0][-1] == "</s>" and "</s>" not in result.hypotheses[0][:-1], sources[k]
