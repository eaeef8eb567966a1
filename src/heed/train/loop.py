"""The training loop: Adam, clipping, label smoothing, LR schedules, dev evaluation, early stopping,
atomic checkpoints and exact resume.

    for each epoch: batches = token_batches(train, seed, epoch)        # the same order on resume
        for each batch: loss = label-smoothed cross-entropy per target token
                        backward, clip, Adam step                       # one "step"
                        every eval_every steps (or at epoch end): dev loss, greedy decode ->
                        BLEU / chrF / exact match; best? -> checkpoints/best + model/; always
                        checkpoints/last

Exact resume: `checkpoints/last` holds the weights, Adam's state, the torch RNG states (dropout),
the LR schedule, the best metric and patience, and the position (epoch, batches done). Batches come
from `token_batches(seed, epoch)`, so on resume the epoch's order is rebuilt and the batches already
done are skipped: a resumed run continues the same loss sequence as one that never stopped. With
`data.prepared` (heed prepare) the epoch is a lazy `PreparedEpoch` over the shards on disk, rebuilt
from (seed, epoch) the same way (heed.data.prepared).

Safety: the output directory is locked for the run (heed.plumbing.lock), and nothing is created there before
the config, device and data are known good. A non-finite loss stops the run with a HeedError naming
the step, and the weights are checked before every save: no checkpoint ever holds NaN or Inf.
`metrics.jsonl` is strict JSON (a non-finite value is written as null). Ctrl-C and SIGTERM (what
Slurm sends before it kills a job) finish the step, save `last` and stop. Each checkpoint records a
fingerprint of the corpus files (size, sha256): a resume onto changed data is refused unless allowed.

Randomness: the model is initialised and trained inside `torch.random.fork_rng`, seeded with
`train.seed`, so the caller's global RNG state is the same after `train()` as before.

Updates: one update sums the gradients of `train.accumulate` batches per process (and of every
process under torchrun, through DistributedDataParallel), normalised by the target tokens of the
whole update, so W processes x k batches make the update one process makes from those W * k
batches. Steps, the LR schedule, `max_steps`, `eval_every` and `log_every` count updates. Under
torchrun (heed.plumbing.distributed) every rank draws the same batch stream and takes its share of each
update; only rank 0 evaluates, writes and prints, and hands its decisions to the others.
"""
from __future__ import annotations

import contextlib
import gc
import math
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from rich.console import Console
from rich.markup import escape
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from heed.checkpoint import (
    METRICS_FILE,
    RECENT_PREFIX,
    WEIGHTS_FILE,
    Checkpoint,
    TrainerState,
    load_weights,
    load_weights_into,
    recent_model_dirs,
    resolve_dir,
    rng_states,
    save_checkpoint,
    save_model_dir,
)
from heed.config import Config, positions_problem
from heed.data.batching import Batch, token_batches
from heed.data.corpus import Pair
from heed.data.prepared import PreparedCorpus
from heed.decode_config import DecodeConfig
from heed.errors import ConfigError, HeedError
from heed.evaluate import Scores, evaluate
from heed.explain.forced import corpus_aer
from heed.explain.history import attention_entropy
from heed.nn.build import build_model
from heed.nn.protocol import HeadsModel, TrainableModel
from heed.plumbing.distributed import (
    RankShare,
    World,
    all_reduce_sum,
    choose_backend,
    collective_errors,
    gather_to_main,
    process_group,
    rank_device,
    rank_shares,
    run_on_main,
    updates_in,
)
from heed.plumbing.runtime import (
    check_bf16,
    compiler_problem,
    default_bf16,
    limit_onednn_cache,
    resolve_device,
    torch_threads,
)
from heed.train.alignment import (
    GuidedAlignment,
    alignment_loss,
    alignment_reading,
    alignment_target,
    guided_alignment,
    shift_att_target,
)
from heed.train.dev import DevResult, decode_pairs, dev_batches, dev_loss
from heed.train.log import TrainLog, Window, best_so_far
from heed.train.resume import saved_step
from heed.train.schedule import HIGHER_IS_BETTER, LRSchedule, better, reached
from heed.train.setup import RunData, RunSetup, run_updates

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

# ----------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class TrainResult:
    output_dir: Path
    model_dir: Path | None  # None only if training stopped before its first evaluation
    steps: int
    epoch: float  # epochs done, fractional
    metric: str
    best_value: float | None
    best_step: int | None
    stop_reason: str  # "epochs" | "max_steps" | "max_minutes" | "early_stopping" | "target" | "interrupted" | "finished"
    last_dev: DevResult | None
    test: Scores | None
    seconds: float
    stop_signal: int | None = None  # the signal (SIGINT, SIGTERM) behind an "interrupted" stop, if one was
    is_main: bool = True  # False on ranks other than 0 of a torchrun run, which write and print nothing


# ----------------------------------------------------------------------------------- trainer


class _Divergence:
    """The first step whose loss was not finite, kept on the loss's device: noting it queues two tiny
    kernels and never waits for the GPU; `first()` reads it (one wait)."""

    def __init__(self, device: torch.device) -> None:
        self.step = torch.zeros((), dtype=torch.int64, device=device)  # 0 = every loss so far finite
        self.loss = torch.zeros((), dtype=torch.float64, device=device)

    def note(self, loss: torch.Tensor, step: int) -> None:
        first = (self.step == 0) & ~torch.isfinite(loss)
        self.step.masked_fill_(first, step)
        self.loss = torch.where(first, loss.double(), self.loss)

    def first(self) -> tuple[int, float] | None:
        """(step, loss) of the first non-finite loss, or None."""
        step = int(self.step)
        return None if step == 0 else (step, float(self.loss))


class _Targets(NamedTuple):
    """A batch as `Seq2Seq.loss` reads it (heed.nn.loss.TargetBatch)."""

    src: Tensor  # (batch, src_len)
    src_lengths: Tensor  # (batch,)
    tgt_in: Tensor  # (batch, tgt_len)
    tgt_out: Tensor  # (batch, tgt_len)


class _BatchLoss(nn.Module):
    """The model's summed, label-smoothed training loss of one batch, with the guided alignment loss
    (heed.train.alignment) when asked, as a module whose `forward` does it all:
    DistributedDataParallel syncs gradients only for work done inside the `forward` of the module it
    wraps."""

    def __init__(self, model: TrainableModel, *, label_smoothing: float, guide: GuidedAlignment | None) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing
        self.guide = guide

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor, guided: bool = False,
                target: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """src (batch, src_len), src_lengths (batch,), tgt_in and tgt_out (batch, tgt_len) -> (what is
        backpropagated: the model's loss (`Seq2Seq.loss(...).total`) summed over the target tokens,
        plus with `guided` the weighted alignment loss; the alignment loss alone, or None). `target`
        (batch, tgt_len, src_len): the supervision of links; None with `guided` reads the model's
        own shift-att. Tensors, not the Batch, go in, so DDP moves and scans them as it does any
        module's inputs."""
        targets = _Targets(src, src_lengths, tgt_in, tgt_out)
        guide = self.guide
        if not guided or guide is None:
            return self.model.loss(targets, label_smoothing=self.label_smoothing).total, None
        out = self.model.loss(targets, label_smoothing=self.label_smoothing,  # type: ignore[call-arg]
                              attention_layer=guide.layer)
        assert out.attention is not None
        if target is None:
            target = shift_att_target(out.attention, src_lengths, (tgt_out != self.model.pad_id).sum(1))
        align = alignment_loss(out.attention, guide.heads, target)
        return out.total + guide.weight * align.to(out.total.dtype), align.detach()


class Trainer:
    """One training run, opened whole at construction and trained by `run()`:

        with Trainer(config) as trainer:  # directory checked and locked, data loaded, model built or restored
            result = trainer.run()

    `train(config)` does just that. Construction sets everything the run holds (data, model,
    optimizer, schedule, state, log) once; leaving the `with` gives back what it holds (the
    directory's lock, the process group, torch's thread count and RNG state). A mistake found while
    opening (a config the data refutes, a run already in the directory) raises from the constructor
    and gives everything back."""

    def __init__(self, config: Config, *, resume: bool = False, allow_data_change: bool = False,
                 console: Console | None = None, progress: bool | None = None, world: World | None = None) -> None:
        self._opened_at = time.perf_counter()
        problem = positions_problem(config)
        if problem is not None:
            raise ConfigError(problem, field="model.max_positions")
        self.config = config
        self.resume = resume
        self.allow_data_change = allow_data_change
        self.world = World.from_env() if world is None else world
        self.console = console if self.world.is_main else None  # the other ranks print only errors
        self.progress = progress
        self.output_dir = Path(config.output_dir)
        self.ckpt_dir = self.output_dir / "checkpoints"
        self.model_dir = self.output_dir / "model"
        self.device = rank_device(resolve_device(config.train.device), self.world)
        self.backend = choose_backend(config.train.backend, self.device)
        self.bf16 = default_bf16(self.device) if config.train.bf16 is None else config.train.bf16
        if self.bf16:
            check_bf16(self.device, what="train.bf16")
        self.metric = config.train.early_stopping.metric
        self.higher = HIGHER_IS_BETTER[self.metric]
        self._stop_requested = False
        self._stop_signal: int | None = None
        self._divergence = _Divergence(self.device)
        # Reading the loss waits for the device: on the CPU that costs nothing, so every step's loss
        # is read (0.4 us; the device-side flag costs 15 us a step there); on a GPU the flag is read
        # at each log line and before each save.
        self._check_loss_every_step = self.device.type == "cpu"
        self._other_ranks_rng: list[dict[str, Tensor]] = []  # ranks 1.. of a torchrun run, for rank 0's saves
        self._agreed = (False, False)  # (stop requested, out of time) as every rank agreed after the last update
        self._run_start_time = time.perf_counter()
        self._ran = False
        self._held = contextlib.ExitStack()  # given back by __exit__, or here if opening fails
        try:
            held = self._held
            limit_onednn_cache(self.bf16)
            held.enter_context(torch_threads(config.train.threads))
            held.enter_context(torch.random.fork_rng(devices=[self.device.index or 0] if self.device.type == "cuda"
                                                     else []))
            held.enter_context(process_group(self.world, self.device, self.backend))
            held.callback(self._unwrap)  # before the group is left (an ExitStack unwinds last in, first out)
            torch.manual_seed(config.train.seed)
            checkpoint, fingerprint, self.data = RunSetup(config, resume=resume, allow_data_change=allow_data_change,
                                                       world=self.world, console=self.console).open(held)
            self.resumed_from = None if checkpoint is None else checkpoint.directory
            self.model, self.optimizer, self.schedule, self.state = self._build(self.data, checkpoint, fingerprint)
            self.guide = guided_alignment(config, self.data.train_links, self.data.corpora)
            # step of checkpoints/last, once there is one
            self._last_saved: int | None = self.state.step if checkpoint is not None else None
            # the forward pass runs under torch.compile (train.compile, and a compiler)
            self._compiled = self._compile(self.model)
            self.batch_loss = self._batch_loss(self.model)
            self._first_batches = self._batches(self.state.epoch)
            self.updates_per_epoch = updates_in(len(self._first_batches), world=self.world,
                                                accumulate=config.train.accumulate)
            self.total_steps = run_updates(len(self._first_batches), config.train, self.world)
            self.log = TrainLog(self.output_dir, self.console, total_steps=max(self.total_steps, self.state.step),
                            start_step=self.state.step, progress=self.progress, writes=self.world.is_main)
            if self.resumed_from is not None:
                self.log.restore(self.resumed_from / METRICS_FILE)
        except BaseException:
            self._held.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._held.close()

    # -- public ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop cleanly after the current step (saving `last`); what Ctrl-C does."""
        self._stop_requested = True

    def run(self) -> TrainResult:
        """Train until the run's end (epochs, max_steps, max_minutes, early stopping, a target, or
        a stop request), evaluating and saving on the way, then score the test set. Once."""
        if self._ran:
            raise RuntimeError("Trainer.run() trains once; open another Trainer to train again")
        self._ran = True
        return self._loop()

    def _unwrap(self) -> None:
        """Drop DistributedDataParallel (and its gradient reducer, which holds the process group)
        while the group still exists. Left to the garbage collector, the reducer outlived the group
        and the rank aborted at exit ("terminate called without an active exception")."""
        wrapped = getattr(self, "batch_loss", None)
        if isinstance(wrapped, DistributedDataParallel):
            self.batch_loss = wrapped.module
            gc.collect()  # the wrapper's hooks make reference cycles: free it now, not at exit

    def _build(self, data: RunData, checkpoint: Checkpoint | None,
               fingerprint: dict[str, Any]) -> tuple[TrainableModel, torch.optim.Adam, LRSchedule, TrainerState]:
        """The model, optimizer, schedule and state, fresh (from the seeded global RNG) or restored
        from `checkpoint`."""
        cfg, world = self.config, self.world
        model = build_model(cfg.model, src_vocab_size=len(data.codec.src_vocab),
                            tgt_vocab_size=len(data.codec.tgt_vocab),
                            source_to_target=data.codec.source_to_target(), **data.codec.special_ids()).to(self.device)
        # fused: one kernel for every parameter (0.8 vs 1.5 ms a step for the 286k-parameter
        # dates model on one CPU thread; same update up to rounding)
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, betas=cfg.train.betas,
                                     weight_decay=cfg.train.weight_decay, fused=True)
        schedule = LRSchedule(cfg.train.schedule, base_lr=cfg.train.lr, higher_is_better=self.higher)
        state = TrainerState(world_size=world.size)
        if checkpoint is not None:
            checkpoint.restore(model, optimizer, rank=world.rank)
            state = checkpoint.trainer
            if state.schedule is not None:
                schedule.load_state_dict(state.schedule)
        else:
            if data.init is not None:  # fine-tuning (under torchrun rank 0's, which DistributedDataParallel hands on)
                load_weights_into(model, data.init.directory)
            if world.rank > 0:
                # Same initial weights on every rank (seeded above), but each rank its own dropout masks.
                torch.manual_seed(cfg.train.seed + 1_000_003 * world.rank)
        state.data = fingerprint
        return model, optimizer, schedule, state

    def _batch_loss(self, model: TrainableModel) -> nn.Module:
        """The model's loss of a batch as one module; under torchrun wrapped in DistributedDataParallel."""
        batch_loss: nn.Module = _BatchLoss(model, label_smoothing=self.config.train.label_smoothing, guide=self.guide)
        if self.world.is_distributed:
            return DistributedDataParallel(batch_loss,
                                           device_ids=[self.device.index] if self.device.type == "cuda" else None)
        return batch_loss

    def _batches(self, epoch: int):
        """The epoch's batches, a sequence (`len`, `[b]`): a list for raw text, a lazy PreparedEpoch
        for a prepared corpus. Both are a function of (seed, epoch), so (epoch, batch_in_epoch) resumes."""
        d, seed, specials = self.config.data, self.config.train.seed, self.data.codec.tgt_vocab.specials
        if isinstance(self.data.train, PreparedCorpus):
            return self.data.train.batches(batch_tokens=d.batch_tokens, max_sentences=d.max_sentences, seed=seed,
                                           epoch=epoch, pool_sentences=d.pool_sentences, specials=specials)
        return token_batches(self.data.train, batch_tokens=d.batch_tokens, max_sentences=d.max_sentences, shuffle=True,
                             seed=seed, epoch=epoch, specials=specials)

    @contextlib.contextmanager
    def _stop_signals(self) -> Iterator[None]:
        """First Ctrl-C or SIGTERM (what Slurm and other schedulers send a job before they kill it):
        finish the step, save `last`, stop. A second one: abort at once (KeyboardInterrupt)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def restore() -> None:
            for signum, handler in previous.items():
                # None: a handler not set from Python; the default is the closest we can put back.
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)

        def handler(signum: int, frame: Any) -> None:
            if self._stop_requested:
                restore()
                raise KeyboardInterrupt
            self._stop_requested = True
            self._stop_signal = signum
            if self.console is not None:
                self.console.print(f"[yellow]{signal.Signals(signum).name}: stopping after this step and saving a "
                                   "checkpoint (Ctrl-C again to abort without saving)[/]")

        previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            restore()

    # -- the loop -------------------------------------------------------------------------

    def _say_what_trains(self) -> None:
        """The run's first lines: device, parameters, data, batches and updates, output directory."""
        data, world, accumulate = self.data, self.world, self.config.train.accumulate
        n_params = self.model.num_parameters()
        resumed = self.resumed_from is not None
        self.log.say(f"{'resuming at step ' + str(self.state.step) if resumed else 'training'} on {self.device}"
                     f"{' (bf16 autocast)' if self.bf16 else ''}"
                     f"{' (torch.compile: each new target length compiles first)' if self._compiled else ''}: "
                     f"{n_params:,} parameters; "
                     f"{len(data.train):,} train pairs ({data.dropped:,} over the length limits dropped), "
                     f"{len(data.dev):,} dev, {len(data.test_pairs):,} test; vocab {len(data.codec.src_vocab):,} "
                     f"src / {len(data.codec.tgt_vocab):,} tgt; {len(self._first_batches):,} batches per epoch"
                     + (f", {self.updates_per_epoch:,} updates of {world.size} process{'es' * (world.size > 1)} x "
                        f"{accumulate} batch{'es' * (accumulate > 1)}" if world.size * accumulate > 1 else ""))
        self.log.say(f"output: {self.output_dir}")

    def _restored_window(self) -> Window:
        """The log window as the checkpoint left it (a fresh one for a fresh run)."""
        window = Window(torch.zeros((), dtype=torch.float64, device=self.device),
                        torch.zeros((), dtype=torch.float64, device=self.device))
        if self.state.window is not None:
            window.loss_sum += self.state.window["loss_sum"]
            window.align_sum += self.state.window.get("align_sum", 0.0)
            window.tokens, window.steps = int(self.state.window["tokens"]), int(self.state.window["steps"])
        return window

    def _loop(self) -> TrainResult:
        cfg, state, data, world, log = self.config, self.state, self.data, self.world, self.log
        accumulate = cfg.train.accumulate
        resumed = self.resumed_from is not None
        first = self._first_batches
        batches_per_epoch, total = len(first), self.total_steps
        self._say_what_trains()
        window = self._restored_window()
        if resumed:
            self._on_main(lambda: self._complete_best(window))
        last_dev: DevResult | None = None
        evaluated_at = state.step if resumed else -1
        stop = state.stop_reason if state.finished and state.stop_reason in ("early_stopping", "target") else None
        if stop is None and cfg.train.max_steps is not None and state.step >= cfg.train.max_steps:
            stop = "max_steps"  # resumed with no steps left
        run_start_step, run_start_time = state.step, time.perf_counter()
        self._run_start_time = run_start_time
        batches = first
        # Reading the loss waits for the device: on a GPU, refresh the bar's loss every 10 steps only.
        bar_every = 1 if self.device.type == "cpu" else min(cfg.train.log_every, 10)
        with log, self._stop_signals():
            while stop is None and state.epoch < cfg.train.epochs:
                if batches is None:
                    batches = self._batches(state.epoch)
                # Resumed mid-epoch: skip the batches done; an update's W * k batches start at a multiple of W * k.
                # By index, so a lazy prepared epoch builds only the batches still to train on.
                remaining = (batches[b] for b in range(state.batch_in_epoch, len(batches)))
                for share in rank_shares(remaining, world=world, accumulate=accumulate):
                    self._step(share, window)
                    state.step += 1
                    state.batch_in_epoch += share.consumed
                    epoch_done = state.batch_in_epoch == len(batches)
                    if epoch_done:
                        state.epoch, state.batch_in_epoch = state.epoch + 1, 0
                    progress = state.epoch + state.batch_in_epoch / len(batches)
                    log.advance(state.step, progress)
                    if log.progress is not None and state.step % bar_every == 0:
                        log.show(window)  # the bar's loss and speed: the running window
                    if state.step % cfg.train.log_every == 0:
                        self._log_window(window, progress, run_start_step, run_start_time, total)
                    due = (epoch_done if cfg.train.eval_every is None
                           else state.step % cfg.train.eval_every == 0)
                    stop_requested, out_of_time = self._stop_flags()
                    if cfg.train.max_steps is not None and state.step >= cfg.train.max_steps:
                        stop = "max_steps"
                    if out_of_time:
                        stop = "max_minutes"
                    if due or stop is not None:
                        last_dev, stop = self._evaluate_and_save(window, progress, stop)
                        evaluated_at = state.step
                    if stop_requested and stop is None:
                        stop = "interrupted"
                        if evaluated_at != state.step:
                            self._check_finite()
                            self._on_main(lambda: self._save_last(window))
                    if stop is not None:
                        break
                batches = None
            if stop is None:
                stop = "epochs"
            if evaluated_at != state.step and stop != "interrupted":
                last_dev, _ = self._evaluate_and_save(window, state.epoch + state.batch_in_epoch / batches_per_epoch,
                                                      stop)
            test = None
            if stop != "interrupted" and world.is_main:
                # The other ranks are done: they need nothing from the final test decode, which may
                # take longer than a collective may wait, so they do not wait for it.
                test = self._finish(stop)
        if stop == "interrupted":
            unscored = "; the test set was not scored" if data.test_pairs else ""
            log.say(f"[yellow]interrupted at step {state.step}; saved the checkpoint "
                    f"{escape(str(self.ckpt_dir / 'last'))}, ready to resume{unscored}[/]")
        model_dir = resolve_dir(self.model_dir) if world.is_main else None
        return TrainResult(self.output_dir, model_dir, state.step,
                           state.epoch + state.batch_in_epoch / batches_per_epoch,
                           self.metric, state.best_value, state.best_step, stop, last_dev, test,
                           time.perf_counter() - self._opened_at, self._stop_signal if stop == "interrupted" else None,
                           is_main=world.is_main)

    def _compile(self, model: TrainableModel) -> bool:
        """With `train.compile`, the model's training pass under torch.compile where it can build
        kernels (Seq2Seq.compile_teacher_forced): True. Else False, and one line says why when
        train.compile asked for it."""
        if not self.config.train.compile:
            return False
        problem = compiler_problem()
        if problem is not None:
            if self.console is not None and self.world.is_main:
                self.console.print(f"train.compile: {problem}; training eagerly", markup=False, highlight=False)
            return False
        model.compile_teacher_forced()
        return True

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _to_device(self, batch):
        if self.device.type == "cuda":
            return batch.pin_memory().to(self.device, non_blocking=True)
        return batch

    def _step(self, share: RankShare, window: Window) -> None:
        """One update from this rank's share of it: for each of its batches the model's loss
        (label-smoothed cross-entropy, plus coverage where the model has it) summed over the target tokens, backward, the gradients
        adding up; then clip and Adam.

        The loss is divided by the target tokens of the whole update (every batch of every rank),
        so the gradient is that of the update's loss per target token, whatever W and k. DDP
        averages gradients over the W ranks, hence the division by tokens / W. Gradients are
        all-reduced once, after the rank's last batch (`no_sync` before it)."""
        cfg = self.config.train
        world = self.world
        self.model.train()
        # Read on the host, before any copy: no wait on the device. An idle rank's batch counts nothing.
        local_tokens = 0 if share.idle else sum(b.num_tgt_tokens for b in share.batches)
        tokens = local_tokens
        if world.is_distributed:
            tokens = int(all_reduce_sum(torch.tensor([local_tokens], dtype=torch.int64, device=self.device), world))
        lr = self.schedule.lr_at(self.state.step + 1)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        per_token = tokens / world.size  # == tokens for one process
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        align_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        guide = self.guide
        guided = guide is not None and self.state.step >= guide.start_step
        for i, batch in enumerate(share.batches):
            target = None
            if guided and guide is not None and guide.links is not None:  # the supervision of links, on the host
                target = self._to_device(alignment_target(guide.links, batch.indices, batch.tgt_out.size(1),
                                                          batch.src.size(1)))
            batch = self._to_device(batch)
            last = i == len(share.batches) - 1
            accumulating = world.is_distributed and not last
            with self.batch_loss.no_sync() if accumulating else contextlib.nullcontext():  # type: ignore[operator]
                with self._autocast():
                    loss, align = self.batch_loss(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, guided,
                                                  target)
                # weight 0 on an idle rank: its backward is there only so the all-reduce meets every rank
                weighted = loss * 0.0 if share.idle else loss / per_token
                # The last backward all-reduces the gradients: a failure there is another rank gone.
                with collective_errors(world) if last else contextlib.nullcontext():
                    weighted.backward()
            if not share.idle:
                if align is not None and guide is not None:  # the log shows the translation loss, and this apart
                    align_sum += align.double()
                    loss_sum += (loss.detach() - guide.weight * align.to(loss.dtype)).double()
                else:
                    loss_sum += loss.detach().double()
        if world.is_distributed:
            # The update's loss (for the log and the divergence check) and the stop flags, agreed by all.
            out_of_time = self._out_of_time()
            flags = torch.tensor([self._stop_requested, out_of_time], dtype=torch.float64, device=self.device)
            agreed = all_reduce_sum(torch.cat([loss_sum.reshape(1), align_sum.reshape(1), flags]), world)
            loss_sum, align_sum = agreed[0], agreed[1]
            self._agreed = (bool(agreed[2] > 0), bool(agreed[3] > 0))
        if cfg.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip)
        self.optimizer.step()
        if self._check_loss_every_step:  # reading the loss waits for nothing on the CPU
            value = float(loss_sum)
            if not math.isfinite(value):
                raise self._diverged(self.state.step + 1, f"the loss is {value}")
        else:  # queue the check on the device; read at the next log line or save
            self._divergence.note(loss_sum, self.state.step + 1)
        window.loss_sum += loss_sum
        window.align_sum += align_sum
        window.tokens += tokens
        window.timed_tokens += tokens
        window.steps += 1

    def _out_of_time(self) -> bool:
        minutes = self.config.train.max_minutes
        return minutes is not None and time.perf_counter() - self._run_start_time >= 60 * minutes

    def _stop_flags(self) -> tuple[bool, bool]:
        """(stop requested, out of time) after an update: this process's own for one process (a
        request during the update counts); under torchrun what the ranks agreed in that update, so
        every rank stops at the same step."""
        if self.world.is_distributed:
            return self._agreed
        return self._stop_requested, self._out_of_time()

    def _on_main(self, work: Callable[[], Any]) -> Any:
        """Every rank calls this at the same point: rank 0 runs `work` (which may save checkpoints,
        so the other ranks' generator states are gathered first) and hands its result to all."""
        if self.world.is_distributed:
            gathered = gather_to_main(rng_states(), self.world)
            self._other_ranks_rng = [] if gathered is None else gathered[1:]
        return run_on_main(work, self.world)

    def _log_window(self, window: Window, epoch: float, run_start_step: int, run_start_time: float,
                    total: int) -> None:
        state = self.state
        self._check_loss()
        loss = float(window.loss_sum) / max(window.tokens, 1)
        speed = window.speed()
        done = state.step - run_start_step
        per_step = (time.perf_counter() - run_start_time) / done if done else 0.0
        eta = per_step * max(total - state.step, 0) if done else None
        lr = self.optimizer.param_groups[0]["lr"]
        # the alignment loss per target token, as the loss is (after start_step, and before the weight)
        align = float(window.align_sum) / max(window.tokens, 1) if self.guide is not None else None
        self.log.record({"kind": "train", "step": state.step, "epoch": round(epoch, 4), "loss": loss, "lr": lr,
                         "tok_per_s": round(speed, 1), **({"align_loss": align} if align is not None else {})})
        self.log.train_line(state.step, epoch, loss, lr, speed, eta, align=align)
        window.loss_sum.zero_()
        window.align_sum.zero_()
        window.tokens = window.steps = window.timed_tokens = 0
        window.started = time.perf_counter()

    # -- divergence -------------------------------------------------------------------------

    def _check_loss(self) -> None:
        """Raise if any step so far had a non-finite loss."""
        found = self._divergence.first()
        if found is not None:
            step, loss = found
            raise self._diverged(step, f"the loss is {loss}")

    def _check_finite(self) -> None:
        """Raise unless every loss and every weight is finite: called before any evaluation or save,
        so nothing non-finite is ever written."""
        self._check_loss()
        finite = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all()
        if not bool(finite):
            raise self._diverged(self.state.step, "the weights hold NaN or Inf after the update")

    def _diverged(self, step: int, what: str) -> HeedError:
        clip = self.config.train.clip
        advice = "lower train.lr or " + ("set train.clip" if clip is None else f"train.clip (now {clip:g})")
        last = (f"the last good checkpoint is {self.ckpt_dir / 'last'} (step {self._last_saved})"
                if self._last_saved is not None else "no checkpoint was saved before it")
        return HeedError(f"training diverged at step {step}: {what}; {advice}; {last}")

    # -- evaluation and checkpoints ---------------------------------------------------------

    def _dev_batches(self) -> Iterator[Batch]:
        return (self._to_device(b) for b in dev_batches(self.data.dev, self.config.data,
                                                        self.data.codec.tgt_vocab.specials))

    def _decode(self, pairs: Sequence[Pair], cfg: DecodeConfig) -> list[str]:
        return decode_pairs(self.model, self.data.codec, pairs, cfg, device=self.device, seed=self.config.train.seed)

    def _dev_aer(self) -> float | None:
        gold = self.data.corpora.dev_gold
        if gold is None or not self.model.has_attention:
            return None
        return corpus_aer(self.model, self.data.codec, self.data.dev_pairs, gold, device=self.device,
                          options=None if self.guide is None else self.guide.options)  # the trained heads

    def _dev_entropy(self) -> list[list[float]] | None:
        if not isinstance(self.model, HeadsModel):
            return None
        return attention_entropy(self.model, self._dev_batches())

    def _evaluate_and_save(self, window: Window, epoch: float, stop: str | None) -> tuple[DevResult | None, str | None]:
        """Dev evaluation (if there is a dev set), best/patience bookkeeping, then checkpoints: on
        rank 0, which hands the outcome (scores, best, patience, schedule, stop) to the others."""
        self._check_finite()  # on every rank: the weights are the same, so all raise or none

        def on_main() -> tuple[DevResult | None, str | None, TrainerState, dict[str, Any]]:
            dev, decided = self._evaluate_and_save_here(window, epoch, stop)
            return dev, decided, self.state, self.schedule.state_dict()

        dev, stop, state, schedule = self._on_main(on_main)
        if not self.world.is_main:
            self.state.__dict__.update(state.__dict__)
            self.schedule.load_state_dict(schedule)
        self._last_saved = self.state.step
        return dev, stop

    def _evaluate_and_save_here(self, window: Window, epoch: float,
                                stop: str | None) -> tuple[DevResult | None, str | None]:
        state, es = self.state, self.config.train.early_stopping
        dev = None
        improved = False
        if self.data.dev:
            greedy = self.config.decode.model_copy(update={"beam_size": 1, "n_best": 1})
            dev = DevResult(dev_loss(self.model, self._dev_batches()), evaluate(self._decode(self.data.dev_pairs, greedy),
                                                      [p.tgt for p in self.data.dev_pairs]))
            value = dev.metric(self.metric)
            # A dev loss that overflowed (finite but huge weights) is no best and feeds no schedule.
            finite = math.isfinite(value)
            improved = finite and (state.best_value is None or better(value, state.best_value, self.higher))
            if improved:
                state.best_value, state.best_step, state.bad_evals = value, state.step, 0
            else:
                state.bad_evals += 1
            lowered = finite and self.schedule.after_eval(value)
            s = dev.scores
            aer, entropy = self._dev_aer(), self._dev_entropy()
            self.log.record({"kind": "dev", "step": state.step, "epoch": round(epoch, 4), "loss": dev.loss,
                             "ppl": math.exp(min(dev.loss, 50.0)), "bleu": s.bleu, "chrf": s.chrf,
                             "exact_match": s.exact_match, **({} if aer is None else {"aer": aer}),
                             **({} if entropy is None else {"attention_entropy": entropy}),
                             "lr": self.optimizer.param_groups[0]["lr"], "best": improved})
            self.log.say(f"dev @ step {state.step} (epoch {epoch:.2f}): loss {dev.loss:.4f}  BLEU {s.bleu:.2f}  "
                         f"chrF {s.chrf:.2f}  exact {s.exact_match:.2f}%{'' if aer is None else f'  AER {100 * aer:.1f}%'}"
                         f"{'  [green]best[/]' if improved else best_so_far(state.best_value, state.best_step)}"
                         f"{'  lr lowered to ' + format(self.schedule.lr, '.2e') if lowered else ''}")
            if stop is None and es.target is not None and reached(value, es.target, self.higher):
                stop = "target"
                self.log.say(f"dev {self.metric} {value:.4g} reached the target {es.target:g}: stopping")
            elif stop is None and es.patience is not None and state.bad_evals >= es.patience:
                stop = "early_stopping"
                self.log.say(f"no dev improvement in {es.patience} evaluations: stopping early")
        else:
            improved = True  # without a dev set the latest model is the one to keep
            state.best_step = state.step
        if stop in ("target", "early_stopping"):
            state.finished, state.stop_reason = True, stop
        self._save_last(window)
        self._keep_recent()
        if improved:
            self._save(self.ckpt_dir / "best", window)
            save_model_dir(self.model_dir, model=self.model, config=self.config, codec=self.data.codec,
                           metrics=self.log.path, info={"step": state.step})
        return dev, stop

    def _complete_best(self, window: Window) -> None:
        """On resume: an evaluation that improved saves `last`, then `best`, then `model/`. A run
        killed between those has `last` at its best step with `best` or `model/` older or missing;
        the restored state (weights, optimizer, RNG, log) is exactly that step's, so write them now."""
        state = self.state
        if state.best_step != state.step:
            return
        if saved_step(self.ckpt_dir / "best") != state.step:
            self._save(self.ckpt_dir / "best", window)
        if saved_step(self.model_dir) != state.step:
            save_model_dir(self.model_dir, model=self.model, config=self.config, codec=self.data.codec,
                           metrics=self.log.path, info={"step": state.step})

    def _keep_recent(self) -> None:
        """train.keep_checkpoints: N: this evaluation's weights as the model directory
        checkpoints/step-NNNNNNN, and only the N newest such directories kept (averaging reads them)."""
        keep = self.config.train.keep_checkpoints
        if not keep:
            return
        step = self.state.step
        save_model_dir(self.ckpt_dir / f"{RECENT_PREFIX}{step:07d}", model=self.model, config=self.config,
                       codec=self.data.codec, info={"step": step})
        for _, old in recent_model_dirs(self.ckpt_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)

    def _save_last(self, window: Window) -> None:
        self._save(self.ckpt_dir / "last", window)
        self._last_saved = self.state.step

    def _save(self, target: Path, window: Window) -> None:
        self._check_finite()
        self.state.schedule = self.schedule.state_dict()
        self.state.window = window.to_json()
        save_checkpoint(target, model=self.model, optimizer=self.optimizer, trainer=self.state,
                        config=self.config, codec=self.data.codec, metrics=self.log.path,
                        other_ranks_rng=self._other_ranks_rng)

    def _finish(self, stop: str) -> Scores | None:
        """Put the best weights in `model/` with the whole log, and score the test set with them."""
        best = resolve_dir(self.ckpt_dir / "best")
        if best is not None:
            self.model.load_state_dict(load_weights(best / WEIGHTS_FILE, self.device))
        test = None
        if self.data.test_pairs:
            hyps = self._decode(self.data.test_pairs, self.config.decode)
            test = evaluate(hyps, [p.tgt for p in self.data.test_pairs])
            self.log.record({"kind": "test", "step": self.state.best_step or self.state.step,
                             "bleu": test.bleu, "chrf": test.chrf, "exact_match": test.exact_match,
                             "beam_size": self.config.decode.beam_size})
            self.log.say(f"test (best model, step {self.state.best_step}, beam {self.config.decode.beam_size}): "
                         f"BLEU {test.bleu:.2f}  chrF {test.chrf:.2f}  exact {test.exact_match:.2f}% "
                         f"({test.exact}/{test.total})")
        reading = alignment_reading(self.model, self.data.codec, self.data.dev_pairs, self.data.corpora.dev_gold,
                                    self.guide, device=self.device, say=self.log.say)
        save_model_dir(self.model_dir, model=self.model, config=self.config, codec=self.data.codec,
                       metrics=self.log.path, info={"step": self.state.best_step, "stop_reason": stop,
                                                    **({"alignment": reading} if reading else {})})
        self.log.say(f"model: {self.model_dir}  (stopped: {stop.replace('_', ' ')})")
        return test

def train(config: Config, *, resume: bool = False, allow_data_change: bool = False, console: Console | None = None,
          progress: bool | None = None, world: World | None = None) -> TrainResult:
    """Train a model as `config` says, writing into `config.output_dir`; with `resume`, continue the
    run saved there (refused if its corpus files changed since the checkpoint, unless
    `allow_data_change`). `console`: where to report (None = silent); `progress`: force the progress
    bar on or off (default: on when the console is a terminal). `world`: this process's rank among
    several (default: what torchrun's environment says; one process without it)."""
    with Trainer(config, resume=resume, allow_data_change=allow_data_change, console=console,
                 progress=progress, world=world) as trainer:
        return trainer.run()
