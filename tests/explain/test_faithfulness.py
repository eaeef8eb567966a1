"""heed faithfulness: attention interventions read and decoded, both families."""
import json

import numpy as np
import pytest
import torch

from heed.api import Translator
from heed.data.batching import collate
from heed.explain.faithfulness import faithfulness
from heed.nn.intervention import Intervention

SOURCES = ["3 mars 1998", "le 12 juin 2004", "1998년 3월 3일", "March 3, 1998"]
REFS = ["1998-03-03", "2004-06-12", "1998-03-03", "1998-03-03"]


def _teacher_forced_log_prob(translator, source, tokens):
    src_tokens = translator.codec.src_tokens(source)
    batch = collate([(translator.codec.src_ids(src_tokens), translator.codec.target_vocab(src_tokens).encode(tokens))],
                    [0])
    with torch.inference_mode():
        logits = translator.model(batch.src, batch.src_lengths, batch.tgt_in).logits
    return float(torch.log_softmax(logits, -1)[0].gather(-1, batch.tgt_out[0, :, None]).sum())


@pytest.mark.parametrize("run_name", ["trained_run", "transformer_run"])
@pytest.mark.parametrize("kind", ["uniform", "drop_top"])
def test_search_and_teacher_forcing_intervene_alike(run_name, kind, request):
    """The step-by-step search and the teacher-forced pass (the RNN's fused one steps aside) give
    the same log-probability of an output decoded under the intervention."""
    translator = Translator.load(request.getfixturevalue(run_name), device="cpu")
    with translator.intervening(Intervention(kind)):
        outputs = translator.translate(SOURCES, beam=1)
        for source, t in zip(SOURCES, outputs):
            assert t.log_prob == pytest.approx(_teacher_forced_log_prob(translator, source, t.tokens), abs=1e-4)
    plain = [_teacher_forced_log_prob(translator, s, t.tokens) for s, t in zip(SOURCES, outputs)]
    assert max(abs(a - t.log_prob) for a, t in zip(plain, outputs)) > 1e-3  # the intervention changed them


@pytest.mark.parametrize("run_name", ["trained_run", "transformer_run"])
def test_the_report_agrees_with_decoding_under_each_intervention(run_name, request):
    translator = Translator.load(request.getfixturevalue(run_name), device="cpu")
    decode = translator.resolve_decode({"beam_size": 1})
    report = faithfulness(translator, SOURCES, REFS, decode=decode, seed=5)
    own = [t.text for t in translator.translate(SOURCES, decode=decode)]
    assert report.sentences == 4 and report.tokens == sum(len(t) + 1 for t in own)
    from heed.evaluate import evaluate

    assert report.bleu == pytest.approx(evaluate(own, REFS).bleu)
    for effect in report.effects:
        with translator.intervening(Intervention(effect.kind, 5)):
            redone = [t.text for t in translator.translate(SOURCES, decode=decode)]
        assert effect.changed == pytest.approx(100 * sum(a != b for a, b in zip(own, redone)) / 4)
        assert effect.bleu == pytest.approx(evaluate(redone, REFS).bleu)
        # |p'(y) - p(y)| is one event's change: never above the total variation distance
        assert abs(effect.prob_change) <= effect.abs_prob_change <= effect.tvd + 1e-9
        assert 0 < effect.tvd <= 1
    again = faithfulness(translator, SOURCES, REFS, decode=decode, seed=5)
    assert again == report
    other = faithfulness(translator, SOURCES, REFS, decode=decode, kinds=["permute"], seed=6)
    assert other.effects[0].tvd != report.effects[1].tvd


def test_cli_prints_the_table_and_writes_json(trained_run, tmp_path, heed_cli, assert_user_error):
    src, ref, out = tmp_path / "src", tmp_path / "ref", tmp_path / "faith.json"
    src.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    result = heed_cli("faithfulness", trained_run, "--src", src, "--ref", ref, "--beam", "1", "-o", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [e["kind"] for e in data["effects"]] == ["uniform", "permute", "drop_top"]
    for e in data["effects"]:
        assert f"{e['tvd']:.3f}" in result.stdout and f"{e['changed']:.1f}%" in result.stdout
    assert np.isfinite([e["prob_change"] for e in data["effects"]]).all()
    ref.write_text("\n".join(REFS[:3]) + "\n", encoding="utf-8")
    assert_user_error(heed_cli("faithfulness", trained_run, "--src", src, "--ref", ref), str(ref))


def test_an_exported_model_cannot_be_intervened_on(trained_run, tmp_path, heed_cli, assert_user_error):
    from heed.export.onnx import export_model

    exported = export_model(trained_run, tmp_path / "onnx")
    src = tmp_path / "src"
    src.write_text("3 mars 1998\n", encoding="utf-8")
    result = heed_cli("faithfulness", exported, "--src", src, "--ref", src)
    assert_user_error(result, "exported model", "model directory")
