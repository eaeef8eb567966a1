"""Load test of `heed serve`: throughput, latency and memory with dynamic batching on and off.

    .venv/bin/python bench/studies/serve_load.py [--model runs/demo/model] [--clients 1 8 64] [--duration 30]
        [--beam 5] [--sentences-per-request 1] [--json OUT.json] [--quick]

The script starts the server itself, twice, on a free loopback port (127.0.0.1 only; nothing else
is accepted):
    batching     `heed serve MODEL` with its default dynamic batching (requests that arrive within
                 --batch-wait-ms are decoded together, up to --batch-sentences sentences a batch);
    no-batching  `heed serve MODEL --no-batching` (each request decoded alone, in arrival order).
It waits for GET /health (at most --startup-timeout seconds) and stops the server at the end of the
mode, also on Ctrl-C or an error.

At each concurrency level (--clients, at most 256) that many asyncio clients, one keep-alive
connection each, send POST /v1/translate as fast as they can for --duration seconds (closed loop: a
client sends its next request when the previous one is answered), each with --sentences-per-request
sentences drawn from a fixed list of 200 dates-task sources (heed's own generator, all five
languages, seed 12345) and "beam_size": --beam (other decode options: the model's defaults; the
answer carries attention matrices and word alignments, as by default, unless --no-attention).
The clients speak HTTP/1.1 through a minimal asyncio client (~0.2 ms of client CPU a request;
`--client httpx` uses httpx instead, ~2 ms a request, which on a 2-core machine costs the server
~40% of its throughput at 64 clients). After the duration no new request is sent; those in
flight are waited for (each request has a --request-timeout) and counted, and the rates are over the
time from the level's start to its last answer. A few untimed requests warm the server up first.

Per (mode, clients): requests/s, sentences/s, p50 / p99 / max latency (ms, from sending a request to
having its whole JSON answer), errors (non-200 by status, exceptions by type, and answers whose
results do not match the request: wrong count or wrong "source"), the exact match of the 1-best
against the ISO date (a check that batching does not mix requests up, not a quality figure), the
server's peak resident memory during the level (VmRSS sampled every 0.5 s from /proc/PID/status)
and the CPU time the server and this client used (% of one core; the clients share the machine with
the server, so a client near 100% means the client, not the server, set the pace). At the end of a
mode, the server's VmHWM (its peak RSS over its whole life: model load, warm-up and every level).
Then sentences/s with batching over without at each level, and a check of the targets: no errors;
at 64 clients (else the largest level) sentences/s with batching >= 5x without; p99 bounded (every
p99 under the request timeout; the figures are printed). Exit status 1 when a target is missed.

--abuse runs every level twice on the same server, first as above and then with one more client
that sends, again and again, the costliest request the server's limits allow (64 of the longest
sources, beam 64, outputs as long as --max-work leaves): its answers are counted apart, and the
other clients' p99 with the abuser over their p99 without it is what the abuse costs them (target:
at most 2x at every level).

--apis v1 libretranslate deepl serves the model once (as fr-en) and sends the same load to heed's
own POST /v1/translate ("attention": false, the model's decode settings: what the compatibility
APIs ask of it) and to LibreTranslate's POST /translate and DeepL's POST /v2/translate, --rounds
rounds of --duration seconds per API at each level, interleaved; it prints each API's sentences/s
per round, their medians and each median over /v1's (target: at least 0.95).

The CPU model, core count, torch and heed versions are printed first: every figure names its CPU.
--quick runs 3 s per level (a smoke test, not a figure to quote).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

import httpx

MAX_CLIENTS = 256
MODES = ("batching", "no-batching")
N_SENTENCES = 200
SENTENCE_SEED = 12345
RSS_EVERY_S = 0.5
WARMUP_REQUESTS = 8
TARGET_RATIO = 5.0
TARGET_ABUSE_P99 = 2.0  # ordinary p99 with the abuser / without it, at every level


# ------------------------------------------------------------------------------------ machine


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_info() -> dict:
    """What every figure must name: the CPU, its cores, torch and heed (read without importing torch
    here: this process is the client and should stay small)."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    try:
        import heed

        heed_version = heed.__version__
    except ImportError:
        heed_version = "not importable"
    return {"cpu": cpu_model(), "logical_cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "torch": torch_version, "heed": heed_version, "python": platform.python_version(),
            "httpx": httpx.__version__}


# ------------------------------------------------------------------------------------ sentences


def date_sentences(n: int = N_SENTENCES, seed: int = SENTENCE_SEED) -> list[tuple[str, str]]:
    """(source, ISO target) pairs from heed's dates generator: every language, verbose forms too."""
    from heed.data.dates import generate_dates

    splits = generate_dates(n_train=0, n_dev=0, n_test=n, seed=seed)
    return [(p.src, p.tgt) for p in splits.test]


# ------------------------------------------------------------------------------------ /proc


def proc_status_kib(pid: int, key: str) -> int | None:
    """A `key: N kB` line of /proc/PID/status (VmRSS, VmHWM), in KiB; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (fields 14 and 15 of /proc/PID/stat), in seconds."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        fields = text[text.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


# ------------------------------------------------------------------------------------ the server


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerError(RuntimeError):
    pass


class Server:
    """`python -m heed serve MODEL --host 127.0.0.1 --port P ...` in its own session, its output in a
    log file; `stop()` (SIGINT, then SIGKILL after 10 s) is safe to call more than once."""

    def __init__(self, model: Path, host: str, extra: list[str], log_dir: Path, mode: str) -> None:
        self.host, self.port = host, free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.command = [sys.executable, "-m", "heed", "serve", str(model), "--host", host, "--port", str(self.port),
                        *extra]
        self.log_path = log_dir / f"server-{mode}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join("    " + line for line in text.rstrip().splitlines()[-lines:])

    def wait_healthy(self, timeout_s: float) -> dict:
        """Poll GET /health until it answers 200 with status ok; ServerError if the process exits or
        `timeout_s` passes first."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    raise ServerError(f"the server exited with status {code} before /health answered:\n"
                                      f"    {' '.join(self.command)}\n{self.log_tail()}")
                try:
                    r = client.get(self.url + "/health")
                    if r.status_code == 200 and r.json().get("status") == "ok":
                        return r.json()
                    last = f"HTTP {r.status_code}: {r.text[:200]}"
                except (httpx.HTTPError, ValueError) as e:
                    last = f"{type(e).__name__}: {e}"
                if time.monotonic() > deadline:
                    raise ServerError(f"the server did not answer GET /health within {timeout_s:.0f} s "
                                      f"(last: {last}):\n    {' '.join(self.command)}\n{self.log_tail()}")
                time.sleep(0.2)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()
        return self.proc.returncode


# ------------------------------------------------------------------------------------ the clients


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class Level:
    mode: str
    clients: int
    abused: bool = False        # the --abuse client ran beside this level's clients
    requests: int = 0           # answered 200 with matching results
    sentences: int = 0
    exact: int = 0              # 1-best == ISO target
    seconds: float = 0.0        # level start to last answer
    rps: float = 0.0
    sps: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    peak_rss_mib: float | None = None
    server_cpu_pct: float | None = None
    client_cpu_pct: float | None = None
    # --abuse: the one client that sends the costliest request the limits allow, again and again
    abuse_requests: int = 0
    abuse_statuses: dict[str, int] = field(default_factory=dict)
    abuse_p50_ms: float | None = None

    @property
    def n_errors(self) -> int:
        return sum(self.errors.values())


class RawHTTP:
    """A minimal HTTP/1.1 keep-alive client on one asyncio connection: what the load needs and
    nothing more (POST a JSON body, read a Content-Length or chunked answer). About 0.2 ms of client
    CPU a request, against ~2 ms for httpx: on a small machine the client shares the CPU with the
    server, and httpx alone would take a core at 64 clients. Reconnects after any error."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, payload: bytes) -> tuple[int, bytes]:
        try:
            return await asyncio.wait_for(self._post(path, payload), self.timeout)
        except BaseException:
            await self.close()  # a half-read answer must not be taken for the next one
            raise

    async def _post(self, path: str, payload: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(f"POST {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\ncontent-type: application/json"
                          f"\r\ncontent-length: {len(payload)}\r\n\r\n".encode("ascii") + payload)
        await self.writer.drain()
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            content = b"".join(parts)
        else:
            content = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, content

    async def close(self) -> None:
        writer, self.reader, self.writer = self.writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class HttpxHTTP:
    """The same through httpx, one AsyncClient (one connection) per simulated client: httpcore's
    pool scans every connection on every request, so one shared pool of 64 costs the client ~8 ms of
    CPU a request."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.base = f"http://{host}:{port}"
        # trust_env=False: no proxy from the environment, ever; this is loopback only.
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0), trust_env=False,
                                        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))

    async def post(self, path: str, payload: bytes) -> tuple[int, bytes]:
        r = await self.client.post(self.base + path, content=payload, headers={"content-type": "application/json"})
        return r.status_code, r.content

    async def close(self) -> None:
        await self.client.aclose()


class Load:
    def __init__(self, host: str, port: int, model: str | None, pairs: list[tuple[str, str]], per_request: int,
                 beam: int, attention: bool | None, request_timeout: float, client_kind: str) -> None:
        self.host, self.port, self.model, self.pairs = host, port, model, pairs
        self.per_request, self.beam, self.attention = per_request, beam, attention
        self.request_timeout = request_timeout
        self.connection_class = RawHTTP if client_kind == "raw" else HttpxHTTP

    def body(self, k: int) -> tuple[bytes, list[tuple[str, str]]]:
        n = len(self.pairs)
        chosen = [self.pairs[(k * self.per_request + j) % n] for j in range(self.per_request)]
        body: dict = {"sentences": [s for s, _ in chosen], "beam_size": self.beam}
        if self.model is not None:
            body["model"] = self.model
        if self.attention is not None:
            body["attention"] = self.attention
        return json.dumps(body).encode("utf-8"), chosen

    path = "/v1/translate"

    def read(self, content: bytes, chosen: list[tuple[str, str]]) -> tuple[bool, int]:
        """(the answer has a result for each sentence sent, in order; how many 1-bests are the ISO date)."""
        try:
            results = json.loads(content)["results"]
            ok = len(results) == len(chosen) and all(res["source"] == src for res, (src, _) in zip(results, chosen))
            return ok, sum(res["hypotheses"][0]["text"] == tgt for res, (_, tgt) in zip(results, chosen))
        except (ValueError, KeyError, TypeError, IndexError):
            return False, 0

    def connection(self) -> RawHTTP | HttpxHTTP:
        return self.connection_class(self.host, self.port, self.request_timeout)

    async def one(self, conn: RawHTTP | HttpxHTTP, k: int, level: Level, latencies: list[float]) -> None:
        """One request; its latency, or its error under a key: "HTTP <status>", the exception type
        ("TimeoutError" past --request-timeout), or "bad answer" (not JSON, wrong number of
        results, a result for another source)."""
        payload, chosen = self.body(k)
        start = time.perf_counter()
        try:
            status, content = await conn.post(self.path, payload)
        except (OSError, EOFError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, httpx.HTTPError) as e:
            key = type(e).__name__
        else:
            elapsed = time.perf_counter() - start
            if status != 200:
                key = f"HTTP {status}"
            else:
                ok, exact = self.read(content, chosen)
                if ok:
                    latencies.append(elapsed)
                    level.requests += 1
                    level.sentences += len(chosen)
                    level.exact += exact
                    return
                key = "bad answer"
        level.errors[key] = level.errors.get(key, 0) + 1

    async def client_loop(self, index: int, deadline: float, level: Level, latencies: list[float]) -> float:
        """Closed loop on one keep-alive connection until `deadline`; returns when its last answer
        came. Clients start at different places in the sentence list."""
        conn = self.connection()
        k = index * 37
        last = time.perf_counter()
        try:
            while time.perf_counter() < deadline:
                await self.one(conn, k, level, latencies)
                last = time.perf_counter()
                k += 1
        finally:
            await conn.close()
        return last

    async def warm_up(self, level: Level) -> None:
        """A few untimed requests, 4 at a time (not counted)."""
        conns = [self.connection() for _ in range(4)]
        try:
            for k in range(0, WARMUP_REQUESTS, len(conns)):
                await asyncio.gather(*(self.one(c, 1000 + k + i, level, []) for i, c in enumerate(conns)))
        finally:
            for c in conns:
                await c.close()

    async def abuse_loop(self, deadline: float, level: Level, body: bytes) -> None:
        """--abuse: one more client, on its own connection, sending `body` (the costliest request the
        server's limits allow) in a closed loop until `deadline`; its answers are counted apart."""
        conn = self.connection()
        latencies = []
        try:
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                try:
                    status, _ = await conn.post("/v1/translate", body)
                    key = str(status)
                except (OSError, EOFError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError,
                        httpx.HTTPError) as e:
                    key = type(e).__name__
                    await conn.close()
                    conn = self.connection()
                latencies.append(time.perf_counter() - start)
                level.abuse_requests += 1
                level.abuse_statuses[key] = level.abuse_statuses.get(key, 0) + 1
        finally:
            await conn.close()
        latencies.sort()
        level.abuse_p50_ms = percentile([1000 * x for x in latencies], 50)

    async def run_level(self, mode: str, clients: int, duration: float, server_pid: int,
                        abuse: bytes | None = None) -> Level:
        level = Level(mode, clients, abused=abuse is not None)
        latencies: list[float] = []
        rss_peak = 0
        stop_sampling = asyncio.Event()

        async def sample_rss() -> None:
            nonlocal rss_peak
            while True:
                rss = proc_status_kib(server_pid, "VmRSS")
                if rss is not None:
                    rss_peak = max(rss_peak, rss)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop_sampling.wait(), RSS_EVERY_S)
                    return

        sampler = asyncio.create_task(sample_rss())
        server_cpu0, client_cpu0 = proc_cpu_seconds(server_pid), time.process_time()
        start = time.perf_counter()
        abuser = None if abuse is None else asyncio.create_task(self.abuse_loop(start + duration, level, abuse))
        try:
            ends = await asyncio.gather(*(self.client_loop(i, start + duration, level, latencies)
                                          for i in range(clients)))
            level.seconds = max(max(ends), start + 1e-9) - start
            if abuser is not None:
                await abuser
        finally:
            stop_sampling.set()
            await sampler
        rss = proc_status_kib(server_pid, "VmRSS")
        rss_peak = max(rss_peak, rss or 0)
        server_cpu1, client_cpu1 = proc_cpu_seconds(server_pid), time.process_time()
        level.peak_rss_mib = rss_peak / 1024 if rss_peak else None
        if server_cpu0 is not None and server_cpu1 is not None:
            level.server_cpu_pct = 100 * (server_cpu1 - server_cpu0) / level.seconds
        level.client_cpu_pct = 100 * (client_cpu1 - client_cpu0) / level.seconds
        level.rps, level.sps = level.requests / level.seconds, level.sentences / level.seconds
        latencies.sort()
        ms = [1000 * x for x in latencies]
        level.p50_ms, level.p99_ms = percentile(ms, 50), percentile(ms, 99)
        level.max_ms = ms[-1] if ms else None
        return level


# ------------------------------------------------------------------------------------ report


def fmt(x: float | None, spec: str = ",.1f") -> str:
    return "-" if x is None else format(x, spec)


def errors_text(errors: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(errors.items())) if errors else "0"


def print_level_header() -> None:
    print("| mode | clients | requests | req/s | sent/s | p50 ms | p99 ms | max ms | exact % | errors "
          "| peak RSS MiB | server CPU % | client CPU % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")


def print_level(lv: Level) -> None:
    exact = 100 * lv.exact / lv.sentences if lv.sentences else None
    print(f"| {lv.mode}{' + abuser' if lv.abused else ''} | {lv.clients} | {lv.requests:,} | {lv.rps:,.1f} | {lv.sps:,.1f} | {fmt(lv.p50_ms)} "
          f"| {fmt(lv.p99_ms)} | {fmt(lv.max_ms)} | {fmt(exact)} | {errors_text(lv.errors)} | {fmt(lv.peak_rss_mib)} "
          f"| {fmt(lv.server_cpu_pct, '.0f')} | {fmt(lv.client_cpu_pct, '.0f')} |", flush=True)
    if lv.abuse_requests:
        print(f"|   + abuser | 1 | {lv.abuse_requests:,} answered ({errors_text(lv.abuse_statuses)}) | | | "
              f"{fmt(lv.abuse_p50_ms)} | | | | | | | |", flush=True)


def checks(levels: list[Level], clients: list[int], request_timeout: float, modes: list[str]) -> dict:
    by = {(lv.mode, lv.clients): lv for lv in levels if not lv.abused}
    total_errors = sum(lv.n_errors for lv in levels)
    out: dict = {"errors": {"total": total_errors, "pass": total_errors == 0}}
    target_level = 64 if 64 in clients else max(clients)
    if set(MODES) <= set(modes):
        on, off = by.get(("batching", target_level)), by.get(("no-batching", target_level))
        ratio = on.sps / off.sps if on and off and off.sps > 0 else None
        out["batching_speedup"] = {"clients": target_level, "ratio": ratio, "target": TARGET_RATIO,
                                   "pass": ratio is not None and ratio >= TARGET_RATIO}
    abused = {(lv.mode, lv.clients): lv for lv in levels if lv.abused}
    if abused:
        costs = {f"{mode}@{c}": (lv.p99_ms / by[(mode, c)].p99_ms
                                 if lv.p99_ms is not None and by[(mode, c)].p99_ms else None)
                 for (mode, c), lv in abused.items()}
        out["abuse_p99"] = {"ratios": costs, "target": TARGET_ABUSE_P99,
                            "pass": all(r is not None and r <= TARGET_ABUSE_P99 for r in costs.values())}
    p99 = {f"{lv.mode}{'+abuser' if lv.abused else ''}@{lv.clients}": lv.p99_ms for lv in levels}
    out["p99_ms"] = {"values": p99, "limit_ms": 1000 * request_timeout,
                     "pass": all(v is not None and v < 1000 * request_timeout for v in p99.values())}
    out["pass"] = all(c["pass"] for c in out.values() if isinstance(c, dict))
    return out


# ------------------------------------------------------------------------------------ main


def server_flags(args: argparse.Namespace, mode: str, max_queue: int) -> list[str]:
    flags = ["--max-queue", str(max_queue), "--max-work", str(args.max_work)]
    for name in ("batch_wait_ms", "batch_sentences", "threads", "slice_work"):
        value = getattr(args, name)
        if value is not None:
            flags += ["--" + name.replace("_", "-"), str(value)]
    if mode == "no-batching":
        flags.append("--no-batching")
    return flags + list(args.server_arg)


def abuse_body(model_name: str | None, pairs, max_work: int) -> bytes:
    """The costliest request the server's default limits allow: 64 sentences (--max-sentences), the
    longest sources of the list, beam 64 (--max-beam), each output forced to as many tokens as
    --max-work leaves (max_len_a 0, max_len_b = min_len just under it), and attention in the answer."""
    sentences = [s for s, _ in sorted(pairs, key=lambda p: -len(p[0]))[:64]]
    beam = 64
    steps = max(1, max_work // (len(sentences) * beam) - 1)  # work = sentences * beam * (steps + 1)
    # min_len = max_len: EOS is forbidden until the last step, so every search runs all its steps.
    body: dict = {"sentences": sentences, "beam_size": beam, "n_best": 1, "max_len_a": 0.0, "max_len_b": steps - 1,
                  "min_len": steps - 1}
    if model_name is not None:
        body["model"] = model_name
    return json.dumps(body).encode("utf-8")


async def run_mode(args: argparse.Namespace, server: Server, model_name: str | None, pairs, mode: str) -> list[Level]:
    load = Load(server.host, server.port, model_name, pairs, args.sentences_per_request, args.beam,
                False if args.no_attention else None, args.request_timeout, args.client)
    abuse = abuse_body(model_name, pairs, args.max_work) if args.abuse else None
    runs = [None, abuse] if abuse is not None else [None]  # --abuse: each level without, then with it
    warm = Level(mode, 0)
    await load.warm_up(warm)
    if warm.errors:
        print(f"  warm-up errors: {errors_text(warm.errors)}", flush=True)
    levels = []
    for clients in args.clients:
        if server.proc.poll() is not None:
            raise ServerError(f"the server exited (status {server.proc.returncode}) during the run:\n"
                              f"{server.log_tail()}")
        for abuser in runs:
            levels.append(await load.run_level(mode, clients, args.duration, server.pid, abuser))
            print_level(levels[-1])
    return levels


# --apis: the same sentences through heed's own API and the compatibility APIs of one server
API_PATHS = {"v1": "/v1/translate", "libretranslate": "/translate", "deepl": "/v2/translate"}
API_TARGET = 0.95  # each compatibility API's sentences/s at least this share of /v1's


class ApiLoad(Load):
    """The load of `Load` sent to `api`: /v1/translate ("attention": false, the model's decode
    settings, as the compatibility APIs ask it), LibreTranslate's /translate (q as a list, fr -> en)
    or DeepL's /v2/translate (text, FR -> EN-US)."""

    api = "v1"

    @property
    def path(self) -> str:  # type: ignore[override]
        return API_PATHS[self.api]

    def body(self, k: int) -> tuple[bytes, list[tuple[str, str]]]:
        n = len(self.pairs)
        chosen = [self.pairs[(k * self.per_request + j) % n] for j in range(self.per_request)]
        texts = [s for s, _ in chosen]
        if self.api == "v1":
            body: dict = {"sentences": texts, "attention": False}
        elif self.api == "libretranslate":
            body = {"q": texts, "source": "fr", "target": "en"}
        else:
            body = {"text": texts, "source_lang": "FR", "target_lang": "EN-US"}
        return json.dumps(body).encode("utf-8"), chosen

    def read(self, content: bytes, chosen: list[tuple[str, str]]) -> tuple[bool, int]:
        if self.api == "v1":
            return super().read(content, chosen)
        try:
            answer = json.loads(content)
            texts = (answer["translatedText"] if self.api == "libretranslate"
                     else [t["text"] for t in answer["translations"]])
            return len(texts) == len(chosen), sum(t == tgt for t, (_, tgt) in zip(texts, chosen))
        except (ValueError, KeyError, TypeError):
            return False, 0


async def compare_apis(args: argparse.Namespace, server: Server, pairs) -> list[Level]:
    """--apis: at each level, --rounds rounds of --duration seconds per API on the one server, in
    an order that turns each round (A B C, B C A, ...) so a drift of the machine's load falls on each alike."""
    load = ApiLoad(server.host, server.port, None, pairs, args.sentences_per_request, 1, None,
                   args.request_timeout, args.client)
    for api in args.apis:
        load.api = api
        await load.warm_up(Level(api, 0))
    levels = []
    for clients in args.clients:
        for r in range(args.rounds):
            for api in args.apis[r % len(args.apis):] + args.apis[:r % len(args.apis)]:
                load.api = api
                levels.append(await load.run_level(api, clients, args.duration, server.pid))
                print_level(levels[-1])
    return levels


def report_apis(args: argparse.Namespace, levels: list[Level]) -> bool:
    """The median sentences/s of each API per level, each over /v1's; True when every one is within
    API_TARGET and nothing failed."""
    import statistics

    ok = all(not lv.n_errors for lv in levels)
    print()
    print("sent/s: wall-clock throughput; per CPU s: sentences per second of the server's CPU time (on a busy")
    print("machine the server gets a varying share of the cores, which moves the first, not the second)")
    print()
    print("| clients | API | sent/s per round | median | / v1 | sent per server CPU s, per round | median | / v1 |")
    print("|---:|---|---|---:|---:|---|---:|---:|")

    def per_cpu(lv: Level) -> float:
        return 100 * lv.sps / lv.server_cpu_pct if lv.server_cpu_pct else 0.0

    for clients in args.clients:
        mine = {api: [lv for lv in levels if lv.mode == api and lv.clients == clients] for api in args.apis}
        wall = {api: statistics.median(lv.sps for lv in mine[api]) for api in args.apis}
        cpu = {api: statistics.median(per_cpu(lv) for lv in mine[api]) for api in args.apis}
        for api in args.apis:
            ratio = wall[api] / wall["v1"] if wall["v1"] else None
            cpu_ratio = cpu[api] / cpu["v1"] if cpu["v1"] else None
            ok = ok and (ratio is None or ratio >= API_TARGET)
            print(f"| {clients} | {api} | {', '.join(f'{lv.sps:,.1f}' for lv in mine[api])} | {wall[api]:,.1f} | "
                  f"{fmt(ratio, '.3f')} | {', '.join(f'{per_cpu(lv):,.1f}' for lv in mine[api])} | {cpu[api]:,.1f} | "
                  f"{fmt(cpu_ratio, '.3f')} |")
    print(f"check: errors {sum(lv.n_errors for lv in levels)}; each API's median sentences/s >= "
          f"{API_TARGET:g} x /v1's -> {'all targets met' if ok else 'TARGET MISSED'}")
    return ok


def _raise_interrupt(signum, frame):  # SIGTERM -> the same clean-up as Ctrl-C
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=Path("runs/demo/model"),
                   help="model directory to serve (default runs/demo/model, what `make demo` writes)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64],
                   help=f"concurrency levels, each 1..{MAX_CLIENTS} (default 1 8 64)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds per level (default 30)")
    p.add_argument("--quick", action="store_true", help="3 s per level: a smoke test")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="default: both")
    p.add_argument("--sentences-per-request", type=int, default=1, help="1..64 (default 1)")
    p.add_argument("--beam", type=int, default=5, help="beam_size of every request (default 5)")
    p.add_argument("--no-attention", action="store_true",
                   help='send "attention": false (default: the server\'s default, attention matrices included)')
    p.add_argument("--client", choices=("raw", "httpx"), default="raw",
                   help="the load's HTTP client: raw (a minimal asyncio HTTP/1.1 client, the default) or httpx")
    p.add_argument("--request-timeout", type=float, default=60.0, help="seconds per request (default 60)")
    p.add_argument("--startup-timeout", type=float, default=120.0,
                   help="seconds to wait for GET /health after starting the server (default 120)")
    p.add_argument("--host", default="127.0.0.1", help="loopback only: 127.0.0.1 is the one value accepted")
    p.add_argument("--abuse", action="store_true",
                   help="one more client sends the costliest request the limits allow (64 sentences, beam 64, "
                        "outputs as long as --max-work leaves), again and again; the others' p99 must stay bounded")
    p.add_argument("--max-work", type=int, default=1 << 18, help="the server's --max-work, for --abuse's request "
                   "(default: the server's default, 262144)")
    s = p.add_argument_group("server options (passed through to `heed serve`; default: the server's)")
    s.add_argument("--batch-wait-ms", type=float, default=None)
    s.add_argument("--batch-sentences", type=int, default=None)
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--slice-work", type=int, default=None)
    s.add_argument("--max-queue", type=int, default=None,
                   help="default: max(1024, 2 x largest level x sentences per request)")
    s.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for `heed serve` (repeatable), e.g. --server-arg=--bf16")
    p.add_argument("--apis", nargs="+", choices=tuple(API_PATHS), default=None,
                   help="instead of the modes: compare these APIs on one server with batching (v1 first: the "
                        "others are measured against it; the model served as fr-en, its own decode settings), "
                        f"each LibreTranslate's or DeepL's median sentences/s >= {API_TARGET:g} x /v1's")
    p.add_argument("--rounds", type=int, default=3, help="--apis: rounds per level, the APIs interleaved (default 3)")
    p.add_argument("--server-log-dir", type=Path, default=None, help="keep the servers' output here (default: temp)")
    p.add_argument("--json", type=Path, default=None, help="also write every figure here")
    args = p.parse_args(argv)

    if args.host != "127.0.0.1":
        p.error(f"--host {args.host!r}: this load test only talks to 127.0.0.1 (loopback)")
    if not ipaddress.ip_address(args.host).is_loopback:  # belt and braces
        p.error("--host must be loopback")
    if any(not 1 <= c <= MAX_CLIENTS for c in args.clients):
        p.error(f"--clients: each level must be 1..{MAX_CLIENTS}")
    args.clients = list(dict.fromkeys(args.clients))
    if args.quick:
        args.duration = 3.0
    if not 0 < args.duration <= 3600:
        p.error("--duration must be in (0, 3600] seconds")
    if not 1 <= args.sentences_per_request <= 64:
        p.error("--sentences-per-request must be 1..64")
    if args.beam < 1:
        p.error("--beam must be >= 1")
    if not 0 < args.request_timeout <= 600 or not 0 < args.startup_timeout <= 3600:
        p.error("--request-timeout must be in (0, 600] and --startup-timeout in (0, 3600]")
    if not (args.model / "heed.json").is_file():
        print(f"no model at {args.model} (no heed.json there): run `make demo` first, or pass --model DIR",
              file=sys.stderr)
        return 2
    max_queue = args.max_queue or max(1024, 2 * max(args.clients) * args.sentences_per_request)

    info = machine_info()
    print(f"CPU: {info['cpu']}, {info['logical_cpus']} logical CPU(s) ({info['usable_cpus']} usable); "
          f"torch {info['torch']}, heed {info['heed']}, Python {info['python']}, httpx {info['httpx']}")
    print(f"model {args.model}; {args.duration:g} s per level, clients {' '.join(map(str, args.clients))}, "
          f"{args.sentences_per_request} sentence(s) per request, beam {args.beam}"
          f"{', no attention' if args.no_attention else ''}, {args.client} client, "
          f"request timeout {args.request_timeout:g} s, server --max-queue {max_queue}", flush=True)
    pairs = date_sentences()

    signal.signal(signal.SIGTERM, _raise_interrupt)
    if args.apis:
        apis = ["v1", *(a for a in dict.fromkeys(args.apis) if a != "v1")]
        args.apis = apis
        with tempfile.TemporaryDirectory(prefix="heed-serve-apis-") as log_dir:
            server = Server(args.model, args.host, server_flags(args, "batching", max_queue) + ["--names", "fr-en"],
                            Path(log_dir), "apis")
            try:
                server.wait_healthy(args.startup_timeout)
                print()
                print_level_header()
                levels = asyncio.run(compare_apis(args, server, pairs))
            except KeyboardInterrupt:
                print("\ninterrupted; stopping the server", file=sys.stderr)
                return 130
            finally:
                server.stop()
        ok = report_apis(args, levels)
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"machine": info, "apis": args.apis, "levels": [asdict(lv) for lv in levels]},
                                            indent=2) + "\n", encoding="utf-8")
        return 0 if ok else 1
    log_dir_ctx = (contextlib.nullcontext(args.server_log_dir) if args.server_log_dir
                   else tempfile.TemporaryDirectory(prefix="heed-serve-load-"))
    levels: list[Level] = []
    hwm: dict[str, float | None] = {}
    health: dict[str, dict] = {}
    with log_dir_ctx as log_dir:
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        print()
        print_level_header()
        for mode in args.modes:
            server = None
            try:
                server = Server(args.model, args.host, server_flags(args, mode, max_queue), log_dir, mode)
                health[mode] = server.wait_healthy(args.startup_timeout)
                models = health[mode].get("models") or []
                model_name = models[0] if len(models) == 1 else None
                levels += asyncio.run(run_mode(args, server, model_name, pairs, mode))
                kib = proc_status_kib(server.pid, "VmHWM")
                hwm[mode] = kib / 1024 if kib else None
            except ServerError as e:
                print(f"\nerror ({mode}): {e}", file=sys.stderr)
                if server is not None:  # stopped here: its log is in the message already
                    server.stop()
                    server = None
                return 1
            except KeyboardInterrupt:
                print(f"\ninterrupted ({mode}); stopping the server", file=sys.stderr)
                return 130
            finally:
                if server is not None:
                    code = server.stop()
                    if code not in (0, 130, -signal.SIGINT, None):  # 130: stopped before uvicorn ran
                        print(f"  (the {mode} server exited with status {code}; its log:\n{server.log_tail(10)})",
                              file=sys.stderr)

    print()
    print("server VmHWM (peak RSS over its life) per mode: "
          + ", ".join(f"{m} {fmt(v)} MiB" for m, v in hwm.items()))
    ratios = []
    if set(MODES) <= set(args.modes):
        by = {(lv.mode, lv.clients): lv for lv in levels if not lv.abused}
        print()
        print("| clients | sent/s batching | sent/s no-batching | batching / no-batching |")
        print("|---:|---:|---:|---:|")
        for c in args.clients:
            on, off = by[("batching", c)], by[("no-batching", c)]
            ratio = on.sps / off.sps if off.sps > 0 else None
            ratios.append({"clients": c, "batching_sps": on.sps, "no_batching_sps": off.sps, "ratio": ratio})
            print(f"| {c} | {on.sps:,.1f} | {off.sps:,.1f} | {fmt(ratio, '.2f')}x |")
    result = checks(levels, args.clients, args.request_timeout, args.modes)
    print()
    line = [f"errors {result['errors']['total']} ({'PASS' if result['errors']['pass'] else 'FAIL'}: target 0)"]
    if "batching_speedup" in result:
        b = result["batching_speedup"]
        line.append(f"{b['clients']} clients batching/no-batching {fmt(b['ratio'], '.2f')}x "
                    f"({'PASS' if b['pass'] else 'FAIL'}: target >= {TARGET_RATIO:g}x)")
    if "abuse_p99" in result:
        a = result["abuse_p99"]
        line.append("p99 with the abuser / without: " + ", ".join(f"{k} {fmt(v, '.2f')}x" for k, v in a["ratios"].items())
                    + f" ({'PASS' if a['pass'] else 'FAIL'}: target <= {TARGET_ABUSE_P99:g}x)")
    worst = max((v for v in result["p99_ms"]["values"].values() if v is not None), default=None)
    line.append(f"worst p99 {fmt(worst)} ms ({'PASS' if result['p99_ms']['pass'] else 'FAIL'}: "
                f"every p99 < the {args.request_timeout:g} s request timeout)")
    print("check: " + "; ".join(line) + (" -> all targets met" if result["pass"] else " -> TARGET MISSED"))

    if args.json is not None:
        out = {"machine": info,
               "settings": {"model": str(args.model), "duration_s": args.duration, "clients": args.clients,
                            "modes": args.modes, "sentences_per_request": args.sentences_per_request,
                            "beam": args.beam, "attention": not args.no_attention, "client": args.client,
                            "request_timeout_s": args.request_timeout, "max_queue": max_queue,
                            "batch_wait_ms": args.batch_wait_ms, "batch_sentences": args.batch_sentences,
                            "threads": args.threads, "slice_work": args.slice_work, "abuse": args.abuse,
                            "server_args": args.server_arg,
                            "sentences": {"n": len(pairs), "seed": SENTENCE_SEED}, "quick": args.quick},
               "health": health,
               "levels": [{**asdict(lv), "errors_total": lv.n_errors} for lv in levels],
               "vm_hwm_mib": hwm, "ratios": ratios, "checks": result}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
