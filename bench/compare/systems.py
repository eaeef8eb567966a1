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

import itertools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml
from measure import Measured, StepFailed, run_measured

LOG_EVERY = 50  # steps per logged throughput window, in every system


@dataclass(frozen=True)
class TransformerSpec:
    """The one small Transformer every system builds for `--model transformer` (pre-norm, sinusoidal
    positions, tied decoder input/output embeddings, biases everywhere, ReLU), trained the same way:
    Adam (0.9, 0.98), a linear warm-up to `lr` over `warmup` updates then inverse-sqrt decay, loss
    per target token with label smoothing, clip `clip`. Each system's config below says it in that
    toolkit's own words."""

    layers: int = 3  # encoder layers, and as many decoder layers
    d_model: int = 256
    heads: int = 4
    ff_size: int = 1024
    dropout: float = 0.1
    attention_dropout: float = 0.1
    label_smoothing: float = 0.1
    lr: float = 1e-3  # the peak, reached at the end of the warm-up
    warmup: int = 200
    clip: float = 1.0

    def describe(self) -> str:
        return (f"Transformer {self.layers} + {self.layers} layers, d_model {self.d_model}, {self.heads} heads, "
                f"feed-forward {self.ff_size}, pre-norm, sinusoidal positions, tied decoder input/output "
                f"embeddings, dropout {self.dropout} (attention {self.attention_dropout}); Adam (0.9, 0.98), "
                f"linear warm-up over {self.warmup} updates to {self.lr:g} then inverse-sqrt decay, label "
                f"smoothing {self.label_smoothing}, loss per target token, clip {self.clip:g}")


TRANSFORMER = TransformerSpec()


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
    model: str = "rnn"  # "rnn": the peers' shared RNN; "transformer": TRANSFORMER

    @property
    def transformer(self) -> bool:
        return self.model == "transformer"

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
    kit: str | None = None  # install_peers.sh's name for this system's venv (the peers)

    def __init__(self, bench: Bench) -> None:
        self.b = bench
        self.dir = bench.work / f"{self.kind}_run"
        self.logs = bench.work / "logs" / self.kind

    def check(self) -> None: ...

    def install(self) -> bool:
        """`--install`: put this system in place after check() found it missing; False where there is
        nothing to install (heed runs from this checkout). A failure is its 'not installed' reason.
        The peers: the shared install_peers.sh for this kit."""
        if self.kit is None:
            return False
        self._install(["bash", str(self.b.shared / "install_peers.sh"), str(self.b.peers), self.kit],
                      self.b.work / "logs" / f"install_{self.kit}.log", env={**os.environ}, timeout=3600)
        return True

    def _install(self, cmd: list[str], log: Path, env: dict[str, str], timeout: float) -> None:
        print(f"   installing {self.name} (log: {log}) ...", flush=True)
        try:
            run_measured(cmd, log=log, env=env, timeout=timeout)
        except StepFailed as e:
            raise NotAvailable(f"install failed: {str(e).splitlines()[0]} (log: {log})") from None

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

    def _decode_script(self, python: Path, script: str, model: Path, beam: int, batch: int, n: int,
                       options: tuple[str, ...], env: dict[str, str]) -> Decode:
        """Decode with one of this folder's decoding scripts (heed_decode.py, ct2_decode.py: the options
        of decode_cli.py, and the lines `... model loaded in L s` and `... N sentences in S s`)."""
        hyps = self.dir / f"hyp.beam{beam}.batch{batch}.n{n}.txt"
        log = self.logs / f"decode.beam{beam}.batch{batch}.n{n}.log"
        run = run_measured([str(python), str(self.b.repo / "bench" / "compare" / script), str(model),
                            f"{self.b.decode_prefix(n)}.src", str(hyps), "--beam", str(beam), "--batch-size", str(batch),
                            "--max-len", str(self.b.max_len), "--threads", str(self.b.threads), *options],
                           log=log, env=env, timeout=self.b.timeout)
        seconds = _need(_float(r"sentences in ([\d.]+) s", run.text()), f"{self.name}'s decode time", log)
        return Decode(n / seconds, seconds, hyps, run, _float(r"model loaded in ([\d.]+) s", run.text()))

    def _save_training(self, rate: float, params: int | None) -> None:
        """This system's training figures, for the columns that decode its model without training
        (heed's exports; CTranslate2 on OpenNMT-py's model) and repeat them."""
        (self.logs / "train.summary.json").write_text(json.dumps({"tok_per_s": rate, "params": params}))

    def _saved_training(self, run: Measured) -> Train:
        """Another system's saved training figures (see _save_training), with this column's own run."""
        saved = json.loads((self.logs / "train.summary.json").read_text(encoding="utf-8"))
        return Train(saved["tok_per_s"], saved["params"], run)

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
        """The shared model in heed's terms, on the same data, batches, steps, threads and seed.

        RNN: hidden_size is both directions together (64 + 64), the decoder starts from the
        concatenated final encoder states (bridge copy, as OpenNMT-py). The peers normalise its loss
        per sentence, heed per target token: the clip that gives the same updates is the dataset's
        `heed_clip` (5/11 on dates). Transformer: TRANSFORMER, every system's loss per token."""
        d = self.b.data
        if self.b.transformer:
            t = TRANSFORMER
            model = {"family": "transformer", "layers": t.layers, "d_model": t.d_model, "heads": t.heads,
                     "ff_size": t.ff_size, "norm": "pre", "positions": "sinusoidal", "tie_embeddings": True,
                     "dropout": t.dropout, "attention_dropout": t.attention_dropout}
            optimizer = {"lr": t.lr, "betas": [0.9, 0.98], "clip": t.clip, "label_smoothing": t.label_smoothing,
                         "schedule": {"name": "warmup", "warmup_steps": t.warmup, "decay": "inverse_sqrt"}}
        else:
            model = {"decoder": "luong", "attention": "general", "input_feeding": True, "rnn": "lstm",
                     "embed_size": self.b.dataset.embed, "hidden_size": self.b.dataset.hidden,
                     "encoder_layers": 1, "decoder_layers": 1, "bidirectional": True, "bridge": "copy", "dropout": 0.0}
            optimizer = {"lr": 1e-3, "betas": [0.9, 0.999], "clip": round(self.b.dataset.heed_clip(self.b), 6),
                         "label_smoothing": 0.0, "schedule": {"name": "constant"}}
        return {
            "data": {
                "train": {"src": str(d / "train.src"), "tgt": str(d / "train.tgt")},
                # space-separated tokens, as every peer reads them (dates: one character each, "▁"
                # for a space; multi30k: SentencePiece pieces)
                "tokenizer": {"src": {"kind": "word"}, "tgt": {"kind": "word"}},
                "max_src_len": 60, "max_tgt_len": 60,
                "batch_tokens": 10**9, "max_sentences": 128,  # batches of 128 sentences
            },
            "model": model,
            "train": {"seed": self.b.seed, "epochs": 10**6, "max_steps": self.b.steps, **optimizer,
                      "log_every": LOG_EVERY, "device": "cpu", "threads": self.b.threads,
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
        chosen = [(w["step"] - prev["step"], w["tok_per_s"]) for prev, w in itertools.pairwise(windows)
                  if LOG_EVERY < w["step"] <= self.b.steps]
        if not chosen:
            raise StepFailed(f"no throughput windows after step {LOG_EVERY} in {metrics}")
        rate = sum(n for n, _ in chosen) / sum(n / r for n, r in chosen)
        params = _int(r"([\d,]+) parameters", run.text())
        self._save_training(rate, params)
        return Train(rate, params, run)

    def decode(self, beam: int, batch: int, n: int) -> Decode:
        return self._decode_script(self.b.heed_python, "heed_decode.py", self.dir / "out" / "model", beam, batch, n,
                                   self.decode_options, self.heed_env)


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
    runtime, extra = ("onnx", "onnxruntime"), "onnx"  # what the export needs, the last one named in version()

    def check(self) -> None:
        super().check()
        probe = subprocess.run([str(self.b.heed_python), "-c", f"import {', '.join(self.runtime)}"],
                               capture_output=True, text=True, env=self.heed_env, timeout=self.b.timeout)
        if probe.returncode != 0:
            raise NotAvailable(f"{' or '.join(self.runtime)} does not import: pip install -e '.[{self.extra}]'")

    def version(self) -> str:
        module = self.runtime[-1]
        got = subprocess.run([str(self.b.heed_python), "-c", f"import {module}; print({module}.__version__)"],
                             capture_output=True, text=True).stdout.strip()
        return f"{super().version()}, {module} {got}"

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
        return heed_run._saved_training(export)


class HeedOnnxInt8(HeedOnnx):
    """As heed-onnx, exported with `heed export --int8` (ONNX Runtime's dynamic int8 quantization)."""

    name, kind = "heed-onnx-int8", "heed_onnx_int8"
    export_options = ("--int8",)


class HeedCT2(HeedOnnx):
    """heed's own trained model exported with `heed export --format ctranslate2` (CTranslate2's model
    files written from heed's weights) and decoded by CTranslate2's search through the same
    `heed.load(...).translate` (heed.export.ct2_run). Transformers only."""

    name, kind = "heed-ct2", "heed_ct2"
    export_options: tuple[str, ...] = ("--format", "ctranslate2")
    runtime, extra = ("ctranslate2",), "ct2"

    def check(self) -> None:
        if not self.b.transformer:
            raise NotAvailable("heed exports Transformers to CTranslate2, not its RNNs (run with --model transformer)")
        super().check()


class HeedCT2Int8(HeedCT2):
    """As heed-ct2, exported with `--int8` (CTranslate2's int8 weights and GEMMs)."""

    name, kind = "heed-ct2-int8", "heed_ct2_int8"
    export_options = ("--format", "ctranslate2", "--int8")


# ---------------------------------------------------------------------------------------- Joey


class Joey(System):
    name, kind, kit = "Joey NMT", "joey", "joey"

    def check(self) -> None:
        self.bin = self._venv(self.kit)

    def version(self) -> str:
        return f"joeynmt {self._pip_version('joey', 'joeynmt')}"

    def _base(self) -> dict:
        cfg = self._peer_config("joey_rnn_date.yaml")
        cfg["random_seed"] = self.b.seed
        cfg["training"]["updates"] = self.b.steps
        cfg["training"]["logging_freq"] = LOG_EVERY
        cfg["model_dir"] = str(self.dir / "model")
        if self.b.transformer:
            return self.b.dataset.joey_config(self._transformer(cfg))
        enc, dec, ds = cfg["model"]["encoder"], cfg["model"]["decoder"], self.b.dataset
        enc["embeddings"]["embedding_dim"] = dec["embeddings"]["embedding_dim"] = ds.embed
        enc["hidden_size"], dec["hidden_size"] = ds.hidden // 2, ds.hidden  # per direction; decoder
        return ds.joey_config(cfg)

    @staticmethod
    def _transformer(cfg: dict) -> dict:
        """TRANSFORMER in Joey's words: the shared config's data and testing sections, its own model
        and schedule (warmupinversesquareroot: a linear rise to learning_rate_peak, then
        peak * sqrt(warmup / step)), the loss per token."""
        t = TRANSFORMER
        cfg["training"].update({"adam_betas": [0.9, 0.98], "learning_rate": t.lr, "learning_rate_peak": t.lr,
                                "scheduling": "warmupinversesquareroot", "learning_rate_warmup": t.warmup,
                                "clip_grad_norm": t.clip, "label_smoothing": t.label_smoothing,
                                "normalization": "tokens"})
        cfg["training"].pop("decrease_factor", None)

        def stack() -> dict:
            return {"type": "transformer", "num_layers": t.layers, "num_heads": t.heads, "hidden_size": t.d_model,
                    "ff_size": t.ff_size, "dropout": t.dropout, "layer_norm": "pre", "activation": "relu",
                    "embeddings": {"embedding_dim": t.d_model, "scale": True, "dropout": t.dropout}}

        cfg["model"] = {"initializer": "xavier_uniform", "init_gain": 1.0, "embed_initializer": "xavier_uniform",
                        "embed_init_gain": 1.0, "bias_initializer": "zeros", "tied_embeddings": False,
                        "tied_softmax": True, "encoder": stack(), "decoder": stack()}
        return cfg

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
    name, kind, kit = "OpenNMT-py", "onmt", "onmt"

    def check(self) -> None:
        self.bin = self._venv(self.kit)

    def version(self) -> str:
        return f"OpenNMT-py {self._pip_version('onmt', 'opennmt-py')}"

    def _config(self) -> Path:
        cfg = self._peer_config("onmt_rnn_date.yaml")
        cfg.update({"seed": self.b.seed, "word_vec_size": self.b.dataset.embed, "hidden_size": self.b.dataset.hidden,  # brnn: half each way
                    "train_steps": self.b.steps, "save_checkpoint_steps": self.b.steps, "report_every": LOG_EVERY,
                    "save_data": str(self.dir / "run"), "src_vocab": str(self.dir / "vocab.src"),
                    "tgt_vocab": str(self.dir / "vocab.tgt"), "save_model": str(self.dir / "model" / self.b.model),
                    "log_file": str(self.dir / "train.log")})
        if self.b.transformer:
            self._transformer(cfg)
        path = self.dir / "train.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")
        return path

    @staticmethod
    def _transformer(cfg: dict) -> None:
        """TRANSFORMER in OpenNMT-py's words. Its `noam` schedule is learning_rate * d_model^-0.5 *
        min(step^-0.5, step * warmup^-1.5), whose peak (at the end of the warm-up) is learning_rate *
        (d_model * warmup)^-0.5: learning_rate is set so that this peak is TRANSFORMER.lr. It has no
        query/key/value or feed-forward biases unless asked (the others have them)."""
        t = TRANSFORMER
        for key in ("rnn_type", "global_attention", "global_attention_function", "input_feed", "bridge"):
            cfg.pop(key, None)
        cfg.update({"encoder_type": "transformer", "decoder_type": "transformer", "enc_layers": t.layers,
                    "dec_layers": t.layers, "heads": t.heads, "hidden_size": t.d_model, "word_vec_size": t.d_model,
                    "transformer_ff": t.ff_size, "position_encoding": True, "max_relative_positions": 0,
                    "pos_ffn_activation_fn": "relu", "add_qkvbias": True, "add_ffnbias": True,
                    "share_decoder_embeddings": True, "dropout": [t.dropout], "attention_dropout": [t.attention_dropout],
                    "param_init": 0.0, "param_init_glorot": True, "adam_beta2": 0.98,
                    "learning_rate": t.lr * (t.d_model * t.warmup) ** 0.5, "decay_method": "noam",
                    "warmup_steps": t.warmup, "max_grad_norm": t.clip, "label_smoothing": t.label_smoothing,
                    "normalization": "tokens"})
        cfg.pop("start_decay_steps", None)

    @property
    def checkpoint(self) -> Path:
        return self.dir / "model" / f"{self.b.model}_step_{self.b.steps}.pt"

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
        rate, params = self.b.pooled_rate("onmt", log), _int(r"number of parameters: (\d+)", run.text())
        self._save_training(rate, params)
        return Train(rate, params, run)

    def decode(self, beam: int, batch: int, n: int) -> Decode:
        name = f"beam{beam}.batch{batch}.n{n}"
        hyps = self.dir / f"hyp.{name}.txt"
        log = self.logs / f"decode.{name}.log"
        run = run_measured([str(self.bin / "onmt_translate"), "-model", str(self.checkpoint),
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
    name, kind, kit = "fairseq", "fairseq", "fairseq"

    def check(self) -> None:
        self.bin = self._venv(self.kit)

    def version(self) -> str:
        return f"fairseq {self._pip_version('fairseq', 'fairseq')}"

    def prepare(self) -> None:
        """Binarise train/dev/test and the decoding sets (test1, test2, ... in `self.subsets`)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        if not self.b.transformer:
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

    def transformer_command(self) -> list[str]:
        """TRANSFORMER in fairseq's words: `--arch transformer` resized, pre-norm on both sides,
        inverse_sqrt (a linear rise to --lr over --warmup-updates, then lr * sqrt(warmup / step)),
        label-smoothed cross-entropy per target token; the shared RNN script's data, batch and logging
        settings otherwise."""
        t = TRANSFORMER
        sizes = []
        for side in ("encoder", "decoder"):
            sizes += [f"--{side}-layers", str(t.layers), f"--{side}-embed-dim", str(t.d_model),
                      f"--{side}-ffn-embed-dim", str(t.ff_size), f"--{side}-attention-heads", str(t.heads),
                      f"--{side}-normalize-before"]
        return [str(self.bin / "fairseq-train"), str(self.dir / "data-bin"), "--task", "translation",
                "--source-lang", "src", "--target-lang", "tgt", "--cpu", "--seed", str(self.b.seed),
                "--arch", "transformer", *sizes, "--share-decoder-input-output-embed",
                "--dropout", str(t.dropout), "--attention-dropout", str(t.attention_dropout),
                "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", str(t.label_smoothing),
                "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", str(t.lr),
                "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(t.warmup), "--clip-norm", str(t.clip),
                "--batch-size", "128", "--required-batch-size-multiple", "1", "--num-workers", "0",
                "--max-update", str(self.b.steps), "--max-epoch", "10000", "--disable-validation",
                "--save-dir", str(self.dir / "ckpt"), "--no-epoch-checkpoints",
                "--log-format", "simple", "--log-interval", str(LOG_EVERY)]

    def train(self) -> Train:
        log = self.logs / "train.log"
        if self.b.transformer:
            run = run_measured(self.transformer_command(), log=log, env=self.b.env, timeout=self.b.timeout)
        else:
            run = run_measured(["bash", str(self.b.shared / "fairseq_train.sh"), str(self.dir / "ckpt"), str(self.b.steps),
                                str(LOG_EVERY)], log=log, env={**self.b.env, "PEERS": str(self.b.work)},
                               timeout=self.b.timeout)
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


# ---------------------------------------------------------------------------------- CTranslate2

CT2_VERSION = "4.8.5"


class CTranslate2(System):
    """CTranslate2 (C++ inference, fused attention, int8) on the OpenNMT-py column's model, converted
    with CTranslate2's own converter (bench/compare/ct2_convert.py) and decoded by
    bench/compare/ct2_decode.py in the OpenNMT-py venv (`Translator.translate_batch`, its timer
    around that call alone). It does not train: its training rows repeat OpenNMT-py's figures and the
    conversion is what it times instead. ctranslate2 is not one of install_peers.sh's packages: it
    goes into the OpenNMT-py venv (`--install`, or PEERS/onmt/bin/pip install ctranslate2==CT2_VERSION)."""

    name, kind = "CTranslate2", "ct2"
    compute_type = "float32"
    trains = False

    def check(self) -> None:
        if not self.b.transformer:
            raise NotAvailable("CTranslate2 converts OpenNMT-py Transformers, not its RNNs (run with --model transformer)")
        self.bin = self._venv("onmt")
        probe = subprocess.run([str(self.bin / "python"), "-c", "import ctranslate2"], capture_output=True, text=True,
                               env=self.b.env, timeout=self.b.timeout)
        if probe.returncode != 0:
            raise NotAvailable(f"ctranslate2 is not in the OpenNMT-py venv: {self.bin / 'pip'} install "
                               f"ctranslate2=={CT2_VERSION} (or pass --install)")

    def install(self) -> bool:
        """ctranslate2 into the OpenNMT-py venv (its converter reads OpenNMT-py checkpoints there)."""
        self._install([str(self.b.peers / "onmt" / "bin" / "pip"), "install", "-q", f"ctranslate2=={CT2_VERSION}"],
                      self.logs / "install.log", env={**self.b.env, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
                      timeout=self.b.timeout)
        return True

    def version(self) -> str:
        return f"ctranslate2 {self._pip_version('onmt', 'ctranslate2')} ({self.compute_type})"

    def train(self) -> Train:
        onmt = OpenNMT(self.b)
        if not onmt.checkpoint.exists():
            raise StepFailed(f"no OpenNMT-py model to convert at {onmt.checkpoint}: list onmt before {self.name} in --systems")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        run = run_measured([str(self.bin / "python"), str(self.b.repo / "bench" / "compare" / "ct2_convert.py"),
                            str(onmt.checkpoint), str(self.dir / "model")], log=self.logs / "convert.log", env=self.b.env,
                           timeout=self.b.timeout)
        return onmt._saved_training(run)

    def decode(self, beam: int, batch: int, n: int) -> Decode:
        return self._decode_script(self.bin / "python", "ct2_decode.py", self.dir / "model", beam, batch, n,
                                   ("--compute-type", self.compute_type), self.b.env)


class CTranslate2Int8(CTranslate2):
    """As CTranslate2, the same converted model loaded with compute_type int8 (weights quantized to
    int8 at load, CTranslate2's int8 GEMMs)."""

    name, kind = "CTranslate2 int8", "ct2_int8"
    compute_type = "int8"


SYSTEMS = {"heed": Heed, "heed-bf16": HeedBF16, "heed-compile": HeedCompile, "heed-onnx": HeedOnnx,
           "heed-onnx-int8": HeedOnnxInt8, "heed-ct2": HeedCT2, "heed-ct2-int8": HeedCT2Int8, "joey": Joey,
           "onmt": OpenNMT, "fairseq": Fairseq, "ct2": CTranslate2, "ct2-int8": CTranslate2Int8}
