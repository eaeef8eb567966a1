"""`heed train`, `prepare`, `average`, `config` and `demo`: the commands that make models."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console

from heed.cli.app import INTERRUPTED, escape, friendly_errors, stderr
from heed.cli.progress import PhaseProgress
from heed.errors import DataError, HeedError
from heed.plumbing.heartbeat import PROGRESS_LINE_SECONDS

if TYPE_CHECKING:
    from heed.config import Config
    from heed.plumbing.distributed import World
    from heed.train import TrainResult


@friendly_errors
def train(
    config: Path = typer.Argument(..., help="YAML config (see configs/*.yaml)."),
    set_: list[str] = typer.Option([], "--set", metavar="FIELD=VALUE",
                                   help="Override a config field, e.g. --set train.epochs=20 (repeatable)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in the output directory exactly."),
    allow_data_change: bool = typer.Option(
        False, "--allow-data-change", help="With --resume: go on even if a corpus file changed since the checkpoint."),
    output_dir: Path | None = typer.Option(None, "--output-dir", help="Where to write (overrides output_dir)."),
    init: Path | None = typer.Option(None, "--init", help="Fine-tune: start from this model directory (an "
                                        "imported pretrained translator, or any heed model), with its architecture, "
                                        "tokenizers and vocabularies (overrides train.init)."),
    progress: bool | None = typer.Option(None, "--progress/--no-progress",
                                            help="A progress bar on a terminal; where stderr is a log, also a line "
                                                 f"every {PROGRESS_LINE_SECONDS:g} s besides the one per log_every. "
                                                 "Default: a bar on a terminal, a line per log_every elsewhere."),
    processes: int = typer.Option(1, "--processes", min=1, max=1024, help="Train data-parallel in this many "
                                  "processes on this machine (gloo on the CPU, one GPU each with CUDA), as "
                                  "torchrun --nproc-per-node N would; Ctrl-C stops them all cleanly."),
    both_directions: bool = typer.Option(False, "--both-directions", help="Then train the same config the other "
                                         "way (data.reverse flipped, guided alignment's links too) into "
                                         "OUTPUT_DIR-reverse, and record the pair in both model directories "
                                         "(heed.pair.json): heed align symmetrises with the reverse model."),
) -> None:
    """Train a model; checkpoints, metrics.jsonl and the model directory go to the output directory.

    Ctrl-C or SIGTERM (what Slurm sends before it kills a job) finishes the step, saves
    checkpoints/last, prints the command that resumes this run, and exits with 130 (Ctrl-C) or
    143 (SIGTERM): 128 + the signal's number, as a shell reports a process the signal ended.

    Several processes: `--processes N` on one machine, or torchrun (`torchrun --nproc-per-node N
    -m heed train ...`) across machines; a resume needs as many processes as the run had.

    --both-directions: the run, then its reverse (OUTPUT_DIR-reverse), each as this command would
    train it; the pair is recorded when both are done."""
    from heed.train.setup import load_run_config

    overrides = list(set_) + ([f"output_dir={output_dir.absolute()}"] if output_dir is not None else []) \
        + ([f"train.init={init.absolute()}"] if init is not None else [])
    cfg = load_run_config(config, overrides)  # train.init's model merged in
    if not both_directions:
        _train_one(cfg, config, set_, output_dir, init, resume, allow_data_change, progress, processes)
        return
    from heed.train.pair import record_pair, reverse_overrides

    if resume or processes > 1:
        raise HeedError("--both-directions trains two runs in turn in one process: leave out "
                        f"{'--resume' if resume else '--processes'} (resume or spread each run with its own heed train)")
    backwards = reverse_overrides(cfg)  # refused before anything trains
    reverse_cfg = load_run_config(config, [*overrides, *backwards])
    forward = _train_one(cfg, config, set_, output_dir, init, resume, allow_data_change, progress, processes)
    stderr().print(f"the other direction (--set {' --set '.join(backwards)}):", markup=False, soft_wrap=True)
    reverse = _train_one(reverse_cfg, config, [*set_, *backwards], None, init, resume, allow_data_change, progress,
                         processes)
    if forward is not None and reverse is not None:
        record_pair(forward, reverse)
        typer.echo(f"pair recorded: {forward} <-> {reverse} (heed.pair.json)")


def _train_one(cfg: Config, config: Path, set_: list[str], output_dir: Path | None, init: Path | None, resume: bool,
               allow_data_change: bool, progress: bool | None, processes: int) -> Path | None:
    """One run of `heed train` as configured; its model directory (None on ranks other than 0)."""
    import shlex

    from heed.plumbing.distributed import World
    from heed.train import train as run_training

    world = World.from_env()
    if processes > 1 and world.is_distributed and world.size != processes:
        raise HeedError(f"--processes {processes}, but torchrun's WORLD_SIZE is {world.size}; give one of them")
    console = stderr()
    own = _own_arguments(config, set_, output_dir, init, allow_data_change, progress, processes)
    if processes > 1 and not world.is_distributed:
        from heed.plumbing.launch import launch

        raise typer.Exit(launch(["train", *own, *(["--resume"] if resume else [])], processes))
    if world.is_distributed:
        from heed.plumbing.launch import die_with_launcher

        die_with_launcher()  # a rank of `--processes N` ends with its launcher, even one killed with -9
    launcher, launcher_note = _how_started(world, processes)
    again = [*launcher, "train", *own, "--resume"]
    try:
        result = run_training(cfg, resume=resume, allow_data_change=allow_data_change, console=console,
                              progress=progress)
    except KeyboardInterrupt:
        if not world.is_main:  # with several processes only rank 0 speaks
            raise typer.Exit(INTERRUPTED) from None
        console.print(f"\naborted. The last checkpoint ({cfg.output_dir / 'checkpoints' / 'last'}) is intact; "
                      f"resume with: {shlex.join(again)}", style="yellow", markup=False, soft_wrap=True)
        raise typer.Exit(INTERRUPTED) from None
    if result.stop_reason == "interrupted":
        _stopped(result, cfg, again, launcher_note, console)
    # On a terminal the run's closing line ("model: DIR  (stopped: ...)") already names it on the same
    # screen; stdout gets its own line where it is not that screen (a pipe, a file, a script's capture).
    if result.is_main and not (console.is_terminal and sys.stdout.isatty()):
        typer.echo(f"model written to {result.model_dir}")
    return result.model_dir if result.is_main else None


def _own_arguments(config: Path, set_: list[str], output_dir: Path | None, init: Path | None, allow_data_change: bool,
                   progress: bool | None, processes: int) -> list[str]:
    """This run's own command line after `heed train`, so the printed resume continues it: same
    overrides, same directory, same number of processes."""
    return [str(config), *(arg for item in set_ for arg in ("--set", item)),
            *(["--output-dir", str(output_dir)] if output_dir is not None else []),
            *(["--init", str(init)] if init is not None else []),
            *(["--allow-data-change"] if allow_data_change else []),
            *([] if progress is None else ["--progress" if progress else "--no-progress"]),
            *(["--processes", str(processes)] if processes > 1 else [])]


def _stopped(result: TrainResult, cfg: Config, again: list[str], launcher_note: str, console: Console) -> NoReturn:
    """A run stopped by a signal: rank 0 prints the command that resumes it (and the one that scores
    its best model so far); every rank exits with 130 (Ctrl-C) or 128 + the signal's number."""
    import shlex

    from heed.train import score_command

    if result.is_main:
        # soft_wrap: a command cut across lines could not be pasted back.
        console.print(f"resume with: {shlex.join(again)}{launcher_note}", markup=False, soft_wrap=True)
        score = None if result.model_dir is None else score_command(cfg, result.model_dir, resume_command=again,
                                                                      step=result.steps)
        if score is not None:
            console.print(f"score the best model on the test set with: {shlex.join(score)}", markup=False,
                          soft_wrap=True)
    raise typer.Exit(INTERRUPTED if result.stop_signal is None else 128 + result.stop_signal)


def _how_started(world: World, processes: int) -> tuple[list[str], str]:
    """How this run was started, for the commands it prints: (the launcher, a note). `heed` (with
    --processes among the arguments), or torchrun's command line when torchrun started it on one
    machine (`torchrun --nproc-per-node N -m heed`); across machines heed cannot rebuild torchrun's
    command, so the note says to start it as before."""
    if not world.is_distributed or processes > 1:
        return ["heed"], ""
    if int(os.environ.get("LOCAL_WORLD_SIZE", world.size)) == world.size:
        return ["torchrun", "--nproc-per-node", str(world.size), "-m", "heed"], ""
    return ["heed"], f" (on every machine, started by torchrun as before: {world.size} processes in all)"


@friendly_errors
def prepare(
    config: Path | None = typer.Argument(None, help="YAML config whose data.train corpus to prepare."),
    set_: list[str] = typer.Option([], "--set", metavar="FIELD=VALUE", help="Override a config field (repeatable)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="The directory to write (new or empty; "
                                          "default: OUTPUT_DIR/prepared)."),
    tokenizers: Path | None = typer.Option(None, "--tokenizers", help="Reuse the tokenizers and vocabularies in "
                                              "this directory (a model directory or a prepared corpus)."),
    sample: int = typer.Option(1_000_000, "--sample", min=1, help="SentencePiece tokenizers train on a uniform "
                               "sample of at most this many pairs (word and char vocabularies count every pair)."),
    shard_tokens: int = typer.Option(1 << 25, "--shard-tokens", min=1, help="Close a shard once it holds this many "
                                     "token ids (both sides)."),
    verify: Path | None = typer.Option(None, "--verify", help="Instead of preparing: check a prepared corpus's "
                                          "files against its manifest (sizes and sha256)."),
    progress: bool | None = typer.Option(None, "--progress/--no-progress",
                                            help="Progress bars (default: on a terminal)."),
) -> None:
    """Tokenize a training corpus once into memory-mapped shards, for corpora larger than memory;
    train on them with `data.prepared: DIR` in place of `data.train`. Streams the corpus (twice when
    tokenizers are trained, once with --tokenizers) and ends with a one-line summary."""

    if verify is not None:
        if config is not None or set_ or output is not None or tokenizers is not None:
            raise HeedError("--verify DIR checks a prepared corpus; give it alone, without CONFIG or other options")
        from heed.data.codec import Codec
        from heed.data.prepared import read_manifest, verify_files, verify_ids

        started = time.perf_counter()
        manifest = read_manifest(verify)
        checked = verify_files(verify, manifest, hashes=True)
        try:
            codec = Codec.load(verify)
        except HeedError as e:
            raise DataError(str(e)) from None
        verify_ids(verify, manifest, (len(codec.src_vocab), len(codec.tgt_vocab)))
        shards = len(manifest["shards"])
        typer.echo(f"{verify}: {manifest['sentences']:,} sentence pairs in {shards} shard{'s' * (shards != 1)} match "
                   f"the manifest (sizes and sha256 of {checked / 1e6:,.1f} MB), every id within its vocabulary: "
                   f"{time.perf_counter() - started:.1f} s")
        return
    if config is None:
        raise HeedError("give a CONFIG to prepare (or --verify DIR to check a prepared corpus)")
    from heed.data.prepare import prepare as run_prepare
    from heed.train.setup import load_run_config

    cfg = load_run_config(config, list(set_))  # a run's data: a fine-tuning run's with train.init's tokenizers
    bars = PhaseProgress(enabled=progress)
    try:
        result = run_prepare(cfg, output if output is not None else cfg.output_dir / "prepared",
                             tokenizers_from=tokenizers, sample_pairs=sample, shard_tokens=shard_tokens,
                             progress=bars, warn=bars.warn)
    finally:
        bars.close()
    typer.echo(result.summary())


@friendly_errors
def average(
    checkpoints: list[Path] = typer.Argument(..., metavar="CHECKPOINT...",
                                             help="Two or more checkpoint directories (runs/x/checkpoints/last, "
                                                  "best) or model directories of one architecture."),
    output: Path = typer.Option(..., "--output", "-o", help="The model directory to write (replaced if it holds "
                                "an earlier model directory)."),
) -> None:
    """Average checkpoints of one model into one model directory: each weight is the elementwise mean
    of the checkpoints' (in float64, stored in the original dtype). Checkpoints a few evaluations
    apart in one training run average well; independently trained models do not (translate with
    them as an ensemble instead: heed translate A B). The inputs must share the architecture
    (model: config) and the tokenizers and vocabularies; the output has the first's config and
    lists the inputs in its heed.json."""
    from heed.train.average import average_checkpoints

    def warn(message: str) -> None:
        stderr().print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)

    out = average_checkpoints(checkpoints, output, warn=warn)
    typer.echo(f"averaged {len(checkpoints)} checkpoints -> {out}")


@friendly_errors
def config_command() -> None:
    """Print the configuration reference: every config field with its type, default, limits and
    description (Markdown; the same text as docs/config.md)."""
    from heed.config_reference import reference

    typer.echo(reference(), nl=False)


@friendly_errors
def demo(
    output_dir: Path = typer.Option(Path("runs/demo"), "--output-dir", help="Where the demo writes its run."),
    quick: bool = typer.Option(False, "--quick", help="A small, fast run (a smoke test, not the real result)."),
    set_: list[str] = typer.Option([], "--set", metavar="FIELD=VALUE", help="Override a field of configs/demo.yaml."),
    progress: bool | None = typer.Option(None, "--progress/--no-progress"),
) -> None:
    """Generate the multilingual dates task, train a Luong-attention model on it, show translations,
    test accuracy and an attention heatmap."""
    from heed.demo import run_demo

    try:
        # soft_wrap: a log off a terminal keeps each line whole (rich would wrap at 80 columns).
        run_demo(output_dir=output_dir, quick=quick, overrides=list(set_),
                 console=Console(highlight=False, soft_wrap=True), progress=progress)
    except KeyboardInterrupt:
        stderr().print("\n[yellow]demo aborted[/]")
        raise typer.Exit(INTERRUPTED) from None
