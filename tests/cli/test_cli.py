import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_helpers import assert_user_error, invoke

import heed


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def bad_corpus_config(tmp_path, tiny_config, **train_corpus):
    data = tiny_config(tmp_path / "out")
    data["data"]["train"] = {k: str(v) for k, v in train_corpus.items()}
    return write_config(tmp_path / "bad.yaml", data)


# --------------------------------------------------------------------------------- basics


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.startswith(f"heed {heed.__version__}")


@pytest.mark.parametrize("command", [[], ["train"], ["translate"], ["evaluate"], ["attention"], ["demo"]])
def test_help_on_every_command(command):
    result = invoke(*command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.stdout


# ------------------------------------------------------------------------- user errors -> 2


def test_config_typo_exits_2_naming_the_field(tmp_path, tiny_config):
    data = tiny_config(tmp_path / "out")
    data["model"]["hiden_size"] = 8
    path = write_config(tmp_path / "typo.yaml", data)
    assert_user_error(invoke("train", path), str(path), "field 'model.hiden_size'", "did you mean 'hidden_size'")


def test_unknown_set_key_exits_2_naming_the_field(tmp_path, tiny_config):
    path = write_config(tmp_path / "ok.yaml", tiny_config(tmp_path / "out"))
    assert_user_error(invoke("train", path, "--set", "train.learning_rate=0.1"), "--set",
                      "field 'train.learning_rate'", "unknown field")


def test_missing_config_and_bad_yaml_exit_2(tmp_path):
    assert_user_error(invoke("train", tmp_path / "nope.yaml"), "nope.yaml", "no such config file")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: {task: dates\n", encoding="utf-8")
    assert_user_error(invoke("train", bad), "bad.yaml", "invalid YAML: line")


def test_tsv_line_without_a_tab_names_file_and_line(tmp_path, write_lines, tiny_config):
    tsv = write_lines(tmp_path / "c.tsv", ["a\t1", "b\t2", "no tab here", "d\t4"])
    assert_user_error(invoke("train", bad_corpus_config(tmp_path, tiny_config, tsv=tsv)), f"{tsv}:3:", "no tab")


def test_invalid_utf8_names_file_and_line(tmp_path, tiny_config):
    tsv = tmp_path / "c.tsv"
    tsv.write_bytes(b"a\t1\nb\xff\t2\n")
    assert_user_error(invoke("train", bad_corpus_config(tmp_path, tiny_config, tsv=tsv)), f"{tsv}:2:",
                      "invalid UTF-8")


def test_blank_line_inside_the_corpus_names_file_and_line(tmp_path, write_lines, tiny_config):
    tsv = write_lines(tmp_path / "c.tsv", ["a\t1", "", "c\t3"])
    assert_user_error(invoke("train", bad_corpus_config(tmp_path, tiny_config, tsv=tsv)), f"{tsv}:2:", "every line needs a sentence")


def test_empty_side_names_file_and_line(tmp_path, write_lines, tiny_config):
    tsv = write_lines(tmp_path / "c.tsv", ["a\t1", "b\t "])
    assert_user_error(invoke("train", bad_corpus_config(tmp_path, tiny_config, tsv=tsv)), f"{tsv}:2:", "empty target")


def test_parallel_files_of_different_lengths_name_the_short_file_and_line(tmp_path, write_lines, tiny_config):
    src = write_lines(tmp_path / "c.src", ["a", "b", "c"])
    tgt = write_lines(tmp_path / "c.tgt", ["1", "2"])
    assert_user_error(invoke("train", bad_corpus_config(tmp_path, tiny_config, src=src, tgt=tgt)), f"{tgt}:2:",
                      str(src), "same number of lines")


def test_missing_and_corrupt_corpus_files(tmp_path, tiny_config):
    assert_user_error(invoke("train", bad_corpus_config(tmp_path, tiny_config, tsv=tmp_path / "gone.tsv")),
                      "gone.tsv", "no such file")
    broken = tmp_path / "c.tsv.gz"
    whole = gzip.compress("".join(f"s{i}\t{i * 7919 % 10007}\n" for i in range(3000)).encode())
    broken.write_bytes(whole[: len(whole) // 2])
    assert_user_error(invoke("train", bad_corpus_config(tmp_path, tiny_config, tsv=broken)), str(broken), "cannot read")


def test_reader_error_through_python_m_heed(tmp_path, write_lines, tiny_config):
    """The real entry point, in a fresh process: one clean line on stderr, exit 2."""
    tsv = write_lines(tmp_path / "c.tsv", ["a\t1", "b\t2", "three"])
    config = bad_corpus_config(tmp_path, tiny_config, tsv=tsv)
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "heed", "train", str(config)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.strip() == (f"error: {tsv}:3: no tab on this line; a TSV corpus needs 'source<TAB>target'")


def test_translate_a_missing_model_exits_2(tmp_path):
    assert_user_error(invoke("translate", tmp_path / "nothing", input="x\n"), "nothing", "no such model directory")
    assert_user_error(invoke("translate", tmp_path, input="x\n"), "not a heed model directory")


def test_evaluate_with_misaligned_files_exits_2(trained_run, tmp_path, write_lines):
    src = write_lines(tmp_path / "s.txt", ["a", "b"])
    ref = write_lines(tmp_path / "r.txt", ["1"])
    assert_user_error(invoke("evaluate", trained_run, "--src", src, "--ref", ref), f"{ref}:1:", "same number of lines")


def test_translate_input_that_is_not_utf8_names_the_line(trained_run, tmp_path):
    bad = tmp_path / "in.txt"
    bad.write_bytes(b"1 May 2001\n\xc3\x28\n")
    assert_user_error(invoke("translate", trained_run, "--input", bad), f"{bad}:2:", "invalid UTF-8")


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_threads_option_sets_torch_threads_for_the_decode_and_restores_them(trained_run, tmp_path, monkeypatch,
                                                                         command):
    import torch

    from heed.api import Translator

    seen = []
    original = Translator.translate_nbest  # what the commands call (translate() calls it too)

    def spy(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate_nbest", spy)
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("hello\n", encoding="utf-8")
    ref.write_text("bonjour\n", encoding="utf-8")
    before = torch.get_num_threads()
    wanted = 2 if before == 1 else 1
    args = ["--input", src] if command == "translate" else ["--src", src, "--ref", ref]
    result = invoke(command, trained_run, *args, "--threads", wanted)
    assert result.exit_code == 0, result.output
    assert seen == [wanted] and torch.get_num_threads() == before
    refused = invoke(command, trained_run, *args, "--threads", 0)  # typer's own usage error
    assert refused.exit_code == 2 and "--threads" in refused.stderr and "Traceback" not in refused.output


def test_interrupted_training_says_how_to_resume(tmp_path, monkeypatch, tiny_config):
    import heed.train

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(heed.train, "train", interrupted)
    path = write_config(tmp_path / "ok.yaml", tiny_config(tmp_path / "out"))
    result = invoke("train", path)
    assert result.exit_code == 130 and "Traceback" not in result.output
    assert f"heed train {path} --resume" in " ".join(result.stderr.split())


# --------------------------------------------------------------------------- round trip


def test_train_translate_evaluate_round_trip(tmp_path, tiny_corpus, tiny_config):
    path = write_config(tmp_path / "run.yaml", tiny_config(tmp_path / "ignored"))
    out = tmp_path / "run"
    result = invoke("train", path, "--output-dir", out, "--set", "train.epochs=1")
    assert result.exit_code == 0, result.output
    assert "model written to" in result.stdout and "step 5/" in result.stderr
    assert (out / "model" / "model.safetensors").is_file() and not (tmp_path / "ignored").exists()

    hyps = tmp_path / "hyps.txt"
    result = invoke("translate", out, "--input", tiny_corpus["test_src"], "--output", hyps, "--batch-size", "4")
    assert result.exit_code == 0, result.output
    n = len(tiny_corpus["test_src"].read_text(encoding="utf-8").splitlines())
    from_file = hyps.read_text(encoding="utf-8").splitlines()
    assert len(from_file) == n

    result = invoke("translate", out / "model", "--beam", "1", input=tiny_corpus["test_src"].read_text(encoding="utf-8"))
    assert result.exit_code == 0 and result.stdout.splitlines() == from_file

    result = invoke("evaluate", out, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"],
                    "--hyps", tmp_path / "h2.txt")
    assert result.exit_code == 0, result.output
    assert "BLEU = " in result.stdout and "nrefs:1|case:mixed" in result.stdout
    assert "chrF = " in result.stdout and "exact match = " in result.stdout and f"/{n})" in result.stdout
    assert (tmp_path / "h2.txt").read_text(encoding="utf-8").splitlines() == from_file

    result = invoke("train", path, "--output-dir", out, "--set", "train.epochs=2", "--resume")
    assert result.exit_code == 0, result.output
    assert "resuming at step" in result.stderr


def test_attention_command_draws_a_heatmap(trained_run, tmp_path):
    figure = tmp_path / "a.svg"
    result = invoke("attention", trained_run, "3 March 1998", "le 4 mai 2001", "--output", figure)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("3 March 1998\t") and figure.read_text(encoding="utf-8").startswith("<?xml")
    assert_user_error(invoke("attention", trained_run, "x", "--output", tmp_path / "a.gif"), "a.gif", ".png")


def test_blank_input_lines_stay_blank(trained_run):
    result = invoke("translate", trained_run, input="1 May 2001\n\n3 mars 1999\n")
    assert result.exit_code == 0
    lines = result.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[0] and lines[2]


def test_demo_quick_runs_every_stage(tmp_path, write_lines):
    out = tmp_path / "demo"
    result = invoke("demo", "--quick", "--output-dir", out, "--set", "data.dates.n_train=200",
                    "--set", "data.dates.n_dev=20", "--set", "data.dates.n_test=30",
                    "--set", "model.hidden_size=16", "--set", "model.embed_size=8")
    assert result.exit_code == 0, result.output
    assert "test exact match:" in result.stdout and "sample test translations" in result.stdout
    assert (out / "attention.png").is_file() and (out / "model" / "heed.json").is_file()
    assert (out / "data" / "test.src").is_file()
    gold = re.escape(str(out / "data" / "test.align"))  # the file's real path, not a path relative to nothing
    assert re.search(rf"alignment error rate against the gold by construction \({gold}\): \d+\.\d% "
                     r"\(the diagonal, no model: \d+\.\d%\)", result.stdout)
    # the command the demo suggests scores the same gold
    hint = next(line for line in result.stdout.splitlines() if " align " in line and "--gold" in line).split()
    aligned = invoke(*hint[1:])
    assert aligned.exit_code == 0 and "AER = " in aligned.stdout, aligned.output
    other = tmp_path / "mine"
    other.mkdir()
    write_lines(other / "notes.txt", ["keep me"])
    assert_user_error(invoke("demo", "--output-dir", other), "is not a demo run")
    assert (other / "notes.txt").is_file()


@pytest.mark.cpu_bf16
def test_translate_and_evaluate_in_bf16(word_run, tmp_path, write_lines):
    sources = ["hello anna sleeps", "goodbye paul eats", "thanks marie runs"]
    text = "".join(s + "\n" for s in sources)
    fp32, bf16 = invoke("translate", word_run, input=text), invoke("translate", word_run, "--bf16", input=text)
    assert fp32.exit_code == 0 and bf16.exit_code == 0, bf16.output
    assert bf16.stdout == fp32.stdout and len(fp32.stdout.splitlines()) == 3
    src = write_lines(tmp_path / "src.txt", sources)
    ref = write_lines(tmp_path / "ref.txt", fp32.stdout.splitlines())
    result = invoke("evaluate", word_run, "--src", src, "--ref", ref, "--bf16")
    assert result.exit_code == 0, result.output
    assert "exact match = 100.00% (3/3)" in result.stdout


def test_stderr_lines_are_never_wrapped_when_it_is_not_a_terminal(capsys):
    """Logs and hints must stay greppable and pasteable: rich wraps at 80 columns off a terminal."""
    from heed.cli.app import stderr as _stderr

    line = "step 100/2000 | epoch 0.50 | loss 2.3456 | lr 1.00e-03 | 12,345 tok/s | eta 23m45s " + "x" * 120
    _stderr().print(line)
    assert capsys.readouterr().err == line + "\n"


def test_train_names_its_model_directory_once_on_a_terminal_and_on_stdout_elsewhere(tmp_path, tiny_config):
    """Issue 56: the run's closing line on stderr and `model written to` on stdout named the same
    directory twice on one screen; each place (a terminal, or stdout apart from the log) gets it once."""
    import pty

    config = write_config(tmp_path / "c.yaml", tiny_config(tmp_path / "out", epochs=1))
    model = str(tmp_path / "out" / "model")
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "heed", "train", str(config)], stdin=secondary, stdout=secondary,
                            stderr=secondary, env={**os.environ, "COLUMNS": "300"})
    os.close(secondary)
    screen = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        screen += chunk
    os.close(primary)
    assert proc.wait(timeout=120) == 0, screen.decode(errors="replace")
    assert screen.decode(errors="replace").count(model) == 1, screen.decode(errors="replace")
    piped = invoke("train", config, "--set", f"output_dir={tmp_path / 'piped'}")
    assert piped.exit_code == 0, piped.output
    assert piped.stdout == f"model written to {tmp_path / 'piped' / 'model'}\n"


def test_every_route_names_the_held_out_references_test_tgt(tmp_path):
    """Issue 56: `heed demo` wrote data/test.ref where `heed data task` and training's held-out files
    write test.tgt; one name now, in the files and in the commands the demo suggests."""
    from rich.console import Console

    from heed.config import config_from_dict
    from heed.demo import _write_data

    cfg = config_from_dict({"data": {"task": "dates", "dates": {"n_train": 20, "n_dev": 5, "n_test": 5}},
                            "output_dir": str(tmp_path / "demo")})
    with open(os.devnull, "w") as devnull:
        _, _, data_dir = _write_data(cfg, tmp_path / "demo", Console(file=devnull))
    assert (data_dir / "test.tgt").is_file() and not (data_dir / "test.ref").exists()
    written = invoke("data", "task", "dates", tmp_path / "task")
    assert written.exit_code == 0 and (tmp_path / "task" / "test.tgt").is_file(), written.output


M2M100_CODES = ("af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he "
                "hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl "
                "no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi "
                "yo zh zu")


@pytest.mark.parametrize("code, codes, meant", [
    ("fr_FR", M2M100_CODES, ["fr"]), ("fr-FR", M2M100_CODES, ["fr"]), ("FR", M2M100_CODES, ["fr"]),
    ("english", M2M100_CODES, ["en"]), ("fre", M2M100_CODES, ["fr"]),
    ("fr", "eng_Latn fra_Latn deu_Latn zho_Hans", ["fra_Latn"]),
    ("zh", "zho_Hans zho_Hant fra_Latn", ["zho_Hans", "zho_Hant"]),
    ("fra_latn", "eng_Latn fra_Latn fry_Latn", ["fra_Latn"]),
])
def test_a_language_code_the_model_lacks_suggests_the_closest_codes(code, codes, meant):
    """Issue 56: --src-lang fr_FR suggested "af, am, ar" (difflib found nothing, the list's start came instead)."""
    from types import SimpleNamespace

    from heed.data.tokenize import PretrainedPieces, closest_languages
    from heed.errors import HeedError

    languages = {c: f"__{c}__" for c in codes.split()}
    assert closest_languages(code, languages) == meant
    with pytest.raises(HeedError) as refused:
        PretrainedPieces.for_language(SimpleNamespace(languages=languages), code)  # type: ignore[arg-type]
    assert str(refused.value).endswith(f"did you mean {', '.join(meant)}?")


def _every_command() -> list[tuple[str, ...]]:
    import typer

    from heed.cli import app

    root = typer.main.get_command(app)
    found = []
    for name, command in root.commands.items():
        found += [(name, sub) for sub in getattr(command, "commands", {})] or [(name,)]
    return found


def test_usage_lines_read_like_the_commands_a_person_types():
    """Issue 56: typer wrote `heed translate [OPTIONS] {MODEL...}...`; now `heed translate MODEL... [OPTIONS]`."""
    usages = {}
    for command in _every_command():
        shown = invoke(*command, "--help")
        assert shown.exit_code == 0, shown.output
        usages[command] = shown.stdout.splitlines()[0]
        assert "{" not in usages[command] and usages[command].endswith("[OPTIONS]"), usages[command]
    assert usages[("translate",)] == "Usage: heed translate MODEL... [OPTIONS]"
    assert usages[("train",)] == "Usage: heed train CONFIG [OPTIONS]"
    assert usages[("data", "get")] == "Usage: heed data get NAME [DIR] [OPTIONS]"


@pytest.mark.parametrize("command", ["translate", "evaluate", "attention", "compare", "faithfulness"])
def test_the_decode_flags_stand_under_their_own_heading_after_the_commands_own(command):
    """Issue 56: the 15 decode flags buried each command's own flags in one list."""
    from heed.cli.decode_flags import DECODE_FLAG, DECODE_PANEL

    lines = invoke(command, "--help", env={"COLUMNS": "200"}).stdout.splitlines()
    own, decoding = lines.index("Options:"), lines.index(f"{DECODE_PANEL}:")
    assert own < decoding
    flags = [line.split()[0] for line in lines[own + 1:] if line.startswith("  -")]
    between = [line.split()[0] for line in lines[own + 1:decoding] if line.startswith("  -")]
    assert "--help" in between and not set(DECODE_FLAG.values()) & set(between)
    assert set(DECODE_FLAG.values()) <= set(flags)
