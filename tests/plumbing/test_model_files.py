"""What heed writes as directories (model directories, checkpoints, exports, averaged models) is
readable at every instant, readable by others under the user's umask, checked on load, and never
replaced behind a symlink the user made."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from heed.plumbing.files import atomic_write_text, make_temp_dir, replace_dir, resolve_dir, sweep_stale

DEAD_PID = 2**22 + 12345  # above Linux's pid_max default: no such process


def _translate(heed_cli, model: Path, *extra: str):
    return heed_cli(*extra, "translate", model, "--device", "cpu", input="le 3 mars 1998\n")


# ------------------------------------------------------------------------------ the swaps


def _marker(directory: Path, value: str) -> None:
    (directory / "payload.txt").write_text(value, encoding="utf-8")
    (directory / "heed.json").write_text("{}", encoding="utf-8")


def test_replace_dir_swaps_a_complete_copy_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "m"
    replace_dir(target, lambda d: _marker(d, "one"))
    replace_dir(target, lambda d: _marker(d, "two"))
    assert (target / "payload.txt").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_replace_dir_follows_a_symlink_to_a_directory(tmp_path):
    real = tmp_path / "exports" / "v1"
    replace_dir(real, lambda d: _marker(d, "one"))
    link = tmp_path / "current"
    link.symlink_to(real)
    replace_dir(link, lambda d: _marker(d, "two"))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert (real / "payload.txt").read_text() == "two"


def test_directories_get_the_umask_permissions_not_0700(tmp_path):
    old = os.umask(0o022)
    try:
        made = make_temp_dir(tmp_path, ".x.", ".partial")
        target = replace_dir(tmp_path / "m", lambda d: _marker(d, "one"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o755
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_a_dead_writers_temp_files_are_swept_and_a_live_ones_kept(tmp_path):
    dead = tmp_path / f".out.txt.{DEAD_PID}.abcd1234.tmp"
    live = tmp_path / f".out.txt.{os.getpid()}.abcd1234.tmp"
    dead_dir = tmp_path / f".prep.{DEAD_PID}.00ff.partial"
    for path in (dead, live):
        path.write_text("half")
    dead_dir.mkdir()
    atomic_write_text(tmp_path / "out.txt", "whole\n")  # a later write of the same file sweeps
    assert not dead.exists() and live.exists()
    sweep_stale(tmp_path, ".prep.", ".partial")
    assert not dead_dir.exists()


# Run in a subprocess: the swap's second rename (NAME.old made, the new copy not yet in) kills the
# process with SIGKILL, as `kill -9` at the worst instant would. `_exchange` is off, as on a file
# system without renameat2's exchange; with it there is no such instant at all.
KILL_BETWEEN_RENAMES = """
import os, signal, sys
from pathlib import Path
import heed.plumbing.files
heed.plumbing.files._exchange = lambda a, b: False
target = Path(sys.argv[1]).absolute()
real_replace = os.replace
def replace(src, dst):
    if Path(dst).absolute() == target and Path(src).name.endswith(".tmp-dir"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(src, dst)
heed.plumbing.files.os.replace = replace
from heed.cli import main
sys.argv = ["heed", *sys.argv[2:]]
main()
"""


def _killed_between_renames(target: Path, *argv: object) -> None:
    done = subprocess.run([sys.executable, "-c", KILL_BETWEEN_RENAMES, str(target), *map(str, argv)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr
    assert not target.exists() and (target.parent / f"{target.name}.old").is_dir()


def test_export_killed_between_renames_stays_readable(trained_run, tmp_path, heed_cli):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "exp"
    assert heed_cli("export", trained_run, "-o", out).exit_code == 0
    before = _translate(heed_cli, out).stdout
    _killed_between_renames(out, "export", trained_run, "-o", out, "--int8")
    assert _translate(heed_cli, out).stdout == before  # the complete old export, read through NAME.old
    assert heed_cli("export", trained_run, "-o", out).exit_code == 0  # the next export repairs it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_average_killed_between_renames_stays_readable(trained_run, tmp_path, heed_cli):
    ckpts = trained_run / "checkpoints"
    out = tmp_path / "avg"
    assert heed_cli("average", ckpts / "last", ckpts / "best", "-o", out).exit_code == 0
    before = _translate(heed_cli, out).stdout
    _killed_between_renames(out, "average", ckpts / "last", ckpts / "best", "-o", out)
    assert _translate(heed_cli, out).stdout == before
    assert heed_cli("average", out, ckpts / "last", "-o", tmp_path / "avg2").exit_code == 0  # an input too
    assert heed_cli("average", ckpts / "last", ckpts / "best", "-o", out).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg", "avg2"]


def test_a_checkpoint_killed_between_renames_stays_readable_by_translate_and_average(trained_run, tmp_path,
                                                                                     heed_cli):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    last = run / "checkpoints" / "last"
    os.replace(last, last.with_name("last.old"))  # the instant between the renames
    assert _translate(heed_cli, last).exit_code == 0
    assert heed_cli("average", last, run / "checkpoints" / "best", "-o", tmp_path / "avg").exit_code == 0
    assert resolve_dir(last) == last.with_name("last.old")


# ---------------------------------------------------------------------------- permissions


def test_everything_heed_writes_is_readable_by_others_under_umask_022(make_config, tmp_path):
    from heed.train import train
    from heed.train.average import average_checkpoints

    old = os.umask(0o022)
    try:
        out = tmp_path / "run"
        train(make_config(out))
        avg = average_checkpoints([out / "checkpoints" / "last", out / "checkpoints" / "best"], tmp_path / "avg")
        dirs = [out / "model", out / "checkpoints" / "last", out / "checkpoints" / "best", avg]
        if shutil.which("true") and _has_onnx():
            from heed.export.onnx import export_model

            dirs.append(export_model(out, tmp_path / "exp"))
    finally:
        os.umask(old)
    for directory in dirs:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o755, directory
        for file in directory.iterdir():
            assert stat.S_IMODE(file.stat().st_mode) & 0o044 == 0o044, file


def _has_onnx() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------- checksums


def _copy(trained_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained_run / "model", tmp_path / "m"))


def test_heed_json_lists_the_sha256_of_every_file_heed_reads(trained_run):
    from heed.plumbing.files import file_digest

    model = trained_run / "model"
    files = json.loads((model / "heed.json").read_text())["files"]
    assert {"model.safetensors", "config.yaml", "tokenizers.json", "src.vocab.json", "tgt.vocab.json"} <= set(files)
    assert all(file_digest(model / name)[1] == digest for name, digest in files.items())


def test_a_flipped_weight_byte_is_refused_unless_verification_is_off(trained_run, tmp_path, heed_cli,
                                                                     assert_user_error):
    model = _copy(trained_run, tmp_path)
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01  # inside the last tensor: still a valid file, a different weight
    weights.write_bytes(bytes(data))
    assert_user_error(_translate(heed_cli, model), "model.safetensors", "sha256")
    assert _translate(heed_cli, model, "--no-verify").exit_code == 0


def test_a_file_left_out_of_heed_json_is_refused(trained_run, tmp_path, heed_cli, assert_user_error):
    model = _copy(trained_run, tmp_path)
    meta = json.loads((model / "heed.json").read_text())
    del meta["files"]["tgt.vocab.json"]
    (model / "heed.json").write_text(json.dumps(meta))
    assert_user_error(_translate(heed_cli, model), "tgt.vocab.json", "not listed")


def test_a_heed_json_without_checksums_is_refused_unless_verification_is_off(trained_run, tmp_path, heed_cli,
                                                                             assert_user_error):
    model = _copy(trained_run, tmp_path)
    meta = json.loads((model / "heed.json").read_text())
    del meta["files"]  # deleting the table must not turn the check off
    (model / "heed.json").write_text(json.dumps(meta))
    assert_user_error(_translate(heed_cli, model), "heed.json", "no sha256", "--no-verify")
    assert _translate(heed_cli, model, "--no-verify").stdout == _translate(heed_cli, trained_run).stdout


def _nan_model(trained_run: Path, target: Path) -> Path:
    from model_files import rehash
    from safetensors.torch import load_file, save_file

    shutil.copytree(trained_run / "model", target)
    weights = load_file(str(target / "model.safetensors"))
    first = min(k for k, v in weights.items() if v.is_floating_point())
    weights[first].view(-1)[0] = float("nan")
    save_file(weights, str(target / "model.safetensors"))
    return rehash(target)


@pytest.mark.parametrize("command", ["translate", "evaluate", "average", "export"])
def test_non_finite_weights_are_refused_by_every_command(command, trained_run, tmp_path, heed_cli,
                                                         assert_user_error, tiny_corpus):
    bad = _nan_model(trained_run, tmp_path / "nan")
    argv = {"translate": ["translate", bad],
            "evaluate": ["evaluate", bad, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"]],
            "average": ["average", bad, trained_run / "checkpoints" / "last", "-o", tmp_path / "avg"],
            "export": ["export", bad, "-o", tmp_path / "exp"]}[command]
    if command == "export":
        pytest.importorskip("onnx")
    result = heed_cli(*argv, input="le 3 mars 1998\n")
    assert_user_error(result, "model.safetensors", "NaN or infinite")
    assert not (tmp_path / "avg").exists() and not (tmp_path / "exp").exists()


def test_a_full_disk_at_the_first_checkpoint_is_one_line_naming_the_directory(tiny_config, tmp_path, heed_cli,
                                                                                monkeypatch):
    import yaml
    from safetensors import SafetensorError

    import heed.checkpoint

    def full(tensors, path):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                              'message: "No space left on device" })')

    monkeypatch.setattr(heed.checkpoint, "save_file", full)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(json.loads(json.dumps(tiny_config(tmp_path / "out"), default=str))),
                      encoding="utf-8")
    result = heed_cli("train", config, "--no-progress")
    assert result.exit_code == 2 and "Traceback" not in result.output
    last = result.stderr.strip().splitlines()[-1]  # after the training log's lines
    assert last == f"error: {tmp_path / 'out' / 'checkpoints' / 'last'}: cannot write: no space left on device"
    leftovers = [p.name for p in (tmp_path / "out").rglob("*") if ".tmp" in p.name]
    assert leftovers == []


@pytest.mark.parametrize("command", ["export", "average"])
def test_dash_o_on_a_symlink_to_an_earlier_output_replaces_its_target_and_keeps_the_link(
        command, trained_run, tmp_path, heed_cli):
    """`-o current` where current -> v1 (an earlier export or averaged model): v1 gets the new
    output, current stays the link (a directory replaced the link before)."""
    if command == "export":
        pytest.importorskip("onnxruntime")
    ckpts = trained_run / "checkpoints"
    argv = {"export": ["export", trained_run], "average": ["average", ckpts / "last", ckpts / "best"]}[command]
    real = tmp_path / "v1"
    assert heed_cli(*argv, "-o", real).exit_code == 0
    stamp = (real / ("manifest.json" if command == "export" else "heed.json")).stat().st_mtime_ns
    link = tmp_path / "current"
    link.symlink_to(real)
    result = heed_cli(*argv, "-o", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert (real / ("manifest.json" if command == "export" else "heed.json")).stat().st_mtime_ns != stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["current", "v1"]


def test_no_tracked_file_is_ignored_by_gitignore():
    """.gitignore once listed files the repository tracks (docs/explorer.png and two docs)."""
    import shutil as sh

    repo = Path(__file__).resolve().parents[2]
    if sh.which("git") is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-ci", "--exclude-standard"], cwd=repo, capture_output=True,
                            text=True, check=True).stdout.split()
    assert listed == []
    ignored = subprocess.run(["git", "check-ignore", "-q", "data/multi30k/train.de"], cwd=repo)
    assert ignored.returncode == 0  # the quick start's and `heed data get`'s data/ folder
