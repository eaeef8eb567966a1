"""What LibreTranslate's and DeepL's APIs cost on top of heed's own, per request: the app of `heed
serve MODEL --names fr-en` in this process (no sockets: httpx's ASGI transport), --clients
concurrent clients sending --requests one-sentence requests (serve_load.py's 200 dates) to POST
/v1/translate ("attention": false, as the compatibility APIs ask it), /translate and /v2/translate
in turn, --rounds rounds in an order that turns each round. Per API, medians over the rounds of:
the CPU time of the process per request (the server's work and the in-process client's, which is
the same for the three) and each over /v1's; of it, the event loop's (this thread: the routes, the
client, everything before and after the batcher) and the search's (the batcher's worker thread,
inside Translator.translate_nbest); and the sentences a batch the batcher formed. Then, one request
at a time (--one-at-a-time of each API, no other request in flight), the event loop's CPU per
request from the app's start to the batcher's submit, and from there to the answer's end: what
delays a request's arrival at the batcher, and what follows it. A busy machine moves the wall clock
much more than this.

    python bench/studies/compat_overhead.py MODEL [--requests 640] [--clients 64] [--rounds 9]
        [--one-at-a-time 200] [--no-batching] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from serve_load import date_sentences, machine_info

from heed.api import Translator
from heed.serve.app import ServeSettings, create_app

BODIES = {"/v1/translate": lambda s: {"sentences": [s], "attention": False},
          "/translate": lambda s: {"q": [s], "source": "fr", "target": "en"},
          "/v2/translate": lambda s: {"text": [s], "source_lang": "FR", "target_lang": "EN-US"}}
COLUMNS = ("cpu", "loop", "search", "batch")  # per request: CPU ms, event loop ms, search ms; sentences a batch


class Searches:
    """Translator.translate_nbest counted: calls (batches), sentences, and its thread's CPU seconds."""

    def __init__(self, search: Callable[..., Any]) -> None:
        self.search, self.calls, self.sentences, self.cpu = search, 0, 0, 0.0

    def __call__(self, texts: list[str], **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return self.search(texts, **kwargs)
        finally:
            self.calls, self.sentences = self.calls + 1, self.sentences + len(texts)
            self.cpu += time.thread_time() - start


async def measure(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    translator = Translator.load(args.model, device="cpu")
    searches = Searches(translator.translate_nbest)
    translator.translate_nbest = searches  # type: ignore[method-assign]
    app = create_app({"fr-en": translator}, ServeSettings(batching=not args.no_batching))
    marks: dict[str, float] = {}  # the event loop's CPU clock at the app's start, the submit, the end
    submit = app.state.batcher.submit

    def marked_submit(*a: Any, **k: Any) -> Any:
        marks["submit"] = time.thread_time()
        return submit(*a, **k)

    app.state.batcher.submit = marked_submit

    async def timed(scope: Any, receive: Any, send: Any) -> None:
        marks["start"] = time.thread_time()
        await app(scope, receive, send)
        marks["end"] = time.thread_time()

    sources = [s for s, _ in date_sentences()]

    async def load(client: httpx.AsyncClient, path: str) -> None:
        async def one_client(i: int) -> None:
            for k in range(i, args.requests, args.clients):
                reply = await client.post(path, json=BODIES[path](sources[k % len(sources)]))
                assert reply.status_code == 200, reply.text
        await asyncio.gather(*(one_client(i) for i in range(args.clients)))

    paths = list(BODIES)
    found: dict[str, dict[str, list[float]]] = {p: {c: [] for c in (*COLUMNS, "before", "after")} for p in paths}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=timed), base_url="http://heed") as client:
        for path in paths:  # warm-up, not counted
            await load(client, path)
        for r in range(args.rounds):
            for path in paths[r % 3:] + paths[:r % 3]:
                searches.calls = searches.sentences = 0
                searches.cpu = 0.0
                cpu, loop = time.process_time(), time.thread_time()
                await load(client, path)
                row = found[path]
                row["cpu"].append(1000 * (time.process_time() - cpu) / args.requests)
                row["loop"].append(1000 * (time.thread_time() - loop) / args.requests)
                row["search"].append(1000 * searches.cpu / args.requests)
                row["batch"].append(searches.sentences / max(1, searches.calls))
        for k in range(args.one_at_a_time):
            for path in paths:
                reply = await client.post(path, json=BODIES[path](sources[k % len(sources)]))
                assert reply.status_code == 200, reply.text
                found[path]["before"].append(1e6 * (marks["submit"] - marks["start"]))
                found[path]["after"].append(1e6 * (marks["end"] - marks["submit"]))
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--requests", type=int, default=640)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--one-at-a-time", type=int, default=200, help="requests of each API sent alone, after the rounds")
    p.add_argument("--no-batching", action="store_true", help="each request decoded alone (heed serve --no-batching)")
    p.add_argument("--json", type=Path, help="write every round's figures here")
    args = p.parse_args()
    info = machine_info()
    print(f"CPU: {info['cpu']}, {info['logical_cpus']} logical CPU(s); torch {info['torch']}, heed {info['heed']}")
    found = asyncio.run(measure(args))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1), encoding="utf-8")
    base = statistics.median(found["/v1/translate"]["cpu"])
    print("| path | CPU ms a request, per round | median | / v1 | event loop ms | search ms | sentences a batch |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for path, row in found.items():
        cpu, loop, search, batch = (statistics.median(row[c]) for c in COLUMNS)
        print(f"| {path} | {', '.join(f'{v:.2f}' for v in row['cpu'])} | {cpu:.2f} | {cpu / base:.3f} | {loop:.2f} | "
              f"{search:.2f} | {batch:.1f} |")
    if args.one_at_a_time:
        print("\n| path, one request at a time | event loop µs to the batcher (median) | after it |")
        print("|---|---:|---:|")
        for path, row in found.items():
            print(f"| {path} | {statistics.median(row['before']):.0f} | {statistics.median(row['after']):.0f} |")


if __name__ == "__main__":
    main()
