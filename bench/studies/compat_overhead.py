"""What LibreTranslate's and DeepL's APIs cost on top of heed's own, per request: the app of `heed
serve MODEL --names fr-en` in this process (no sockets: httpx's ASGI transport), --clients
concurrent clients sending --requests one-sentence requests (serve_load.py's 200 dates) to POST
/v1/translate ("attention": false, as the compatibility APIs ask it), /translate and /v2/translate
in turn, --rounds rounds in an order that turns each round; the CPU time of the process per
request (the server's work and the in-process client's, which is the same for the three), its
median per API and each over /v1's. A busy machine moves the wall clock much more than this.

    python bench/studies/compat_overhead.py MODEL [--requests 640] [--clients 64] [--rounds 9] [--no-batching]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx
from serve_load import date_sentences, machine_info

from heed.api import Translator
from heed.serve.app import ServeSettings, create_app

BODIES = {"/v1/translate": lambda s: {"sentences": [s], "attention": False},
          "/translate": lambda s: {"q": [s], "source": "fr", "target": "en"},
          "/v2/translate": lambda s: {"text": [s], "source_lang": "FR", "target_lang": "EN-US"}}


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    app = create_app({"fr-en": Translator.load(args.model, device="cpu")}, ServeSettings(batching=not args.no_batching))
    sources = [s for s, _ in date_sentences()]

    async def load(client: httpx.AsyncClient, path: str) -> None:
        async def one_client(i: int) -> None:
            for k in range(i, args.requests, args.clients):
                reply = await client.post(path, json=BODIES[path](sources[k % len(sources)]))
                assert reply.status_code == 200, reply.text
        await asyncio.gather(*(one_client(i) for i in range(args.clients)))

    paths = list(BODIES)
    cpu: dict[str, list[float]] = {p: [] for p in paths}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://heed") as client:
        for path in paths:  # warm-up, not counted
            await load(client, path)
        for r in range(args.rounds):
            for path in paths[r % 3:] + paths[:r % 3]:
                start = time.process_time()
                await load(client, path)
                cpu[path].append(1000 * (time.process_time() - start) / args.requests)
    return cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--requests", type=int, default=640)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--no-batching", action="store_true", help="each request decoded alone (heed serve --no-batching)")
    args = p.parse_args()
    info = machine_info()
    print(f"CPU: {info['cpu']}, {info['logical_cpus']} logical CPU(s); torch {info['torch']}, heed {info['heed']}")
    cpu = asyncio.run(measure(args))
    base = statistics.median(cpu["/v1/translate"])
    print("| path | CPU ms a request, per round | median | / v1 |")
    print("|---|---|---:|---:|")
    for path, values in cpu.items():
        median = statistics.median(values)
        print(f"| {path} | {', '.join(f'{v:.2f}' for v in values)} | {median:.2f} | {median / base:.3f} |")


if __name__ == "__main__":
    main()
