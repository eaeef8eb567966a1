"""The insight commands: align (forced alignments, AER), evaluate --by-length, compare, translate
--replace-unk, and attention grids; their user errors exit 2 naming the file and line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke

from heed.data.pharaoh import parse_pharaoh, read_alignments, read_gold_alignments
from heed.explain.align import alignment_error_rate


@pytest.fixture(scope="module")
def plain_run(tiny_config, tmp_path_factory) -> Path:
    """The tiny dates model without attention (the baseline of `compare`)."""
    from heed.config import config_from_dict
    from heed.train import train

    output = tmp_path_factory.mktemp("plain") / "out"
    data = tiny_config(output)
    data["model"]["decoder"] = "plain"
    train(config_from_dict(data))
    return output


@pytest.fixture(scope="module")
def word_files(word_run, tmp_path_factory) -> dict[str, Path]:
    """The word model's dev pairs as line-aligned .src / .tgt files."""
    directory = tmp_path_factory.mktemp("word_files")
    pairs = [line.split("\t") for line in (word_run.parent / "dev.tsv").read_text(encoding="utf-8").splitlines()]
    src, tgt = directory / "dev.src", directory / "dev.tgt"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return {"src": src, "tgt": tgt}


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("command", ["align", "compare", "evaluate", "translate", "attention", "lens"])
def test_help_on_the_insight_commands(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.stdout


# ------------------------------------------------------------------------------------- align


@pytest.mark.parametrize("model", ["word_run", "trained_run"])
def test_align_writes_one_pharaoh_line_per_pair_within_the_word_counts(request, model, word_files,
                                                                       tiny_corpus, tmp_path):
    run = request.getfixturevalue(model)
    src, tgt = (word_files["src"], word_files["tgt"]) if model == "word_run" else \
        (tiny_corpus["test_src"], tiny_corpus["test_ref"])
    out = tmp_path / "out.align"
    result = invoke("align", run, "--src", src, "--tgt", tgt, "-o", out)
    assert result.exit_code == 0, result.output
    lines = lines_of(out)
    assert len(lines) == len(lines_of(src))
    for line, s, t in zip(lines, lines_of(src), lines_of(tgt)):
        links = parse_pharaoh(line)
        assert {j for _, j in links} == set(range(len(t.split())))  # one link for every target word
        assert all(0 <= i < len(s.split()) for i, _ in links)
    stdout = invoke("align", run, "--src", src, "--tgt", tgt)
    assert stdout.exit_code == 0 and stdout.stdout.splitlines() == lines


def test_align_of_the_word_model_links_the_unknown_name_to_itself(word_run, tmp_path, write_lines):
    # The word model learnt "<unk>" -> "<unk>" with the name's position (what --replace-unk relies on).
    src = write_lines(tmp_path / "s", ["hello zoltan sleeps", "goodbye bob eats"])
    tgt = write_lines(tmp_path / "t", ["bonjour zoltan dort", "au revoir bob mange"])
    result = invoke("align", word_run, "--src", src, "--tgt", tgt)
    assert result.exit_code == 0, result.output
    first, second = (parse_pharaoh(line) for line in result.stdout.splitlines())
    assert (1, 1) in first and (1, 2) in second  # zoltan-zoltan; bob is the third target word


def test_align_gold_prints_the_aer_of_the_written_alignments(word_run, word_files, tmp_path):
    n = len(lines_of(word_files["src"]))
    # Gold: "greeting-greeting" sure, the name possible, nothing for the verb; a blank line at the end.
    gold = tmp_path / "gold.talp"
    gold.write_text("".join("0-0 1p1\n" if k % 2 else "0-0 2-2 1-1-P\n" for k in range(n)) + "\n", encoding="utf-8")
    out = tmp_path / "hyp.align"
    result = invoke("align", word_run, "--src", word_files["src"], "--tgt", word_files["tgt"], "-o", out,
                    "--gold", gold)
    assert result.exit_code == 0, result.output
    printed = float(re.search(r"AER = (\d\.\d{4})", result.stdout).group(1))
    sure, possible = read_gold_alignments(gold)
    expected = alignment_error_rate(read_alignments(out), sure[:n], possible[:n])
    assert printed == pytest.approx(expected, abs=5e-5)
    assert f"({n} sentences;" in result.stdout
    # Alignments on stdout: the AER goes to stderr, the Pharaoh lines stay clean.
    result = invoke("align", word_run, "--src", word_files["src"], "--tgt", word_files["tgt"], "--gold", gold)
    assert result.exit_code == 0 and result.stdout.splitlines() == lines_of(out)
    assert "AER = " in result.stderr


def test_align_user_errors_name_the_file_and_line(word_run, word_files, tmp_path, write_lines):
    src, tgt = word_files["src"], word_files["tgt"]
    short = write_lines(tmp_path / "short.tgt", lines_of(tgt)[:3])
    assert_user_error(invoke("align", word_run, "--src", src, "--tgt", short), f"{short}:3:", "same number of lines")
    assert_user_error(invoke("align", word_run, "--src", tmp_path / "nope.src", "--tgt", tgt),
                      "nope.src", "no such file")
    n = len(lines_of(src))
    bad = write_lines(tmp_path / "bad.talp", ["0-0"] * 3 + ["0-0 1:1"] + ["0-0"] * (n - 4))
    assert_user_error(invoke("align", word_run, "--src", src, "--tgt", tgt, "--gold", bad), f"{bad}:4:",
                      "malformed alignment link '1:1'")
    few = write_lines(tmp_path / "few.talp", ["0-0"] * (n - 1))
    assert_user_error(invoke("align", word_run, "--src", src, "--tgt", tgt, "--gold", few), str(few),
                      f"{n - 1} alignment lines", f"{n} sentences")
    outside = write_lines(tmp_path / "outside.talp", ["0-0", "0-7"] + ["0-0"] * (n - 2))
    assert_user_error(invoke("align", word_run, "--src", src, "--tgt", tgt, "--gold", outside), f"{outside}:2:",
                      "link 0-7 is outside the sentence pair")


def test_align_with_a_model_without_attention_exits_2(plain_run, tiny_corpus):
    assert_user_error(invoke("align", plain_run, "--src", tiny_corpus["test_src"], "--tgt", tiny_corpus["test_ref"]),
                      "no attention")


# ---------------------------------------------------------------------- evaluate --by-length


def test_evaluate_by_length_prints_a_table_and_draws_the_plot(trained_run, tiny_corpus, tmp_path):
    plot = tmp_path / "by_length.png"
    result = invoke("evaluate", trained_run, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"],
                    "--by-length", "--plot", plot)
    assert result.exit_code == 0, result.output
    assert "BLEU = " in result.stdout and "scores by source length (words)" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if re.match(r"^\d+(-\d+|\+)?\s+\d+\s", line)]
    n = len(lines_of(tiny_corpus["test_src"]))
    assert rows and sum(int(r[1]) for r in rows) == n  # every sentence in one bucket
    assert plot.read_bytes()[:4] == b"\x89PNG" and f"plot: {plot}" in result.stdout


def test_evaluate_by_length_with_buckets_in_characters(trained_run, tiny_corpus):
    result = invoke("evaluate", trained_run, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"],
                    "--length-unit", "chars", "--buckets", "1-5,6-12")
    assert result.exit_code == 0, result.output
    assert "scores by source length (chars)" in result.stdout
    assert "fall in no bucket and are left out" in result.stdout  # dates are longer than 12 characters


def test_evaluate_by_length_in_the_model_s_tokens(trained_run, tiny_corpus):
    result = invoke("evaluate", trained_run, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"],
                    "--length-unit", "tokens", "--buckets", "1-10,11-20,21+")
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines() if re.match(r"^\d+(-\d+|\+)?\s+\d+\s", line)]
    assert "scores by source length (tokens)" in result.stdout
    # characters, for this model: its lengths are those of the sources in characters
    by_chars = invoke("evaluate", trained_run, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"],
                      "--length-unit", "chars", "--buckets", "1-10,11-20,21+")
    assert len(rows) > 1 and rows == [line.split() for line in by_chars.stdout.splitlines()
                    if re.match(r"^\d+(-\d+|\+)?\s+\d+\s", line)]


@pytest.mark.parametrize("args, fragments", [
    (["--buckets", "1-10,10-20"], ["--buckets: 1-10 and 10-20 overlap at 10"]),
    (["--plot", "by_length.jpg"], ["by_length.jpg", "use .png, .svg or .pdf"]),
])
def test_evaluate_by_length_option_errors_exit_2(trained_run, tiny_corpus, args, fragments):
    assert_user_error(invoke("evaluate", trained_run, "--src", tiny_corpus["test_src"],
                             "--ref", tiny_corpus["test_ref"], *args), *fragments)


# ----------------------------------------------------------------------------------- compare


def test_compare_two_models_prints_both_and_overlays_them_on_one_plot(trained_run, plain_run, tiny_corpus,
                                                                     tmp_path, monkeypatch):
    import heed.viz

    figures = []
    save = heed.viz.save_figure
    monkeypatch.setattr(heed.viz, "save_figure", lambda fig, path: figures.append(fig) or save(fig, path))
    plot = tmp_path / "compare.svg"
    result = invoke("compare", trained_run, plain_run, "--src", tiny_corpus["test_src"],
                    "--ref", tiny_corpus["test_ref"], "--names", "attention,plain", "--plot", plot,
                    "--length-unit", "chars")
    assert result.exit_code == 0, result.output
    table = [line.split() for line in result.stdout.splitlines()]
    assert ["model", "BLEU", "chrF", "exact", "match"] in table
    assert [row[0] for row in table if row and row[0] in ("attention", "plain")][:2] == ["attention", "plain"]
    assert "scores by source length (chars)" in result.stdout
    assert plot.read_text(encoding="utf-8").startswith("<?xml")
    (fig,) = figures
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines] == ["attention", "plain"]
    assert ax.get_xlabel() == "source length (chars)"


def test_compare_names_models_by_directory(trained_run, plain_run, tiny_corpus):
    from heed.cli.io import model_names as _model_names

    assert _model_names([Path("runs/luong/model"), Path("runs/plain")], None) == ["luong", "plain"]
    assert _model_names([Path("a/out"), Path("b/out")], None) == ["a/out", "b/out"]  # repeated: the paths
    assert _model_names([Path("a"), Path("b")], "x, y") == ["x", "y"]
    result = invoke("compare", trained_run / "model", "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"])
    assert result.exit_code == 0, result.output
    assert any(line.split()[:1] == [trained_run.name] for line in result.stdout.splitlines())


def test_compare_user_errors(trained_run, plain_run, tiny_corpus, tmp_path, write_lines):
    src, ref = tiny_corpus["test_src"], tiny_corpus["test_ref"]
    assert_user_error(invoke("compare", trained_run, plain_run, "--src", src, "--ref", ref, "--names", "a"),
                      "--names has 1 name for 2 models")
    short = write_lines(tmp_path / "short.ref", lines_of(ref)[:2])
    assert_user_error(invoke("compare", trained_run, plain_run, "--src", src, "--ref", short), f"{short}:2:")
    assert_user_error(invoke("compare", trained_run, tmp_path / "gone", "--src", src, "--ref", ref), "gone")


# ------------------------------------------------------------------------ translate --replace-unk


def test_translate_replace_unk_copies_or_translates_the_unknown_word(word_run, tmp_path, write_lines):
    plain = invoke("translate", word_run, input="hello zoltan sleeps\n")
    assert plain.exit_code == 0 and plain.stdout == "bonjour <unk> dort\n"
    copied = invoke("translate", word_run, "--replace-unk", input="hello zoltan sleeps\n")
    assert copied.exit_code == 0 and copied.stdout == "bonjour zoltan dort\n"
    lexicon = write_lines(tmp_path / "lex.tsv", ["zoltan\tZoltán"])
    translated = invoke("translate", word_run, "--replace-unk", "--dictionary", lexicon,
                        input="hello zoltan sleeps\nthanks anna sings\n")
    assert translated.exit_code == 0 and translated.stdout == "bonjour Zoltán dort\nmerci anna chante\n"


def test_translate_replace_unk_errors(word_run, plain_run, tmp_path, write_lines):
    bad = write_lines(tmp_path / "lex.tsv", ["zoltan\tZoltán", "no tab"])
    assert_user_error(invoke("translate", word_run, "--dictionary", bad, input="x\n"), f"{bad}:2:", "source<TAB>target")
    assert_user_error(invoke("translate", word_run, "--dictionary", tmp_path / "none.tsv", input="x\n"), "none.tsv")
    assert_user_error(invoke("translate", plain_run, "--replace-unk", input="1 May 2001\n"), "no attention")


# --------------------------------------------------------------------------------- attention


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_attention_draws_one_figure_with_a_heatmap_per_sentence(trained_run, tmp_path, monkeypatch, suffix, magic):
    import heed.viz

    figures = []
    save = heed.viz.save_figure
    monkeypatch.setattr(heed.viz, "save_figure", lambda fig, path: figures.append(fig) or save(fig, path))
    figure = tmp_path / f"map{suffix}"
    result = invoke("attention", trained_run, "3 March 1998", "le 4 mai 2001", "-o", figure)
    assert result.exit_code == 0, result.output
    assert figure.read_bytes()[:5].startswith(magic)
    (fig,) = figures
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 2 and len(fig.axes) == 3  # + the shared colorbar
    assert [ax.get_title() for ax in heatmaps] == ["3 March 1998", "le 4 mai 2001"]


# ------------------------------------------------------------------- readings beyond the weights


def test_translate_explain_source_share_prints_each_outputs_alti_share(transformer_run, tmp_path):
    """--explain source-share: a tab and the sentence's ALTI+ source share after each translation,
    the value Translator.source_share gives; '-' for an empty line; with --n-best a fourth field."""
    from heed.api import Translator

    sources = ["3 mars 1998", "", "le 12 juin 2004"]
    result = invoke("translate", transformer_run, "--explain", "source-share", input="\n".join(sources) + "\n")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    translator = Translator.load(transformer_run)
    outputs = translator.translate([sources[0], sources[2]])
    shares = translator.source_share([sources[0], sources[2]], [o.tokens for o in outputs])
    assert lines == [f"{outputs[0].text}\t{shares[0].sentence:.4f}", "\t-", f"{outputs[1].text}\t{shares[1].sentence:.4f}"]
    nbest = invoke("translate", transformer_run, "--explain", "source-share", "--beam", "3", "--n-best", "2",
                   input=sources[0] + "\n")
    assert nbest.exit_code == 0, nbest.output
    rows = nbest.stdout.splitlines()
    assert len(rows) == 2 and all(re.fullmatch(r"0 \|\|\| .* \|\|\| -?\d+\.\d{4} \|\|\| source_share=0\.\d{4}", r)
                                  for r in rows), rows


def test_attribute_contrast_writes_why_this_output_and_not_the_other(transformer_run, tmp_path):
    pytest.importorskip("captum")
    src = tmp_path / "one.txt"
    src.write_text("3 mars 1998\n", encoding="utf-8")
    out = tmp_path / "contrast.json"
    result = invoke("attribute", transformer_run, "--src", src, "--contrast", "2004-06-12", "-o", out, "--steps", "20")
    assert result.exit_code == 0, result.output
    import json

    (item,) = json.loads(out.read_text(encoding="utf-8"))
    assert item["contrast_tokens"] == list("2004-06-12") and len(item["source"]) == len(item["src_tokens"]) + 1
    assert item["difference"] == pytest.approx(item["log_prob_output"] - item["log_prob_contrast"])
    assert f"log p difference {item['difference']:+.3f}" in result.stdout and "towards the other" in result.stdout


def test_lens_prints_a_row_per_layer_and_writes_the_json(transformer_run, tmp_path):
    import json

    src = tmp_path / "s.txt"
    src.write_text("3 mars 1998\nle 12 juin 2004\n", encoding="utf-8")
    out = tmp_path / "lens.json"
    result = invoke("lens", transformer_run, "--src", src, "-o", out, "--top", "2")
    assert result.exit_code == 0, result.output
    items = json.loads(out.read_text(encoding="utf-8"))
    assert len(items) == 2 and len(items[0]["top_tokens"]) == 2  # the tiny Transformer's 2 decoder layers
    assert all(len(choices) == 2 for choices in items[0]["top_tokens"][0])
    assert "1: 3" in result.stdout and f"lens: {out}" in result.stdout
