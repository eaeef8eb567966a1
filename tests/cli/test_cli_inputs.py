"""Hostile inputs to the commands (a closed stdin, devices, FIFOs, endless or overlong lines,
control characters, bad numbers): each is one line on stderr, exit code 2, no traceback, no hang;
and what the user gets instead (truncation warnings, progress only on a terminal, held-out files)."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import assert_user_error, invoke
from rich.console import Console


def heed(*args, stdin=subprocess.DEVNULL, timeout: float = 120, shell_prefix: str = ""):
    """`python -m heed ARGS` in a subprocess, under a timeout (a hang fails the test, never the suite).
    `shell_prefix`, when given, runs it through sh with that redirection (e.g. "<&-" closes stdin)."""
    command = [sys.executable, "-m", "heed", *map(str, args)]
    if shell_prefix:
        command = ["sh", "-c", 'exec "$@" ' + shell_prefix, "sh", *command]
    return subprocess.run(command, stdin=None if shell_prefix else stdin, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def assert_subprocess_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    message = done.stderr.strip()
    assert message.startswith("error:") and len(message.splitlines()) <= 2, message
    for fragment in fragments:
        assert fragment in " ".join(message.split()), (fragment, message)


# -------------------------------------------------------------------------- translate input


def test_translate_with_stdin_closed_says_so(trained_run):
    done = heed("translate", trained_run, shell_prefix="<&-")
    assert_subprocess_error(done, "no input: stdin is closed; give --input FILE")


@pytest.mark.skipif(not Path("/dev/zero").is_char_device(), reason="no /dev/zero character device here")
def test_translate_from_an_endless_device_stops_at_one_mib(trained_run):
    done = heed("translate", trained_run, "--input", "/dev/zero", timeout=120)
    assert_subprocess_error(done, "/dev/zero:1: line longer than 1 MiB")


def test_translate_input_with_a_nul_byte_names_line_and_column(trained_run, tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"le 3 mars 1998\nle 4\x00 mars\n")
    assert_user_error(invoke("translate", trained_run, "--input", path),
                      f"{path}:2: control character NUL (U+0000) at column 5")


def test_translate_reads_cr_only_input_as_lines(trained_run, tmp_path):
    path = tmp_path / "mac.txt"
    path.write_bytes(b"le 3 mars 1998\rMarch 4, 1998\r")
    result = invoke("translate", trained_run, "--input", path)
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 2


def test_translate_cuts_overlong_sources_with_a_warning_naming_their_lines(trained_run, tmp_path):
    long = "le 3 mars 1998 " * 20  # 300 characters, the tiny char model's max_src_len is 100
    path = tmp_path / "in.txt"
    path.write_text(f"le 3 mars 1998\n{long}\nMarch 4, 1998\n{long}\n", encoding="utf-8")
    result = invoke("translate", trained_run, "--input", path)
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 4
    warning = " ".join(result.stderr.split())
    assert (f"warning: {path}: lines 2, 4 are longer than the model's max_src_len (100 tokens); only the first 100 "
            "tokens were translated") in warning
    assert "max_src_len" in " ".join(invoke("translate", "--help").stdout.split())


@pytest.mark.parametrize("command", ["attribute", "faithfulness"])
def test_attribute_and_faithfulness_cut_overlong_sources_with_translates_warning(trained_run, tmp_path, command):
    long = "le 3 mars 1998 " * 20000  # 300,000 characters on one line: read to max_src_len, with a warning
    src, ref = tmp_path / "in.txt", tmp_path / "ref.txt"
    src.write_text(f"le 3 mars 1998\n{long}\n", encoding="utf-8")
    ref.write_text("1998-03-03\n1998-03-03\n", encoding="utf-8")
    extra = ["--steps", "4"] if command == "attribute" else ["--ref", str(ref)]
    result = invoke(command, trained_run, "--src", src, "-o", tmp_path / "out.json", *extra)
    assert result.exit_code == 0, result.output
    warning = " ".join(result.stderr.split())
    assert (f"warning: {src}: line 2 is longer than the model's max_src_len (100 tokens); only the first 100 "
            "tokens were translated") in warning


def test_api_reports_how_many_source_tokens_were_cut(trained_run):
    from heed.api import Translator

    translator = Translator.load(trained_run, device="cpu")
    short, long = translator.translate(["le 3 mars 1998", "x" * 250])
    assert short.truncated == 0
    assert long.truncated == 150 and len(long.src_tokens) == 100
    assert long.attention.shape[1] == 101  # the model read 100 tokens and </s>


def test_progress_is_not_shown_when_stderr_is_not_a_terminal(trained_run, tiny_corpus):
    result = invoke("evaluate", trained_run, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


def test_progress_is_a_bar_on_a_terminal_and_never_on_stdout(monkeypatch):
    import heed.cli

    screen = io.StringIO()
    monkeypatch.setattr(heed.cli.progress, "stderr", lambda: Console(file=screen, force_terminal=True, width=100))
    with heed.cli.progress.Progress("translating", total=3) as progress:
        progress.advance(2)
        progress.warn("a long line was cut")
        progress.advance(1)
    assert "translating" in screen.getvalue() and "a long line was cut" in screen.getvalue()
    quiet = io.StringIO()
    monkeypatch.setattr(heed.cli.progress, "stderr", lambda: Console(file=quiet, force_terminal=False))
    with heed.cli.progress.Progress("translating", total=3) as progress:
        progress.advance(3)
    assert quiet.getvalue() == ""


# ---------------------------------------------------------------------------- corpus files


def _write_later(fifo: Path, data: str, delay: float = 1.0) -> threading.Thread:
    """A writer that opens `fifo` `delay` seconds from now, as a slow `cmd > fifo` would."""
    def write() -> None:
        time.sleep(delay)
        with open(fifo, "w", encoding="utf-8") as f:
            f.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


def test_evaluate_reads_a_fifo_whose_writer_comes_later_as_cat_does(trained_run, tiny_corpus, tmp_path):
    fifo = tmp_path / "src.fifo"
    os.mkfifo(fifo)
    writer = _write_later(fifo, tiny_corpus["test_src"].read_text(encoding="utf-8"))
    done = heed("evaluate", trained_run, "--src", fifo, "--ref", tiny_corpus["test_ref"], timeout=120)
    writer.join(timeout=10)
    again = heed("evaluate", trained_run, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:3] == again.stdout.splitlines()[:3]  # the same scores as from the file


def test_evaluate_refuses_a_device_that_never_ends(trained_run, tiny_corpus):
    done = heed("evaluate", trained_run, "--src", "/dev/zero", "--ref", tiny_corpus["test_ref"], timeout=120)
    assert_subprocess_error(done, "/dev/zero: is a character device, not a regular file")


def test_evaluate_names_the_line_of_a_nul_byte(trained_run, tiny_corpus, tmp_path):
    src = tmp_path / "src.txt"
    lines = tiny_corpus["test_src"].read_bytes().splitlines(keepends=True)
    src.write_bytes(b"".join(lines[:2]) + b"\x00" + b"".join(lines[2:]))
    assert_user_error(invoke("evaluate", trained_run, "--src", src, "--ref", tiny_corpus["test_ref"]),
                      f"{src}:3: control character NUL (U+0000) at column 1")


# ------------------------------------------------------------------------- data.split


def test_a_split_too_large_names_the_corpus_file(tmp_path, write_lines):
    from heed.config import config_from_dict
    from heed.data.codec import load_corpora
    from heed.errors import ConfigError

    corpus = write_lines(tmp_path / "small.tsv", [f"s{i}\tt{i}" for i in range(5)])
    data = config_from_dict({"data": {"train": {"tsv": str(corpus)}, "split": {"dev": 3, "test": 3}}}).data
    with pytest.raises(ConfigError, match=rf"field 'data.split': asks for 3 dev \+ 3 test pairs, but {corpus} has "
                                          "only 5 distinct source sentences"):
        load_corpora(data)


def test_held_out_pairs_are_written_and_evaluate_reads_them(trained_run, tmp_path, write_lines):
    from heed.config import config_from_dict
    from heed.data.codec import load_corpora, write_heldout
    from heed.data.corpus import read_parallel

    corpus = write_lines(tmp_path / "all.tsv", [f"le {d} mars 1998\t1998-03-{d:02d}" for d in range(1, 29)])
    data = config_from_dict({"data": {"train": {"tsv": str(corpus)}, "split": {"dev": 4, "test": 5, "seed": 1}}}).data
    corpora = load_corpora(data)
    written = write_heldout(corpora, tmp_path / "out" / "data")
    assert sorted(written) == ["dev.src", "dev.tgt", "test.src", "test.tgt"]
    assert list(read_parallel(written["dev.src"], written["dev.tgt"])) == corpora.dev
    assert list(read_parallel(written["test.src"], written["test.tgt"])) == corpora.test
    assert not list((tmp_path / "out" / "data").glob(".*.tmp"))  # written atomically, nothing left over
    result = invoke("evaluate", trained_run, "--src", written["test.src"], "--ref", written["test.tgt"])
    assert result.exit_code == 0, result.output
    assert "BLEU" in result.stdout


def test_an_empty_split_writes_no_files(tmp_path):
    from heed.data.codec import Corpora, write_heldout
    from heed.data.corpus import Pair

    written = write_heldout(Corpora([Pair("a", "b")], [], [Pair("c", "d")]), tmp_path)
    assert sorted(written) == ["test.src", "test.tgt"]
    assert (tmp_path / "test.src").read_text(encoding="utf-8") == "c\n"


# ------------------------------------------------------------------------------ attention


def test_attention_cuts_a_long_sentence_to_max_src_len_and_warns(trained_run, tmp_path):
    out = tmp_path / "a.png"
    result = invoke("attention", trained_run, "le 3 mars 1998 " * 10, "-o", out)  # 150 chars, limit 100
    assert result.exit_code == 0, result.output
    assert "sentences: line 1 is longer than the model's max_src_len (100 tokens)" in " ".join(result.stderr.split())
    assert out.is_file()


def test_attention_refuses_a_heatmap_over_200_tokens_before_translating(trained_run, tmp_path, monkeypatch):
    import yaml

    model = tmp_path / "model"
    shutil.copytree(Path(trained_run) / "model", model)
    config = yaml.safe_load((model / "config.yaml").read_text(encoding="utf-8"))
    config["data"]["max_src_len"] = 5000  # a model that reads very long sources
    (model / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    from model_files import rehash

    rehash(model)

    import heed.api

    def no_translating(*args, **kwargs):
        raise AssertionError("translated a sentence whose heatmap is refused")

    monkeypatch.setattr(heed.api.Translator, "translate", no_translating)
    result = invoke("attention", model, "le 3 mars 1998", "x" * 4999, "-o", tmp_path / "a.png")
    assert_user_error(result, "sentence 2 ('xxxxxxxx", "is 4999 tokens long; a heatmap over more than 200 tokens a "
                      "side is unreadable")
    assert not (tmp_path / "a.png").exists()


def test_viz_refuses_an_unreadable_heatmap():
    import numpy as np

    from heed.errors import HeedError
    from heed.viz import attention_heatmap

    with pytest.raises(HeedError, match="a heatmap of 3 x 201 tokens is unreadable"):
        attention_heatmap(["a"] * 201, ["b"] * 3, np.zeros((3, 201)))


# ---------------------------------------------------------------------------------- help


def test_align_help_says_gold_is_optional():
    text = " ".join(invoke("align", "--help").stdout.split())
    assert "Optional gold alignments" in text


# ---------------------------------------------------------------------------------- demo


def test_the_demo_hint_names_heed_on_path_or_the_venv_script(tmp_path, monkeypatch):
    import heed.demo

    monkeypatch.setattr(shutil, "which", lambda name: "/somewhere/bin/heed")
    assert heed.demo.heed_command() == "heed"
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "heed").write_text("#!/bin/sh\n", encoding="utf-8")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.chdir(tmp_path)
    assert heed.demo.heed_command() == ".venv/bin/heed"
    monkeypatch.chdir(bin_dir)
    assert heed.demo.heed_command() == "./heed"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert heed.demo.heed_command() == str(bin_dir / "heed")
    (bin_dir / "heed").unlink()
    assert heed.demo.heed_command() == f"{bin_dir / 'python'} -m heed"


# ------------------------------------------------------------------------------- scratch


@pytest.mark.parametrize(("args", "says"), [
    (["--hidden", "-5"], "argument --hidden: must be >= 1, got -5"),
    (["--embed", "0"], "argument --embed: must be >= 1, got 0"),
    (["--epochs", "two"], "argument --epochs: expected an integer >= 1, got 'two'"),
    (["--batch-size", "0"], "argument --batch-size: must be >= 1"),
    (["--train-size", "0"], "argument --train-size: must be >= 1"),
    (["--eval-size", "-1"], "argument --eval-size: must be >= 1"),
    (["--seed", "-1"], "argument --seed: must be >= 0"),
    (["--lr", "0"], "argument --lr: must be > 0, got 0"),
    (["--lr", "nan"], "argument --lr: must be > 0, got nan"),
    (["--max-grad", "inf"], "argument --max-grad: must be > 0, got inf"),
    (["--stop-at", "1.5"], "argument --stop-at: must be >= 0 and <= 1.0, got 1.5"),
    (["--languages", "xx"], "dates languages must be a non-empty subset of en, fr, de, es, ko"),
])
def test_scratch_options_out_of_range_exit_2_with_one_clear_line(capsys, args, says):
    from heed.scratch.train import main

    with pytest.raises(SystemExit) as stop:
        main(args)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(f"python -m heed.scratch: error: {says}")
    assert "Traceback" not in err


def test_scratch_command_line_refuses_a_negative_hidden_size():
    done = subprocess.run([sys.executable, "-m", "heed.scratch", "--hidden", "-5"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "argument --hidden: must be >= 1, got -5" in done.stderr


def test_a_reader_that_goes_away_ends_translate_quietly(trained_run, tmp_path):
    """`heed translate ... | head -1`: no "Broken pipe" error, no traceback, exit 141 as after SIGPIPE."""
    import subprocess
    import sys

    many = tmp_path / "many.txt"
    many.write_text("1 May 2001\n" * 5000, encoding="utf-8")
    child = subprocess.Popen([sys.executable, "-m", "heed", "translate", str(trained_run), "-i", str(many),
                              "--batch-size", "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = child.stdout.readline()
    child.stdout.close()  # the reader goes away, as `head -1` does
    _, err = child.communicate(timeout=120)
    assert first.strip() and child.returncode == 141, (child.returncode, err)
    assert b"Traceback" not in err and b"error" not in err.lower(), err


def test_translate_input_from_a_fifo_waits_for_its_writer_as_cat_does(trained_run, tmp_path):
    """`-i FIFO`: the writer that starts a moment later is read (it used to read as empty at once)."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    writer = _write_later(fifo, "1 May 2001\n3 mars 1998\n")
    done = heed("translate", trained_run, "--input", fifo, timeout=60)
    writer.join(timeout=10)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2


def test_translate_input_from_a_pipe_whose_writer_is_gone_ends_at_once(trained_run):
    """`-i <(true)`: process substitution of a command that wrote nothing and ended reads as empty."""
    done = subprocess.run(["bash", "-c", 'exec "$0" -m heed translate "$1" -i <(true)', sys.executable,
                           str(trained_run)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "", done.stderr


@pytest.mark.parametrize("command, said", [
    ("translate", "lines translated: 3 ("),
    ("evaluate", "translating: 3 of 3 ("),
    ("align", "sentences aligned: 3 of 3 ("),
    ("attribute", "sentences attributed: 3 of 3 ("),
    ("faithfulness", "sentence passes (decoding, or reading as forced): 24 of 24 ("),
])
def test_long_commands_say_how_far_they_are_in_a_log_when_asked(trained_run, tmp_path, command, said):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("le 3 mars 1998\n1 May 2001\n5 juin 1950\n", encoding="utf-8")
    ref.write_text("1998-03-03\n2001-05-01\n1950-06-05\n", encoding="utf-8")
    args = {"translate": ["-i", src], "evaluate": ["--src", src, "--ref", ref],
            "align": ["--src", src, "--tgt", ref, "--tgt-units", "chars"],
            "attribute": ["--src", src, "-o", tmp_path / "a.json", "--steps", "2"],
            "faithfulness": ["--src", src, "--ref", ref]}[command]
    asked = invoke(command, trained_run, *args, "--progress")  # stderr is no terminal here: a log
    assert asked.exit_code == 0, asked.output
    assert said in asked.stderr and said not in asked.stdout
    quiet = invoke(command, trained_run, *args)
    assert quiet.exit_code == 0 and said not in quiet.stderr  # not asked, in a log: nothing
