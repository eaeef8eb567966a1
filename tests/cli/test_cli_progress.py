"""`--progress` where stderr is a log (issue 56): a plain line every few seconds while training and
translating run, not only at their end; the final line once; a count that never passes its total.
The interval is shortened by $HEED_PROGRESS_SECONDS (heed.plumbing.heartbeat) so the tests need not
wait 5 s a line."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_helpers import assert_user_error, invoke
from rich.console import Console

from heed.plumbing.heartbeat import PROGRESS_LINE_SECONDS, SECONDS_VARIABLE, line_seconds


def _heed(args: list, stderr: Path, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """`python -m heed ARGS` with stderr written to the file `stderr` (a log), lines every 0.05 s."""
    env = {**os.environ, SECONDS_VARIABLE: "0.05", "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "heed", *map(str, args)], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=stderr.open("w"), env=env)


def _wait_for(path: Path, fragment: str, proc: subprocess.Popen, seconds: float = 120) -> bool:
    """Whether `fragment` shows in the file `path` while `proc` still runs (False once it ended)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and proc.poll() is None:
        if fragment in path.read_text(encoding="utf-8"):
            return proc.poll() is None
        time.sleep(0.02)
    return False


def test_the_interval_is_five_seconds_unless_the_tests_shorten_it(monkeypatch):
    monkeypatch.delenv(SECONDS_VARIABLE, raising=False)
    assert line_seconds() == PROGRESS_LINE_SECONDS == 5.0
    monkeypatch.setenv(SECONDS_VARIABLE, "0.5")
    assert line_seconds() == 0.5


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_interval_is_one_line_naming_the_variable(trained_run, tmp_path, value):
    src = tmp_path / "a.src"
    src.write_text("le 3 mars 1998\n", encoding="utf-8")
    result = invoke("translate", trained_run, "-i", src, "--progress", env={SECONDS_VARIABLE: value})
    assert_user_error(result, SECONDS_VARIABLE, "a number above 0")


def test_translate_progress_to_a_log_writes_lines_during_the_run_and_the_final_line_once(trained_run, tmp_path):
    """stdin is a pipe kept open: the first chunk is not even read in full, yet lines come; once it
    closes, the final line comes once, after every other."""
    log = tmp_path / "log"
    proc = _heed(["translate", trained_run, "--progress"], log, stdin=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"le 3 mars 1998\n1 May 2001\n5 juin 1950\n")
        proc.stdin.flush()
        assert _wait_for(log, "lines translated: 0 (", proc), log.read_text(encoding="utf-8")
        proc.stdin.close()
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, log.read_text(encoding="utf-8")
    assert len(out.decode().splitlines()) == 3
    lines = log.read_text(encoding="utf-8").splitlines()
    assert all(line.startswith("lines translated: ") for line in lines), lines
    assert len(lines) >= 2 and lines[-1].startswith("lines translated: 3 (")
    assert sum(line.startswith("lines translated: 3 (") for line in lines) == 1  # the final line, once


def test_train_progress_to_a_log_writes_lines_during_the_run(tiny_config, tmp_path):
    """Before the flag gave a rich bar, which draws nothing on a file until the run ends."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config(tmp_path / "out", epochs=6, log_every=1000)), encoding="utf-8")
    log = tmp_path / "log"
    proc = _heed(["train", config, "--progress"], log)
    try:
        assert _wait_for(log, " s\n", proc), log.read_text(encoding="utf-8")  # "step 3/42 | epoch 0.43 | 0 s"
        proc.communicate(timeout=300)
    finally:
        proc.kill()
    text = log.read_text(encoding="utf-8")
    assert proc.returncode == 0, text
    beats = [line for line in text.splitlines() if line.startswith("step ") and line.endswith(" s")]
    assert beats and text.index(beats[0]) < text.index("model:"), text
    for line in beats:
        done, total = map(int, line.split()[1].split("/"))
        assert done <= total, line
    quiet = invoke("train", config, "--set", f"output_dir={tmp_path / 'quiet'}",
                   env={SECONDS_VARIABLE: "0.05"})  # not asked, in a log: no heartbeat
    assert quiet.exit_code == 0, quiet.output
    assert not [line for line in quiet.stderr.splitlines() if line.startswith("step ") and line.endswith(" s")]


def test_a_count_past_its_estimated_total_grows_the_total(monkeypatch):
    import heed.cli.progress

    screen = io.StringIO()
    monkeypatch.setattr(heed.cli.progress, "stderr", lambda: Console(file=screen, force_terminal=True, width=100))
    with heed.cli.progress.Progress("translating", total=3) as bar:
        bar.advance(5)
        assert bar._bar is not None and bar._bar.tasks[0].total == 5
    log = io.StringIO()
    monkeypatch.setattr(heed.cli.progress, "stderr", lambda: Console(file=log, force_terminal=False))
    with heed.cli.progress.Progress("translating", total=3, enabled=True) as bar:
        bar.advance(5)
    assert log.getvalue().startswith("translating: 5 of 5 (")


def test_the_training_bar_grows_its_total_rather_than_count_past_it(tmp_path):
    from heed.train.log import TrainLog

    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    with TrainLog(tmp_path, console, total_steps=4, start_step=0, progress=None) as log:
        for step in range(1, 7):
            log.advance(step, step / 4)
        assert log.total_steps == 6 and log.progress is not None and log.progress.tasks[0].total == 6


def test_python_m_heed_scratch_says_how_far_an_epoch_is(monkeypatch, capsys):
    """A 2-minute epoch printed nothing until it ended: now a line every few seconds within it."""
    from heed.scratch.train import main

    monkeypatch.setenv(SECONDS_VARIABLE, "0.000001")  # every batch, for the test
    main(["--epochs", "1", "--train-size", "200", "--eval-size", "20", "--hidden", "8", "--embed", "4",
          "--batch-size", "50"])
    lines = capsys.readouterr().out.splitlines()
    within = [line for line in lines if line.startswith("epoch   1  batch ")]
    assert [line.split()[3] for line in within] == ["1/4", "2/4", "3/4"], lines  # the epoch's own line says 4/4
    report = next(k for k, line in enumerate(lines) if line.startswith("epoch   1 ") and " s  loss " in line)
    assert lines.index(within[-1]) < report
