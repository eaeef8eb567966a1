"""Speed side by side: heed, Joey NMT, OpenNMT-py and fairseq train and decode the same model on the
same data, one after another on this machine, and the figures go into bench/RESULTS.md.

    .venv/bin/python bench/compare/run.py --peers-dir /work/peers --steps 1000
    bash bench/compare/run.sh --peers-dir /work/peers --steps 1000          # the same

The peers live in their own virtual environments, made by the shared scripts
(`bash ../shared/bench/peers/install_peers.sh DIR joey onmt fairseq`, or `--install` here); their
configs, parsers and data maker are read from that shared folder (`--shared-dir`), never copied.
A peer that is missing or fails is reported as such; the others still run.

What happens, in order (nothing runs at the same time as anything else):
1. the data into WORK/data (bench/compare/corpora.py): `--dataset dates` (the default and the
   reference comparison) runs the shared make_data.py, the character-level dates corpus of
   20,000 / 1,000 / 1,000 pairs; `--dataset multi30k` cuts Multi30k de->en into pieces with one
   shared SentencePiece model. Then the decoding sets: the test set repeated to --decode-sents
   lines (its first lines are the test set) and the first --decode-sents-b1 of those for batch 1.
2. per system, in --systems order: prepare (vocabulary, binarising; untimed) and train --steps
   steps under /usr/bin/time -v; then heed's systems train again, last (the same model; their
   throughput is the mean of both runs). Then per decoding setting (greedy and beam 5, at
   --decode-batch and at batch 1) every system decodes, each in its own process, back to back, the
   order reversed from one setting to the next; the quality of the greedy and beam-5 outputs on the
   test set (dates: exact match with the shared exact_match.py; multi30k: sacreBLEU). So a host
   whose speed drifts during the run favours no system.
3. bench/floor.py: the bare-PyTorch floor of one training step on the same shapes; then
   bench/gemm_floor.py: the matrix products alone of this model's training step and of heed's
   beam-5 decode, in float32 and bfloat16, against 2x / 3x the fastest peer's figures.
Every command's output is kept under WORK/logs/SYSTEM/; the figures in WORK/results.json and the
table in WORK/results.md and, between its own markers, in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # a script folder, not a package

from corpora import Dates, Multi30k, hypotheses, tokens_per_step
from measure import StepFailed, bench_env, loadavg, machine, run_measured
from systems import SYSTEMS, TRANSFORMER, Bench, NotAvailable, System

REPO = Path(__file__).resolve().parents[2]
REFERENCE_SEED = 42  # the seed of the reference tables (and of the shared peers' configs)
PEERS = ("joey", "onmt", "fairseq")  # the Python toolkits' keys (and install_peers.sh's kit names)
DEFAULT_SYSTEMS = {  # --systems when not given: CTranslate2 converts only OpenNMT-py's Transformer, and
    # heed-compile (a whole extra training) is left to --systems for the Transformer
    "rnn": [key for key in SYSTEMS if "ct2" not in key],
    "transformer": [key for key in SYSTEMS if key != "heed-compile"],
}
EXPECTED_PARAMS = {"onmt": 286_224, "fairseq": 286_224, "joey": 302_656}


def say(message: str) -> None:
    print(message, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--peers-dir", type=Path, required=True, help="folder with the peer venvs (joey/, onmt/, fairseq/)")
    p.add_argument("--work-dir", type=Path, help="data, runs and logs (default: PEERS_DIR/compare/DATASET)")
    p.add_argument("--shared-dir", type=Path, default=REPO / ".." / "shared" / "bench" / "peers",
                   help="the shared peers scripts and configs (default: ../shared/bench/peers from the repo root)")
    p.add_argument("--systems", nargs="+", choices=list(SYSTEMS),
                   help="default: every system of --model (the CTranslate2 columns only for the transformer)")
    p.add_argument("--model", choices=["rnn", "transformer"], default="rnn",
                   help="rnn: the peers' shared RNN-attention model; transformer: the same small Transformer in "
                        "every system (bench/compare/systems.py: TransformerSpec), with CTranslate2 columns")
    p.add_argument("--dataset", choices=["dates", "multi30k"], default="dates",
                   help="dates: the peers' corpus (the reference comparison); multi30k: de->en, shared SentencePiece")
    p.add_argument("--multi30k-dir", type=Path, default=REPO / ".." / "shared" / "data" / "multi30k")
    p.add_argument("--spm-vocab", type=int, default=8000, help="multi30k: SentencePiece pieces (both languages)")
    p.add_argument("--steps", type=int, default=1000, help="training steps, the same in every system")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for every system (OMP_NUM_THREADS)")
    p.add_argument("--seed", type=int, default=REFERENCE_SEED, help="training seed, the same in every system")
    p.add_argument("--decode-sents", type=int, default=10000, help="sentences decoded at --decode-batch")
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--decode-sents-b1", type=int, default=1000, help="sentences decoded at batch 1")
    p.add_argument("--max-len", type=int, help="output tokens at most when decoding (default: dates 20, multi30k 60)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds any one command may run (a hung peer fails)")
    p.add_argument("--install", action="store_true", help="install missing peers first (install_peers.sh)")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md",
                   help="markdown file whose 'Speed side by side' section is (re)written")
    p.add_argument("--no-results", action="store_true", help="print the table, do not touch --results")
    args = p.parse_args(argv)
    args.systems = args.systems or DEFAULT_SYSTEMS[args.model]
    if args.steps < 100:
        p.error("--steps must be >= 100: throughput is pooled over the 50-step log windows after step 50")
    if args.decode_sents_b1 > args.decode_sents:
        p.error("--decode-sents-b1 cannot exceed --decode-sents")
    return args


# -------------------------------------------------------------------------------------- data


def make_data(bench: Bench, args: argparse.Namespace) -> int:
    """The data set and the decoding sets; returns how many test sentences are scored."""
    bench.dataset.make(bench)
    for stale in bench.data.glob("decode*"):
        stale.unlink()
    bench.make_decode_set(args.decode_sents)
    if args.decode_sents_b1 != args.decode_sents:
        bench.make_decode_set(args.decode_sents_b1)
    n_test = len((bench.data / "test.tgt").read_text(encoding="utf-8").splitlines())
    return min(n_test, args.decode_sents)


# --------------------------------------------------------------------------------------- run


def train_system(bench: Bench, key: str, args: argparse.Namespace) -> tuple[dict, System | None]:
    """Check, prepare and train one system. Returns its result (status, version, train) and the
    system, or None where it cannot decode (not installed, training failed)."""
    system = SYSTEMS[key](bench)
    result: dict = {"key": key, "name": system.name, "status": "ok", "decode": {}, "quality": {}, "errors": []}
    say(f"\n== {system.name}  (load {loadavg()})")
    try:
        try:
            system.check()
        except NotAvailable:
            if not (args.install and system.install()):
                raise
            system.check()
        result["version"] = system.version()
    except NotAvailable as e:
        result.update(status="not installed", reason=str(e))
        say(f"   {e}")
        return result, None
    except Exception as e:  # noqa: BLE001
        result.update(status="not available", reason=_reason(e))
        say(f"   not available: {result['reason']}")
        return result, None
    try:
        system.prepare()
        say(f"   training {args.steps} steps ...")
        train = system.train()
    except Exception as e:  # noqa: BLE001  one system's failure must not stop the others
        result.update(status="training failed", reason=_reason(e))
        say(f"   training failed: {result['reason']}")
        return result, None
    result["train"] = {"tok_per_s": train.tok_per_s, "runs_tok_per_s": [train.tok_per_s], "params": train.params,
                       "seconds": train.run.seconds, "cpu_seconds": train.run.cpu_seconds,
                       "max_rss_mb": train.run.max_rss_mb, "loadavg": train.run.loadavg, "log": str(train.run.log)}
    say(f"   {train.tok_per_s:,.0f} target tok/s, {train.params or 0:,} parameters, peak RSS "
        f"{train.run.max_rss_mb or 0:,.0f} MB, {train.run.seconds:.0f} s wall")
    return result, system


def train_again(system: System, result: dict, args: argparse.Namespace) -> None:
    """heed's second training, after every peer's: its throughput becomes the mean of both runs, so
    a host that speeds up or slows down during the comparison favours no one (the same seed and
    data give the same model, which the decodes then use)."""
    say(f"\n== {system.name} again, last  (load {loadavg()})")
    try:
        train = system.train()
    except Exception as e:  # noqa: BLE001
        result["errors"].append(f"second training: {_reason(e)}")
        say(f"   second training failed: {_reason(e)}")
        return
    figures = result["train"]
    figures["runs_tok_per_s"].append(train.tok_per_s)
    figures["tok_per_s"] = sum(figures["runs_tok_per_s"]) / len(figures["runs_tok_per_s"])
    figures["max_rss_mb"] = max(figures["max_rss_mb"] or 0, train.run.max_rss_mb or 0) or None
    say(f"   {train.tok_per_s:,.0f} target tok/s (first run {figures['runs_tok_per_s'][0]:,.0f}; "
        f"mean {figures['tok_per_s']:,.0f})")


def decode_system(bench: Bench, system: System, result: dict, beam: int, batch: int, n: int, args: argparse.Namespace,
                  n_test: int) -> None:
    """One decode of one system into its result, with the quality of the batch-size decodes."""
    label = f"beam{beam}_batch{batch}"
    key = result["key"]
    try:
        d = system.decode(beam, batch, n)
        outputs = hypotheses(key, d.hyps, n)
    except Exception as e:  # noqa: BLE001
        result["decode"][label] = {"error": _reason(e)}
        result["errors"].append(f"decode beam {beam} batch {batch}: {_reason(e)}")
        say(f"   {system.name}: failed: {_reason(e)}")
        return
    result["decode"][label] = {"sent_per_s": d.sent_per_s, "seconds": d.seconds, "sentences": n,
                               "mean_output_tokens": sum(len(h.split()) for h in outputs) / max(len(outputs), 1),
                               "max_rss_mb": d.run.max_rss_mb, "loadavg": d.run.loadavg, "hyps": str(d.hyps),
                               "load_seconds": d.load_seconds}
    scored = ""
    if batch == args.decode_batch:
        try:
            result["quality"][f"beam{beam}"] = bench.dataset.quality(bench, key, d.hyps, n_test)
            scored = f"; {bench.dataset.metric}: {result['quality'][f'beam{beam}']:.1f}"
        except Exception as e:  # noqa: BLE001
            result["errors"].append(f"{bench.dataset.metric} beam {beam}: {_reason(e)}")
    say(f"   {system.name}: {d.sent_per_s:,.1f} sent/s ({n} sentences in {d.seconds:.2f} s, "
        f"{result['decode'][label]['mean_output_tokens']:.1f} tokens each){scored}")


def run_all(bench: Bench, args: argparse.Namespace, n_test: int) -> list[dict]:
    """Every system trains, in --systems order; heed's systems train again at the end (train_again);
    then each decoding setting runs for every system back to back, the order reversed from one
    setting to the next. Any drift of the host's speed during the comparison thus falls on all
    systems alike instead of on whoever ran late."""
    trained = [train_system(bench, key, args) for key in args.systems]
    for result, system in reversed(trained):
        if system is not None and result["key"].startswith("heed") and getattr(system, "trains", True):
            train_again(system, result, args)
    ready = [(result, system) for result, system in trained if system is not None]
    for i, (beam, batch, n) in enumerate(decode_plan(args)):
        say(f"\n== decode {'greedy' if beam == 1 else f'beam {beam}'}, batch {batch}, {n:,} sentences  "
            f"(load {loadavg()})")
        for result, system in (ready if i % 2 == 0 else ready[::-1]):
            decode_system(bench, system, result, beam, batch, n, args, n_test)
    return [result for result, _ in trained]


def _tokens_per_s(decode: dict) -> float:
    """Output tokens a second of one decoding setting: its sentences/s times its mean output length."""
    return decode["sent_per_s"] * decode["mean_output_tokens"]


def decode_plan(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    """(beam, batch, sentences): greedy and beam 5, at --decode-batch and at batch 1."""
    return [(1, args.decode_batch, args.decode_sents), (5, args.decode_batch, args.decode_sents),
            (1, 1, args.decode_sents_b1), (5, 1, args.decode_sents_b1)]


def _reason(e: Exception) -> str:
    if isinstance(e, (StepFailed, NotAvailable)):
        return str(e)
    return f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"


def run_transformer_floor(bench: Bench, heed_tok_per_s: float) -> dict | None:
    """bench/transformer_floor.py on the heed column's run: the matrix products alone, the bare
    torch.nn.Transformer step and heed's step, on batches of this corpus cut as heed's trainer cuts them."""
    out = bench.work / "floor.json"
    cmd = [str(bench.heed_python), str(REPO / "bench" / "transformer_floor.py"), str(bench.work / "heed_run" / "out"),
           "--threads", str(bench.threads), "--steps", "20", "--warmup", "3", "--json", str(out),
           "--heed-tok-per-s", f"{heed_tok_per_s:.1f}"]
    say(f"\n== Transformer floor  (load {loadavg()})")
    try:
        run = run_measured(cmd, log=bench.work / "logs" / "floor.log", env={**bench.env, "PYTHONPATH": str(REPO / "src")})
    except StepFailed as e:
        say(f"   floor failed: {e}")
        return None
    say("\n".join("   " + line for line in run.text().splitlines() if not line.startswith(("Command", "\t"))))
    floor = json.loads(out.read_text())
    floor["loadavg"] = run.loadavg
    return floor


def transformer_floor_text(floor: dict) -> list[str]:
    rows = floor["rows"]
    parts = [f"{label} {1e3 * row['seconds']:.1f} ms ({row['tok_per_s']:,.0f} tok/s, {row['x_bare']:.2f}× the bare step)"
             for label, row in rows.items()]
    return [f"Floor (bench/transformer_floor.py on the heed column's run, {floor['threads']} thread, "
            f"{floor['tokens_per_step']:,.0f} target tokens a step, load before {floor['loadavg']}): "
            + "; ".join(parts) + ".", ""]


def run_floor(bench: Bench, heed_tok_per_s: float | None) -> dict | None:
    if bench.transformer:  # transformer_floor.py reads the heed column's run: none without one
        return run_transformer_floor(bench, heed_tok_per_s) if heed_tok_per_s else None
    out = bench.work / "floor.json"
    cmd = [str(bench.heed_python), str(REPO / "bench" / "floor.py"), "--data", str(bench.data), "--threads",
           str(bench.threads), "--json", str(out), "--embed", str(bench.dataset.embed), "--hidden",
           str(bench.dataset.hidden)]
    if heed_tok_per_s:
        cmd += ["--heed-tok-per-s", f"{heed_tok_per_s:.1f}"]
    say(f"\n== floor  (load {loadavg()})")
    try:
        run = run_measured(cmd, log=bench.work / "logs" / "floor.log", env=bench.env)
    except StepFailed as e:
        say(f"   floor failed: {e}")
        return None
    say("\n".join("   " + line for line in run.text().splitlines()[2:]))
    floor = json.loads(out.read_text())
    floor["loadavg"] = run.loadavg
    return floor


def run_gemm_floor(bench: Bench, results: list[dict], args: argparse.Namespace) -> dict | None:
    """bench/gemm_floor.py against the fastest peer's training tok/s and beam-5 sentences/s."""
    heed = next((r for r in results if r["key"] == "heed" and r["status"] == "ok"), None)
    if heed is None or bench.transformer:  # gemm_floor.py knows the RNN; transformer_floor.py has the products
        return None
    peers = [r for r in results if r["status"] == "ok" and r["key"] in PEERS]

    def fastest(figure) -> float | None:
        try:
            return max(figure(r) for r in peers)
        except (KeyError, TypeError, ValueError):  # no peer, or no figure
            return None

    peer_tok = fastest(lambda r: r["train"]["tok_per_s"])
    peer_sent = fastest(lambda r: r["decode"][f"beam5_batch{args.decode_batch}"]["sent_per_s"])
    out = bench.work / "gemm_floor.json"
    cmd = [str(bench.heed_python), str(REPO / "bench" / "gemm_floor.py"), "--data", str(bench.data),
           "--threads", str(bench.threads), "--embed", str(bench.dataset.embed), "--hidden", str(bench.dataset.hidden),
           "--decode-model", str(bench.work / "heed_run" / "out" / "model"),
           "--decode-input", f"{bench.decode_prefix(args.decode_sents)}.src", "--beam", "5",
           "--batch-size", str(args.decode_batch), "--max-len", str(bench.max_len), "--json", str(out)]
    cmd += ["--peer-tok-per-s", f"{peer_tok:.1f}"] if peer_tok else []
    cmd += ["--peer-sent-per-s", f"{peer_sent:.1f}"] if peer_sent else []
    say(f"\n== GEMM floor  (load {loadavg()})")
    try:
        run = run_measured(cmd, log=bench.work / "logs" / "gemm_floor.log", env=bench.env)
    except StepFailed as e:
        say(f"   GEMM floor failed: {e}")
        return None
    say("\n".join("   " + line for line in run.text().splitlines()))
    gemm = json.loads(out.read_text())
    gemm.update(loadavg=run.loadavg, peer_tok_per_s=peer_tok, peer_sent_per_s=peer_sent)
    return gemm


def gemm_floor_text(gemm: dict) -> list[str]:
    """The paragraph under the table: what the products alone allow, and what 2x / 3x would need."""
    train, dec = gemm["train"], gemm.get("decode")
    text = (f"GEMM floor (bench/gemm_floor.py, the matrix products of this model alone, each shape timed on this "
            f"machine, element-wise work left out; load before {gemm['loadavg']}): a training step's products take "
            f"{1e3 * train['float32']['step_s']:.1f} ms in float32 ({train['float32']['max_tok_per_s']:,.0f} tok/s at "
            f"most) and {1e3 * train['bfloat16']['step_s']:.1f} ms in bfloat16 "
            f"({train['bfloat16']['max_tok_per_s']:,.0f} tok/s)")
    if gemm.get("peer_tok_per_s"):
        need = 2 * gemm["peer_tok_per_s"]
        text += (f"; 2× the fastest peer ({need:,.0f} tok/s) would need "
                 f"{need / train['float32']['max_tok_per_s']:.0%} of the float32 bound")
    if dec:
        text += (f". heed's beam-5 decode of {dec['sentences']:,} sentences ran {dec['decoder_rows']:,} decoder rows "
                 f"in {dec['steps']:,} steps; their products alone take {dec['float32']['s']:.2f} s in float32 "
                 f"({dec['float32']['max_sent_per_s']:,.1f} sentences/s at most) and {dec['bfloat16']['s']:.2f} s in "
                 f"bfloat16 ({dec['bfloat16']['max_sent_per_s']:,.1f})")
        if gemm.get("peer_sent_per_s"):
            need = 3 * gemm["peer_sent_per_s"]
            text += (f"; 3× the fastest peer ({need:,.1f} sentences/s) would need "
                     f"{need / dec['float32']['max_sent_per_s']:.0%} of the float32 bound")
    return [text + ".", ""]


# ------------------------------------------------------------------------------------ report


def _median(values: list[float | None]) -> float | None:
    """The median, or None when a value is missing (a peer's load time is not measured apart)."""
    if not values or any(v is None for v in values):
        return None
    return sorted(values)[len(values) // 2]


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "–" if value is None else format(value, fmt)


def table(results: list[dict], floor: dict | None, tps: float, args: argparse.Namespace, n_test: int,
          metric: str) -> str:
    names = [r["name"] for r in results]
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, cell) -> None:
        cells = []
        for r in results:
            if r["status"] != "ok":
                cells.append("–")
                continue
            try:
                cells.append(cell(r))
            except (KeyError, TypeError, ValueError):
                cells.append("failed")
        rows.append((label, cells))

    rows.append(("status", [r["status"] if r["status"] == "ok" else f"**{r['status']}**" for r in results]))
    row("version", lambda r: r.get("version", "?"))
    row("parameters", lambda r: _num(r["train"]["params"]))
    row("train: target tokens/s (after step 50)", lambda r: _num(r["train"]["tok_per_s"]))
    row("train: each run's tokens/s (heed: first and last)",
        lambda r: " / ".join(_num(t) for t in r["train"]["runs_tok_per_s"]))
    row(f"train: ms per step ({tps:,.0f} target tokens)", lambda r: _num(1e3 * tps / r["train"]["tok_per_s"], ".1f"))
    if floor and "rows" in floor:  # the Transformer's: against the bare torch.nn.Transformer step
        bare = floor["rows"]["bare step (torch.nn.Transformer) + Adam"]["tok_per_s"]
        row("train: time per token / bare PyTorch step", lambda r: _num(bare / r["train"]["tok_per_s"], ".2f") + "×")
    elif floor:
        floor_rate = floor["tokens_per_step"] / floor["floor_s"]  # per token: the floor's batches differ a little
        row("train: time per token / floor", lambda r: _num(floor_rate / r["train"]["tok_per_s"], ".2f") + "×")
    row(f"train: wall time for {args.steps} steps, s (whole process)", lambda r: _num(r["train"]["seconds"]))
    row("train: CPU time (user + system), s", lambda r: _num(r["train"]["cpu_seconds"]))
    row("train: peak RSS, MB", lambda r: _num(r["train"]["max_rss_mb"]))
    for beam, batch, n in decode_plan(args):
        what = "greedy" if beam == 1 else f"beam {beam}"
        row(f"decode {what}, batch {batch}: sentences/s ({n:,})",
            lambda r, k=f"beam{beam}_batch{batch}": _num(r["decode"][k]["sent_per_s"], ",.1f"))
    row(f"decode: mean output tokens (greedy, batch {args.decode_batch})",
        lambda r: _num(r["decode"][f"beam1_batch{args.decode_batch}"]["mean_output_tokens"], ".2f"))
    for beam, batch, n in decode_plan(args):  # outputs of different lengths: the rate per output token too
        what = "greedy" if beam == 1 else f"beam {beam}"
        row(f"decode {what}, batch {batch}: output tokens/s",
            lambda r, k=f"beam{beam}_batch{batch}": _num(_tokens_per_s(r["decode"][k]), ",.0f"))
    row("decode: peak RSS, MB (max of the four)",
        lambda r: _num(max(d["max_rss_mb"] for d in r["decode"].values() if d.get("max_rss_mb"))))
    row("decode: model load, s (heed.load; median of the four)",
        lambda r: _num(_median([d.get("load_seconds") for d in r["decode"].values()]), ".3f"))
    for beam in (1, 5):
        what = "greedy" if beam == 1 else f"beam {beam}"
        row(f"{metric}, {what} (test, {n_test:,})", lambda r, k=f"beam{beam}": _num(r["quality"][k], ".1f"))
    row("load before training (1/5/15 min)", lambda r: r["train"]["loadavg"])
    # the Python toolkits; CTranslate2 (a C++ runtime on OpenNMT-py's model) gets rows of its own
    peers = [r for r in results if r["status"] == "ok" and r["key"] in PEERS]
    ct2 = {r["key"]: r for r in results if r["status"] == "ok" and r["key"].startswith("ct2")}

    def versus_peers(label: str, value) -> None:
        """heed's figure divided by the best peer's, in heed's columns."""
        try:
            best = max(value(r) for r in peers)
        except (KeyError, TypeError, ValueError):
            return
        row(label, lambda r: f"**{value(r) / best:.2f}×**" if r["key"].startswith("heed") else "")

    def versus_ct2(label: str, value) -> None:
        """heed's float32 columns divided by CTranslate2 float32's figure, heed's int8 by CTranslate2
        int8's (the same precision); heed's bf16 column has no CTranslate2 counterpart here."""
        twin = {"heed": "ct2", "heed-onnx": "ct2", "heed-compile": "ct2", "heed-onnx-int8": "ct2-int8",
                "heed-ct2": "ct2", "heed-ct2-int8": "ct2-int8"}

        def cell(r: dict) -> str:
            other = ct2.get(twin.get(r["key"], ""))
            return f"**{value(r) / value(other):.2f}×**" if other else ""
        row(label, cell)

    plan = [(beam, batch, "greedy" if beam == 1 else f"beam {beam}") for beam, batch, _ in decode_plan(args)]
    if peers:
        versus_peers("train: tokens/s ÷ the fastest Python peer's", lambda r: r["train"]["tok_per_s"])
        for beam, batch, what in plan:
            versus_peers(f"decode {what}, batch {batch}: ÷ the fastest Python peer's",
                         lambda r, k=f"beam{beam}_batch{batch}": r["decode"][k]["sent_per_s"])
    if ct2:
        for beam, batch, what in plan:
            versus_ct2(f"decode {what}, batch {batch}: ÷ CTranslate2 at the same precision",
                       lambda r, k=f"beam{beam}_batch{batch}": r["decode"][k]["sent_per_s"])
        for beam, batch, what in plan:
            versus_ct2(f"decode {what}, batch {batch}, per output token: ÷ CTranslate2 at the same precision",
                       lambda r, k=f"beam{beam}_batch{batch}": _tokens_per_s(r["decode"][k]))

    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines)


def report(results: list[dict], floor: dict | None, gemm: dict | None, info: dict, args: argparse.Namespace,
           bench: Bench, command: str, n_test: int, tps: float, started: datetime, minutes: float) -> str:
    ds = bench.dataset
    model = (f"{TRANSFORMER.describe()}; batches of 128 sentences, seed {args.seed}, {args.steps} steps"
             if bench.transformer else
             f"embedding {ds.embed}, 1-layer biLSTM encoder {ds.hidden // 2} per direction, 1-layer LSTM decoder "
             f"{ds.hidden}, Luong general attention with input feeding, no dropout; Adam 1e-3 constant, clip 5, "
             f"batches of 128 sentences, seed {args.seed}, {args.steps} steps")
    out = [(f"## {ds.title}{', Transformer' if bench.transformer else ''}"
           f"{variant_suffix(args, ', {} threads each', ', seed {}')}"), "",
           (f"{started:%Y-%m-%d %H:%M} UTC, {minutes:.0f} min. Machine: {info['cpu']}, {info['cores']} cores; "
           f"torch {info['torch']} in every system (CPU), {info['threads']} thread(s) each "
           f"(`OMP_NUM_THREADS={info['threads']}`, heed `train.threads: {info['threads']}`); Python {info['python']}; "
           "systems run one after another: every system trains, then heed trains again (its tokens/s is the mean "
           "of its first and last run); then each decoding setting runs every system back to back, the order "
           "reversed from one setting to the next, so a drift of the host's speed favours no one. "
           "GPU memory: not measured (a CPU run; the peers' configs are CPU-only)."), "",
           "Command:", "", "```", command, "```", "",
           f"Model: {model}. Data: {ds.describe()}. Decoding: at most {bench.max_len} tokens, no length penalty.",
           "", table(results, floor, tps, args, n_test, ds.metric), ""]
    if floor and "rows" in floor:
        out += transformer_floor_text(floor)
    elif floor:
        out += [f"Floor (bench/floor.py, same shapes and lengths, {floor['threads']} thread, load before "
                f"{floor['loadavg']}): bare LSTMs forward+backward {1e3 * floor['floor_s']:.1f} ms/step "
                f"({floor['tokens_per_step'] / floor['floor_s']:,.0f} tok/s); the same with Adam "
                f"{1e3 * floor['floor_update_s']:.1f} ms; the whole model in bare PyTorch (attention, input-feeding "
                f"loop) {1e3 * floor['bare_model_s']:.1f} ms; heed's model outside its trainer "
                f"{1e3 * floor['heed_model_s']:.1f} ms"
                + (f"; heed's trainer {1e3 * floor['heed_trainer_s']:.1f} ms "
                   f"({floor['heed_trainer_s'] / floor['floor_s']:.2f}× the floor)." if "heed_trainer_s" in floor else "."),
                ""]
    if gemm:
        out += gemm_floor_text(gemm)
    clip = ds.heed_clip(bench)
    if bench.transformer:
        loss_note = ("- every system normalises the loss per target token and clips the gradient norm at "
                     f"{TRANSFORMER.clip:g}; heed reads the files with its `word` tokenizer (space-separated tokens, "
                     "as the peers do).")
        params_note = ("- parameter counts differ a little: each toolkit builds its vocabularies with its own "
                       "special tokens, and OpenNMT-py's generator has a bias the others lack. fairseq 0.12.2's "
                       "count holds each encoder layer's weights twice: its layers keep a second copy for their "
                       "fused inference path (`fc1_weight`, `fc2_weight`, ... beside `fc1.weight`), which the "
                       "training does not use; the model it trains is the same size as the others'.")
    else:
        loss_note = ("- heed normalises the loss per target token, the peers per sentence; with Adam (scale-free) "
                     f"heed's clip {clip:.4f} = 5 / (mean target tokens) gives the peers' clip-5 updates"
                     + (" exactly (every dates target has 11 tokens)." if ds.name == "dates" else " approximately.")
                     + " heed reads the files with its `word` tokenizer (space-separated tokens, as the peers do).")
        params_note = (f"- parameter counts: OpenNMT-py and fairseq {EXPECTED_PARAMS['onmt']:,}, Joey "
                       f"{EXPECTED_PARAMS['joey']:,} on dates (Joey adds a bridge layer). OpenNMT-py and fairseq round "
                       "vocabularies up to a multiple of 8; heed does not, so on dates it has one target row fewer "
                       "(15 vs 16: 64 + 129 = 193 parameters) and the same architecture." if ds.name == "dates" else
                       "- parameter counts differ a little: Joey adds a bridge layer; OpenNMT-py and fairseq round "
                       "vocabularies up to a multiple of 8 and build them with their own rules from the same pieces.")
    notes = [
        "How each figure is measured:",
        ("- training throughput: each system's own log, target tokens (EOS included) per second, pooled over the "
        "50-step windows after step 50 (`parse_train.py`; heed: the `tok_per_s` of its `metrics.jsonl`, pooled the "
        "same way); ms per step = target tokens per step / throughput. Peak RSS: `/usr/bin/time -v` "
        "(\"Maximum resident set size\"); CPU time from the same, a check on the wall-clock figures when other "
        "load was present."),
        ("- decoding: each system's own timer, model loading excluded: Joey \"Generation took\", OpenNMT-py "
        "\"Total translation time\" (refined by its tokens/s), fairseq-generate \"Translated … in Xs\", heed the "
        "`Translator.translate` call (bench/compare/heed_decode.py). fairseq has no separate greedy decoder: "
        "its greedy is beam search with beam 1. Decoding time grows with the output length: compare the "
        "mean output tokens too."),
        f"- {ds.metric}: on the first {n_test:,} outputs of the batch-{args.decode_batch} decodes (the test set).",
        loss_note,
        params_note,
    ]
    if any(r["key"].startswith("ct2") for r in results):
        notes.append("- CTranslate2 columns: OpenNMT-py's model converted by CTranslate2's OpenNMTPyConverter "
                     "(bench/compare/ct2_convert.py; float32), "
                     "decoded by bench/compare/ct2_decode.py (`translate_batch`, 1 inter and --threads intra "
                     "threads, no length penalty) with compute_type float32 or int8; their training rows repeat "
                     "OpenNMT-py's, their train wall time and RSS are the conversion's.")
    if any(r["key"].startswith("heed-ct2") for r in results):
        notes.append("- heed-ct2 columns: heed's own model exported with `heed export --format ctranslate2 [--int8]` "
                     "(heed.export.ct2: CTranslate2's TransformerSpec filled from heed's weights) and decoded by "
                     "CTranslate2's search through `heed.load(...).translate` (heed.export.ct2_run); their training "
                     "rows repeat heed's, their train wall time and RSS are the export's.")
    if any(r["key"] == "heed-bf16" for r in results):
        notes.append("- \"heed, bf16\": the same heed run with `train.bf16: true` (autocast: float32 weights, "
                     "bf16 matrix products, which CPUs with AMX run several times faster), decoded with `--bf16` "
                     "(weights cast to bf16 once, bf16 products, float32 log-probabilities). Every other system, and "
                     "heed's own column, trains and decodes in float32.")
    if any(r["key"] == "heed-compile" for r in results):
        notes.append("- \"heed, compile\": the same heed run with `train.compile: true` (torch.compile, inductor, on the "
                     "decoder's teacher-forced pass; the encoder and the loss stay eager). It compiles in its first "
                     "steps: outside the tokens/s windows (after step 50), inside the wall time. It decodes as heed does.")
    for r in results:
        if r["status"] != "ok":
            reason = (r.get("reason") or r["status"]).splitlines()[0]
            notes.append(f"- {r['name']}: {reason if reason.startswith(r['status']) else r['status'] + ': ' + reason}")
        for err in r.get("errors", []):
            notes.append(f"- {r['name']}: {err.splitlines()[0]}")
    out += notes
    return "\n".join(out) + "\n"


def variant_suffix(args: argparse.Namespace, threads_pattern: str, seed_pattern: str) -> str:
    """The one-thread, seed-42 comparison is the reference table; a run with more threads or another
    seed gets a section and markers of its own (each pattern filled with its value), so it sits
    beside that table instead of replacing it."""
    return ((threads_pattern.format(args.threads) if args.threads != 1 else "")
            + (seed_pattern.format(args.seed) if args.seed != REFERENCE_SEED else ""))


def write_section(path: Path, section: str, marker: str) -> None:
    """Replace the text between our markers (or append it); the rest of the file is left alone."""
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    block = f"{start}\n{section.rstrip()}\n{end}\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        after = rest.split(end, 1)[1].lstrip("\n")
        text = head + block + ("\n" + after if after else "")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    command = shlex.join(["python", "bench/compare/run.py", *(sys.argv[1:] if argv is None else argv)])
    peers = args.peers_dir.absolute()
    work = (args.work_dir or peers / "compare" / args.dataset).absolute()
    shared = args.shared_dir.resolve()
    if not (shared / "make_data.py").exists():
        say(f"error: {shared} holds no make_data.py; point --shared-dir at the shared peers folder")
        return 2
    dataset = Dates() if args.dataset == "dates" else Multi30k(args.multi30k_dir.resolve(), args.spm_vocab)
    work.mkdir(parents=True, exist_ok=True)
    heed_python = Path(sys.executable)
    bench = Bench(repo=REPO, work=work, peers=peers, shared=shared, heed_python=heed_python, dataset=dataset,
                  steps=args.steps, threads=args.threads, seed=args.seed, max_len=args.max_len or dataset.max_len,
                  timeout=args.timeout, env=bench_env(args.threads), model=args.model)
    info = machine(args.threads, heed_python)
    say(f"work folder {work}; peers {peers}; shared scripts {shared}")
    say(f"machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']}, {args.threads} thread(s); "
        f"load {loadavg()}")
    try:
        n_test = make_data(bench, args)
    except StepFailed as e:
        say(f"error: cannot make the {dataset.name} data: {e}")
        return 1
    tps = tokens_per_step(bench)
    results = run_all(bench, args, n_test)
    heed = next((r for r in results if r["key"] == "heed" and r["status"] == "ok"), None)
    floor = run_floor(bench, heed["train"]["tok_per_s"] if heed else None)
    gemm = run_gemm_floor(bench, results, args)
    minutes = (time.perf_counter() - t0) / 60
    section = report(results, floor, gemm, info, args, bench, command, n_test, tps, started, minutes)
    (work / "results.json").write_text(json.dumps({"machine": info, "command": command, "results": results,
                                                    "floor": floor, "gemm_floor": gemm}, indent=2, default=str) + "\n")
    (work / "results.md").write_text(section, encoding="utf-8")
    say("\n" + section)
    if not args.no_results:
        marker = dataset.marker + ("-transformer" if args.model == "transformer" else "") \
            + variant_suffix(args, "-threads{}", "-seed{}")
        write_section(args.results, section, marker)
        say(f"written to {args.results} (between the <!-- {marker}:start/end --> markers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
