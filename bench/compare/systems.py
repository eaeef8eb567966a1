"""One class per system: heed and the three peers, each trained and decoded the way its own users
would, on the same files, with the same model (see /work/shared/bench/peers/README.md).

Every system answers the same four calls:
    check()                 raise NotAvailable(reason) if it cannot run here (e.g. not installed)
    prepare()               vocabularies / binarised data; not timed
    train() -> Train        target tokens/s from the system's own log, pooled after step 50
    decode(beam, batch, n)  sentences/s from the system's own timer; writes the hypotheses
The peers' configs, scripts and parsers are read from the shared peers folder, never copied.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from measure import Measured, StepFailed, run_measured

LOG_EVERY = 50  # steps per logged throughput window, in every system


class NotAvailable(RuntimeError):
    """This system cannot run here; the message says why and what to do."""


@dataclass(frozen=True)
class Train:
    tok_per_s: float  # target tokens (EOS included, BOS and padding excluded) per second, after step 50
    params: int | None
    run: Measured


@dataclass(frozen=True)
class Decode:
    sent_per_s: float
    seconds: float  # the system's own timer
    hyps: Path  # one hypothesis per input line, in input order (fairseq: its H- lines)
    run: Measured
    load_seconds: float | None = None  # loading the model (heed's columns: heed.load), outside the timer


@dataclass
class Bench:
    """What every system shares: where things are and how the run is set."""

    repo: Path
    work: Path  # data, runs, logs
    peers: Path  # the peer venvs: peers/joey, peers/onmt, peers/fairseq
    shared: Path  # /work/shared/bench/peers: configs, scripts, parsers
    heed_python: Path
    dataset: object  # corpora.Dates or corpora.Multi30k
    steps: int
    threads: int
    seed: int  # training seed, the same in every system
    max_len: int
    timeout: float  # seconds any one command may run
    env: dict[str, str]

    @property
    def data(self) -> Path:
        return self.work / "data"

    def decode_prefix(self, n: int) -> Path:
        """data/decode<n>.{src,tgt}: the test set repeated to n lines (so its first 1000 are the test set)."""
        return self.data / f"decode{n}"

    def make_decode_set(self, n: int) -> Path:
        prefix = self.decode_prefix(n)
        for side in ("src", "tgt"):
            lines = (self.data / f"test.{side}").read_text(encoding="utf-8").splitlines()
            repeated = (lines * (n // len(lines) + 1))[:n]
            Path(f"{prefix}.{side}").write_text("".join(line + "\n" for line in repeated), encoding="utf-8")
        return prefix

    def pooled_rate(self, kind: str, log: Path) -> float:
        """The README's measure: parse_train.py KIT LOG 50 STEPS -> target tokens/s."""
        out = subprocess.run([str(self.heed_python), str(self.shared / "parse_train.py"), kind, str(log),
                              str(LOG_EVERY), str(self.steps)], capture_output=True, text=True)
        if out.returncode != 0:
            raise StepFailed(f"parse_train.py {kind}: {(out.stderr or out.stdout).strip()[-300:]}")
        return float(out.stdout.split()[0])


def _int(pattern: str, text: str) -> int | None:
    m = re.findall(pattern, text)
    return int(m[-1].replace(",", "")) if m else None


def _float(pattern: str, text: str) -> float | None:
    m = re.findall(pattern, text)
    return float(m[-1]) if m else None


def _need(value, what: str, log: Path):
    if value is None:
        raise StepFailed(f"{what} not found in {log}")
    return value


class System:
    name = "?"
    kind = "?"  # parse_train.py's name

    def __init__(self, bench: Bench) -> None:
        self.b = bench
        self.dir = bench.work / f"{self.kind}_run"
        self.logs = bench.work / "logs" / self.kind

    def check(self) -> None: ...

    def prepare(self) -> None: ...

    def train(self) -> Train:
        raise NotImplementedError

    def decode(self, beam: int, batch: int, n: int) -> Decode:
        raise NotImplementedError

    def version(self) -> str:
        return ""

    def _venv(self, kit: str) -> Path:
        python = self.b.peers / kit / "bin" / "python"
        if not python.exists():
            raise NotAvailable(f"not installed: no {python} (install: bash {self.b.shared / 'install_peers.sh'} "
                               f"{self.b.peers} {kit})")
        probe = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"],
                               capture_output=True, text=True, env=self.b.env, timeout=self.b.timeout)
        if probe.returncode != 0:
            raise NotAvailable(f"broken install: {python} cannot import torch")
        return python.parent

    def _pip_version(self, kit: str, package: str) -> str:
        out = subprocess.run([str(self.b.peers / kit / "bin" / "python"), "-c",
                              f"import importlib.metadata as m; print(m.version('{package}'))"],
                             capture_output=True, text=True)
        return out.stdout.strip()

    def _peer_config(self, filename: str) -> dict:
        """A shared config with @PEERS@ pointing at our work folder (data/, *_run/)."""
        text = (self.b.shared / filename).read_text(encoding="utf-8").replace("@PEERS@", str(self.b.work))
        return yaml.safe_load(text)


# ---------------------------------------------------------------------------------------- heed


class Heed(System):
    name, kind = "heed", "heed"
    decode_options: tuple[str, ...] = ()  # extra heed_decode.py options

    @property
    def heed_env(self) -> dict[str, str]:
        """The bench environment with this repository's src/ first on the path: the heed measured is
        the checkout the script runs from (the one `version` names), not whichever heed the venv
        has installed."""
        return {**self.b.env, "PYTHONPATH": str(self.b.repo / "src")}

    def check(self) -> None:
        probe = subprocess.run([str(self.b.heed_python), "-c", "import heed.cli, heed.api, heed.train"],
                               capture_output=True, text=True, env=self.heed_env, timeout=self.b.timeout)
        if probe.returncode != 0:
            raise NotAvailable(f"heed does not import: {probe.stderr.strip().splitlines()[-1:]}")

    def version(self) -> str:
        out = subprocess.run([str(self.b.heed_python), "-c", "import heed; print(heed.__version__)"],
                             capture_output=True, text=True).stdout.strip()
        commit = subprocess.run(["git", "-C", str(self.b.repo), "describe", "--always", "--dirty"],
                                capture_output=True, text=True).stdout.strip()
        return f"heed {out} ({commit})" if commit else f"heed {out}"

    def config(self) -> dict:
        """The shared model in heed's terms. hidden_size is both directions together (64 + 64), the
        decoder starts from the concatenated final encoder states (bridge copy, as OpenNMT-py).
        The peers normalise the loss per sentence, heed per target token: the clip that gives the
        same updates is the dataset's `heed_clip` (5/11 on dates)."""
        d = self.b.data
        return {
            "data": {
                "train": {"src": str(d / "train.src"), "tgt": str(d / "train.tgt")},
                # space-separated tokens, as every peer reads them (dates: one character each, "▁"
                # for a space; multi30k: SentencePiece pieces)
                "tokenizer": {"src": {"kind": "word"}, "tgt": {"kind": "word"}},
                "max_src_len": 60, "max_tgt_len": 60,
                "batch_tokens": 10**9, "max_sentences": 128,  # batches of 128 sentences
            },
            "model": {"decoder": "luong", "attention": "general", "input_feeding": True, "rnn": "lstm",
                      "embed_size": self.b.dataset.embed, "hidden_size": self.b.dataset.hidden,
                      "encoder_layers": 1, "decoder_layers": 1,
                      "bidirectional": True, "bridge": "copy", "dropout": 0.0},
            "train": {"seed": self.b.seed, "epochs": 10**6, "max_steps": self.b.steps, "lr": 1e-3, "betas": [0.9, 0.999],
                      "clip": round(self.b.dataset.heed_clip(self.b), 6), "label_smoothing": 0.0,
                      "schedule": {"name": "constant"}, "log_every": LOG_EVERY, "device": "cpu",
                      "threads": self.b.threads,
                      "eval_every": 10**9},  # no dev evaluation inside the timed windows (there is no dev set)
            "output_dir": str(self.dir / "out"),
        }

    def train(self) -> Train:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        cfg = self.dir / "config.yaml"
        cfg.write_text(yaml.safe_dump(self.config(), sort_keys=False, allow_unicode=True), encoding="utf-8")
        log = self.logs / "train.log"
        run = run_measured([str(self.b.heed_python), "-m", "heed", "train", str(cfg), "--no-progress"],
                           log=log, env=self.heed_env, timeout=self.b.timeout)
        metrics = self.dir / "out" / "metrics.jsonl"
        windows = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
        windows = [w for w in windows if w.get("kind") == "train"]
        # parse_train.py's pooling: the windows ending in (50, steps], each of (almost) the same
        # tokens per step, so the pooled rate is the step-weighted harmonic mean of the window rates
        chosen = [(w["step"] - prev["step"], w["tok_per_s"]) for prev, w in zip(windows, windows[1:])
                  if LOG_EVERY < w["step"] <= self.b.steps]
        if not chosen:
            raise StepFailed(f"no throughput windows after step {LOG_EVERY} in {metrics}")
        rate = sum(n for n, _ in chosen) / sum(n / r for n, r in chosen)
        params = _int(r"([\d,]+) parameters", run.text())
        # for the exported columns, which decode this model and repeat its training figures
        (self.logs / "train.summary.json").write_text(json.dumps({"tok_per_s": rate, "params": params}))
        return Train(rate, params, run)

    def decode(self, beam: int, batch: int, n: int) -> Decode:
        hyps = self.dir / f"hyp.beam{beam}.batch{batch}.n{n}.txt"
        log = self.logs / f"decode.beam{beam}.batch{batch}.n{n}.log"
        run = run_measured([str(self.b.heed_python), str(self.b.repo / "bench" / "compare" / "heed_decode.py"),
                            str(self.dir / "out" / "model"), f"{self.b.decode_prefix(n)}.src", str(hyps),
                            "--beam", str(beam), "--batch-size", str(batch), "--max-len", str(self.b.max_len),
                            "--threads", str(self.b.threads), *self.decode_options],
                           log=log, env=self.heed_env, timeout=self.b.timeout)
        seconds = _need(_float(r"sentences in ([\d.]+) s", run.text()), "heed's decode time", log)
        return Decode(n / seconds, seconds, hyps, run, _float(r"model loaded in ([\d.]+) s", run.text()))


class HeedBF16(Heed):
    """heed with `train.bf16: true`: the same model trained under bf16 autocast (float32 weights;
    GEMMs in bf16, which CPUs with AMX run 3-5x faster), and decoded in bf16 (`--bf16`)."""

    name, kind = "heed, bf16", "heed_bf16"
    decode_options = ("--bf16",)

    def config(self) -> dict:
        cfg = super().config()
        cfg["train"]["bf16"] = True
        return cfg


class HeedCompile(Heed):
    """heed with `train.compile: true`: the same model, its training step's decoder pass compiled
    by torch.compile (inductor). The compile runs in the first steps, outside the timed windows
    (after step 50) but inside the wall time. Decoding is heed's own (eager): compile covers training."""

    name, kind = "heed, compile", "heed_compile"

    def config(self) -> dict:
        cfg = super().config()
        cfg["train"]["compile"] = True
        return cfg


class HeedOnnx(Heed):
    """heed's own trained model (the "heed" column's, trained in the same run), exported with
    `heed export` and decoded by ONNX Runtime through the same `heed.load(...).translate`. It does
    not train: its training rows repeat heed's figures, and the export is what it times instead."""

    name, kind = "heed-onnx", "heed_onnx"
    export_options: tuple[str, ...] = ()
    trains = False

    def check(self) -> None:
        super().check()
        probe = subprocess.run([str(self.b.heed_python), "-c", "import onnx, onnxruntime"],
                               capture_output=True, text=True, env=self.heed_env, timeout=self.b.timeout)
        if probe.returncode != 0:
            raise NotAvailable("onnx or onnxruntime does not import: pip install -e '.[onnx]'")

    def version(self) -> str:
        ort = subprocess.run([str(self.b.heed_python), "-c", "import onnxruntime; print(onnxruntime.__version__)"],
                             capture_output=True, text=True).stdout.strip()
        return f"{super().version()}, onnxruntime {ort}"

    def train(self) -> Train:
        heed_run = Heed(self.b)
        heed_model = heed_run.dir / "out" / "model"
        if not heed_model.is_dir():
            raise StepFailed(f"no heed model to export at {heed_model}: list heed before {self.name} in --systems")
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "out").mkdir(parents=True)
        log = self.logs / "export.log"
        export = run_measured([str(self.b.heed_python), "-m", "heed", "export", str(heed_model), "-o",
                               str(self.dir / "out" / "model"), *self.export_options],
                              log=log, env=self.heed_env, timeout=self.b.timeout)
        trained = json.loads((heed_run.logs / "train.summary.json").read_text(encoding="utf-8"))
        return Train(trained["tok_per_s"], trained["params"], export)


class HeedOnnxInt8(HeedOnnx):
    """As heed-onnx, exported with `heed export --int8` (ONNX Runtime's dynamic int8 quantization)."""

    name, kind = "heed-onnx-int8", "heed_onnx_int8"
    export_options = ("--int8",)


# ---------------------------------------------------------------------------------------- Joey


class Joey(System):
    name, kind = "Joey NMT", "joey"

    def check(self) -> None:
        self.bin = self._venv("joey")

    def version(self) -> str:
        return f"joeynmt {self._pip_version('joey', 'joeynmt')}"

    def _base(self) -> dict:
        cfg = self._peer_config("joey_rnn_date.yaml")
        cfg["random_seed"] = self.b.seed
        cfg["training"]["updates"] = self.b.steps
        cfg["training"]["logging_freq"] = LOG_EVERY
        cfg["model_dir"] = str(self.dir / "model")
        enc, dec, ds = cfg["model"]["encoder"], cfg["model"]["decoder"], self.b.dataset
        enc["embeddings"]["embedding_dim"] = dec["embeddings"]["embedding_dim"] = ds.embed
        enc["hidden_size"], dec["hidden_size"] = ds.hidden // 2, ds.hidden  # per direction; decoder
        return ds.joey_config(cfg)

    def train(self) -> Train:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        cfg_path = self.dir / "train.yaml"
        cfg_path.write_text(yaml.safe_dump(self._base(), sort_keys=False, allow_unicode=True), encoding="utf-8")
        log = self.logs / "train.log"
        run = run_measured([str(self.bin / "python"), "-m", "joeynmt", "train", str(cfg_path), "--skip-test"],
                           log=log, env=self.b.env, timeout=self.b.timeout)
        return Train(self.b.pooled_rate("joey", log), _int(r"Total params: (\d+)", run.text()), run)

    def decode(self, beam: int, batch: int, n: int) -> Decode:
        cfg = self._base()
        cfg["data"]["test"] = str(self.b.decode_prefix(n))
        cfg["data"].pop("dev", None)  # `joeynmt test` decodes dev too when it is given
        ckpt = self.dir / "model" / "latest.ckpt"
        cfg["testing"].update({"beam_size": beam, "batch_size": batch, "batch_type": "sentence",
                               "max_output_length": self.b.max_len, "load_model": str(ckpt)})
        name = f"beam{beam}.batch{batch}.n{n}"
        cfg_path = self.dir / f"decode.{name}.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")
        out = self.dir / f"hyp.{name}"
        log = self.logs / f"decode.{name}.log"
        run = run_measured([str(self.bin / "python"), "-m", "joeynmt", "test", str(cfg_path), "--output-path",
                            str(out)], log=log, env=self.b.env, timeout=self.b.timeout)
        seconds = _need(_float(r"Generation took ([\d.]+)\[sec\]", run.text()), "Joey's 'Generation took'", log)
        return Decode(n / seconds, seconds, Path(f"{out}.test"), run)


# ----------------------------------------------------------------------------------- OpenNMT-py


class OpenNMT(System):
    name, kind = "OpenNMT-py", "onmt"

    def check(self) -> None:
        self.bin = self._venv("onmt")

    def version(self) -> str:
        return f"OpenNMT-py {self._pip_version('onmt', 'opennmt-py')}"

    def _config(self) -> Path:
        cfg = self._peer_config("onmt_rnn_date.yaml")
        cfg.update({"seed": self.b.seed, "word_vec_size": self.b.dataset.embed, "hidden_size": self.b.dataset.hidden,  # brnn: half each way
                    "train_steps": self.b.steps, "save_checkpoint_steps": self.b.steps, "report_every": LOG_EVERY,
                    "save_data": str(self.dir / "run"), "src_vocab": str(self.dir / "vocab.src"),
                    "tgt_vocab": str(self.dir / "vocab.tgt"), "save_model": str(self.dir / "model" / "rnn"),
                    "log_file": str(self.dir / "train.log")})
        path = self.dir / "train.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")
        return path

    def prepare(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.cfg = self._config()
        run_measured([str(self.bin / "onmt_build_vocab"), "-config", str(self.cfg), "-n_sample", "-1"],
                     log=self.logs / "build_vocab.log", env=self.b.env, timeout=self.b.timeout)

    def train(self) -> Train:
        log = self.logs / "train.log"
        run = run_measured([str(self.bin / "onmt_train"), "-config", str(self.cfg)], log=log, env=self.b.env,
                           timeout=self.b.timeout)
        return Train(self.b.pooled_rate("onmt", log), _int(r"number of parameters: (\d+)", run.text()), run)

    def decode(self, beam: int, batch: int, n: int) -> Decode:
        name = f"beam{beam}.batch{batch}.n{n}"
        hyps = self.dir / f"hyp.{name}.txt"
        log = self.logs / f"decode.{name}.log"
        run = run_measured([str(self.bin / "onmt_translate"), "-model", str(self.dir / "model" / f"rnn_step_{self.b.steps}.pt"),
                            "-src", f"{self.b.decode_prefix(n)}.src", "-output", str(hyps),
                            "-batch_size", str(batch), "-batch_type", "sents", "-beam_size", str(beam),
                            "-max_length", str(self.b.max_len), "-report_time", "-seed", "42"],
                           log=log, env=self.b.env, timeout=self.b.timeout)
        text = run.text()
        total = _need(_float(r"Total translation time \(s\): ([\d.]+)", text), "OpenNMT's translation time", log)
        # "Total translation time" has 0.1 s resolution; "Tokens per second" (predicted tokens / time)
        # is finer: recover the time from it when the two agree.
        tps = _float(r"Tokens per second: ([\d.]+)", text)
        words = sum(len(line.split()) for line in hyps.read_text(encoding="utf-8").splitlines())
        seconds = total
        if tps and words and abs(words / tps - total) <= 0.051:
            seconds = words / tps
        return Decode(n / seconds, seconds, hyps, run)


# -------------------------------------------------------------------------------------- fairseq


class Fairseq(System):
    name, kind = "fairseq", "fairseq"

    def check(self) -> None:
        self.bin = self._venv("fairseq")

    def version(self) -> str:
        return f"fairseq {self._pip_version('fairseq', 'fairseq')}"

    def prepare(self) -> None:
        """Binarise train/dev/test and the decoding sets (test1, test2, ... in `self.subsets`)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self._train_entry()
        d = self.b.data
        sets = sorted({int(p.name.removeprefix("decode").split(".")[0]) for p in d.glob("decode*.src")})
        self.subsets = {n: f"test{i + 1}" for i, n in enumerate(sets)}
        testpref = ",".join([str(d / "test")] + [str(self.b.decode_prefix(n)) for n in sets])
        run_measured([str(self.bin / "fairseq-preprocess"), "--source-lang", "src", "--target-lang", "tgt",
                      "--trainpref", str(d / "train"), "--validpref", str(d / "dev"), "--testpref", testpref,
                      "--destdir", str(self.dir / "data-bin"), "--workers", "1"],
                     log=self.logs / "preprocess.log", env=self.b.env, timeout=self.b.timeout)

    def _train_entry(self) -> None:
        """fairseq_train.sh runs $PEERS/fairseq/bin/fairseq-train with the dates sizes and seed 42; we
        pass our work folder as $PEERS. There fairseq/ is the real venv (a link) when the sizes and the
        seed are the script's, else a folder whose bin/fairseq-train runs the real one with this run's
        sizes and seed appended (fairseq's argparse keeps the last value of an option)."""
        entry, ds = self.b.work / "fairseq", self.b.dataset
        as_script = (ds.embed, ds.hidden) == (64, 128) and self.b.seed == 42
        if entry.resolve() == (self.b.peers / "fairseq").resolve() and not entry.is_symlink():
            if not as_script:
                raise StepFailed(f"--work-dir is the peers folder: fairseq cannot be resized or reseeded there "
                                 f"({ds.name} wants embed {ds.embed}, hidden {ds.hidden}; seed {self.b.seed}); "
                                 "use another --work-dir")
            return  # the work folder is the peers folder itself
        if entry.is_symlink() or entry.is_file():
            entry.unlink()
        elif entry.is_dir():
            shutil.rmtree(entry)
        if as_script:
            entry.symlink_to(self.b.peers / "fairseq")
            return
        extra = (f"--encoder-embed-dim {ds.embed} --encoder-hidden-size {ds.hidden // 2} --decoder-embed-dim "
                 f"{ds.embed} --decoder-hidden-size {ds.hidden} --decoder-out-embed-dim {ds.hidden} "
                 f"--seed {self.b.seed}")
        script = entry / "bin" / "fairseq-train"
        script.parent.mkdir(parents=True)
        script.write_text(f'#!/bin/bash\nexec "{self.bin / "fairseq-train"}" "$@" {extra}\n', encoding="utf-8")
        script.chmod(0o755)

    def train(self) -> Train:
        log = self.logs / "train.log"
        run = run_measured(["bash", str(self.b.shared / "fairseq_train.sh"), str(self.dir / "ckpt"), str(self.b.steps),
                            str(LOG_EVERY)], log=log, env={**self.b.env, "PEERS": str(self.b.work)}, timeout=self.b.timeout)
        params = _int(r"num\. (?:shared )?model params: ([\d,]+)", run.text())
        return Train(self.b.pooled_rate("fairseq", log), params, run)

    def decode(self, beam: int, batch: int, n: int) -> Decode:
        name = f"beam{beam}.batch{batch}.n{n}"
        hyps = self.dir / f"generate.{name}.txt"
        log = self.logs / f"decode.{name}.log"
        # beam 1 is fairseq's greedy search (it has no separate greedy decoder)
        run = run_measured([str(self.bin / "fairseq-generate"), str(self.dir / "data-bin"),
                            "--path", str(self.dir / "ckpt" / "checkpoint_last.pt"), "--task", "translation",
                            "--source-lang", "src", "--target-lang", "tgt", "--gen-subset", self.subsets[n],
                            "--batch-size", str(batch), "--required-batch-size-multiple", "1", "--beam", str(beam),
                            "--max-len-a", "0", "--max-len-b", str(self.b.max_len), "--lenpen", "0",
                            "--cpu", "--num-workers", "0", "--seed", "42"],
                           log=log, env=self.b.env, stdout=hyps, timeout=self.b.timeout)
        text = hyps.read_text(encoding="utf-8", errors="replace") + run.text()
        m = re.findall(r"Translated ([\d,]+) sentences .*? in ([\d.]+)s \(([\d.]+) sentences/s", text)
        if not m:
            raise StepFailed(f"fairseq's 'Translated ... sentences/s' not found in {log} or {hyps}")
        count, seconds, rate = m[-1]
        if int(count.replace(",", "")) != n:
            raise StepFailed(f"fairseq translated {count} sentences, expected {n}")
        return Decode(float(rate), float(seconds), hyps, run)


SYSTEMS = {"heed": Heed, "heed-bf16": HeedBF16, "heed-compile": HeedCompile, "heed-onnx": HeedOnnx, "heed-onnx-int8": HeedOnnxInt8, "joey": Joey, "onmt": OpenNMT, "fairseq": Fairseq}
