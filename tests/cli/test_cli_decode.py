"""Every DecodeConfig option is a flag of `heed translate`, `evaluate`, `compare` and `attention`:
the flags reach the decoder, --n-best writes Moses-style n-best lists, a seed makes sampling
reproducible, and a bad value is one line naming the flag, exit code 2."""
from __future__ import annotations

import re

import pytest
import typer

from heed.cli import app
from heed.cli.decode_flags import DECODE_FLAG, flag_words
from heed.search import DecodeConfig

DECODE_COMMANDS = ("translate", "evaluate", "compare", "attention")
SOURCES = "3 March 1998\nle 4 mai 2001\n\n12 May 1999\n"
NBEST_LINE = re.compile(r"^(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d{4})$")


def flat(text: str) -> str:
    return " ".join(text.split()).lower()


def test_every_decode_field_is_a_flag_of_every_decoding_command_with_its_description():
    assert set(DECODE_FLAG) == set(DecodeConfig.model_fields)
    group = typer.main.get_command(app)
    for command in DECODE_COMMANDS:
        options = {opt: param for param in group.commands[command].params for opt in param.opts}
        for field, info in DecodeConfig.model_fields.items():
            option = options[DECODE_FLAG[field]]
            assert option.default is None, (command, field)  # None: the model's decode config
            if info.description:
                assert flat(flag_words(info.description)) in flat(option.help), (command, field, option.help)


def test_min_len_makes_every_output_at_least_that_long(word_run, heed_cli):
    sources = "hello anna sleeps\ngoodbye paul eats\nthanks marie runs\n"
    plain = heed_cli("translate", word_run, input=sources)
    assert plain.exit_code == 0, plain.output
    assert all(len(line.split()) < 5 for line in plain.stdout.splitlines())  # so the flag has work to do
    longer = heed_cli("translate", word_run, "--min-len", 5, input=sources)
    assert longer.exit_code == 0, longer.output
    lengths = [len(line.split()) for line in longer.stdout.splitlines()]
    assert len(lengths) == 3 and min(lengths) >= 5, longer.stdout


def test_max_len_b_with_max_len_a_0_bounds_the_output(trained_run, heed_cli):
    plain = heed_cli("translate", trained_run, input=SOURCES)
    assert max(map(len, plain.stdout.splitlines())) > 3  # the char model's outputs: one character a token
    short = heed_cli("translate", trained_run, "--max-len-a", 0, "--max-len-b", 3, input=SOURCES)
    assert short.exit_code == 0, short.output
    lines = short.stdout.splitlines()
    assert len(lines) == 4 and max(map(len, lines)) <= 3 and lines[2] == ""


def test_n_best_writes_k_moses_lines_per_source_best_first(trained_run, heed_cli):
    result = heed_cli("translate", trained_run, "--n-best", 3, "--beam", 3, input=SOURCES)
    assert result.exit_code == 0, result.output
    rows = [NBEST_LINE.match(line) for line in result.stdout.splitlines()]
    assert all(rows), result.stdout
    by_source: dict[int, list[tuple[str, float]]] = {}
    for row in rows:
        by_source.setdefault(int(row.group(1)), []).append((row.group(2), float(row.group(3))))
    assert list(by_source) == [0, 1, 2, 3]  # 0-based, in input order
    assert by_source[2] == [("", 0.0)]  # an empty line: one empty hypothesis
    for k in (0, 1, 3):
        scores = [score for _, score in by_source[k]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True), by_source[k]
    best = heed_cli("translate", trained_run, "--beam", 3, input=SOURCES).stdout.splitlines()
    assert [hyps[0][0] for hyps in by_source.values()] == best


def test_sampling_with_a_seed_is_reproducible_and_without_one_says_its_seed(trained_run, heed_cli):
    args = ("translate", trained_run, "--sampling", "--n-best", 2)
    first, again = (heed_cli(*args, "--seed", 1, input=SOURCES) for _ in range(2))
    assert first.exit_code == 0, first.output
    assert first.stdout == again.stdout and len(first.stdout.splitlines()) == 7  # 2 samples + 1 + 2 + 2
    fresh = heed_cli(*args, input=SOURCES)
    seed = re.search(r"sampling with seed (\d+) \(--seed \1 draws the same samples again\)", fresh.stderr)
    assert fresh.exit_code == 0 and seed, fresh.stderr
    assert heed_cli(*args, "--seed", seed.group(1), input=SOURCES).stdout == fresh.stdout


@pytest.mark.parametrize("flags, says", [
    (["--n-best", 4, "--beam", 2], "--n-best (4) cannot exceed --beam (2)"),
    (["--n-best", 2], "--n-best (2) cannot exceed --beam (1) (--beam: the model's decode config)"),
    (["--top-p", 1.5], "--top-p: input should be less than or equal to 1 (got 1.5)"),
    (["--temperature", 0], "--temperature: input should be greater than 0"),
    (["--beam", 0], "--beam: input should be greater than or equal to 1 (got 0)"),
    (["--sampling", "--beam", 3], "set --beam to 1"),
    (["--max-len-a", 0, "--max-len-b", 0], "set --max-len-b >= 1"),
], ids=lambda v: " ".join(map(str, v)) if isinstance(v, list) else None)
def test_a_bad_decode_value_is_one_line_naming_the_flag(trained_run, heed_cli, assert_user_error, flags, says):
    assert_user_error(heed_cli("translate", trained_run, *flags, input=SOURCES), says)


def test_evaluate_attention_and_compare_take_the_decode_flags(trained_run, tiny_corpus, tmp_path, heed_cli,
                                                               assert_user_error):
    files = ("--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"])
    hyps = tmp_path / "hyps.txt"
    result = heed_cli("evaluate", trained_run, *files, "--max-len-a", 0, "--max-len-b", 3, "--hyps", hyps)
    assert result.exit_code == 0, result.output
    assert max(map(len, hyps.read_text(encoding="utf-8").splitlines())) <= 3
    # n-best: evaluate scores the best hypothesis, the one `translate --beam 3` writes
    result = heed_cli("evaluate", trained_run, *files, "--beam", 3, "--n-best", 3, "--hyps", hyps)
    assert result.exit_code == 0, result.output
    best = heed_cli("translate", trained_run, "--beam", 3, "--input", tiny_corpus["test_src"])
    assert hyps.read_text(encoding="utf-8") == best.stdout
    assert_user_error(heed_cli("evaluate", trained_run, *files, "--top-p", 2), "--top-p")

    result = heed_cli("attention", trained_run, "3 March 1998", "--max-len-a", 0, "--max-len-b", 2,
                      "--output", tmp_path / "a.svg")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()[0].split("\t")[1]) <= 2

    result = heed_cli("compare", trained_run, trained_run / "model", *files, "--names", "a,b", "--min-len", 2,
                      "--length-penalty", 0.5, "--beam", 2)
    assert result.exit_code == 0, result.output
    assert_user_error(heed_cli("compare", trained_run, *files, "--no-repeat-ngram", -1), "--no-repeat-ngram", "-1")


def test_sampling_without_beam_samples_with_beam_1_whatever_the_model_searches_with(trained_run):
    from heed.api import Translator
    from heed.cli.decode_flags import resolve_decode

    translator = Translator.load(trained_run, device="cpu")
    translator.config = translator.config.model_copy(update={"decode": DecodeConfig(beam_size=5, n_best=3)})
    cfg = resolve_decode(translator, {"sampling": True, "seed": 4})
    assert (cfg.sampling, cfg.beam_size, cfg.n_best, cfg.seed) == (True, 1, 1, 4)
    assert resolve_decode(translator, {}).beam_size == 5  # no flags: the model's config as it is
