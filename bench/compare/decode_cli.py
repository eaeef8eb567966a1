"""The options every decoding script of the bench takes (heed_decode.py in heed's venv, ct2_decode.py
in OpenNMT-py's): one model, one input, one output, the search and the threads. Plain argparse and
nothing else, so that any venv can import it from this folder."""
from __future__ import annotations

import argparse
from pathlib import Path


def decode_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("model", type=Path)
    p.add_argument("input", type=Path, help="one sentence a line (the bench's files: space-separated tokens)")
    p.add_argument("output", type=Path, help="the best hypothesis of each line, in input order")
    p.add_argument("--beam", type=int, default=1, help="beam size; 1 = greedy")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-len", type=int, default=20, help="output tokens before the forced EOS")
    p.add_argument("--threads", type=int, default=1)
    return p
