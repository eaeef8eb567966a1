"""How a dates model reads two-digit years: every US date M/D/YY with a day over 12 (so only one
reading), for every year 00..99, against strptime's %y (POSIX's pivot: 69..99 -> 19xx, 00..68 ->
20xx, the convention heed's dates task follows).

    .venv/bin/python bench/studies/two_digit_years.py runs/demo
"""
from __future__ import annotations

import argparse
import collections
import datetime

import heed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a model directory or training output directory")
    parser.add_argument("--days", type=int, nargs="+", default=[13, 17, 21, 27])
    args = parser.parse_args()
    translator = heed.load(args.model)
    sources = [f"{m}/{d}/{yy:02d}" for yy in range(100) for m in range(1, 13) for d in args.days]
    references = [datetime.datetime.strptime(s, "%m/%d/%y").date().isoformat() for s in sources]
    outputs = [t.text for t in translator.translate(sources, beam=1)]
    wrong = collections.Counter(s.rsplit("/", 1)[1] for s, r, o in zip(sources, references, outputs) if o != r)
    total = sum(wrong.values())
    print(f"{len(sources)} US dates M/D/YY: {total} with a wrong output ({100 * total / len(sources):.1f}%)")
    print("wrong by year:", ", ".join(f"{yy}: {n}" for yy, n in sorted(wrong.items())) or "none")


if __name__ == "__main__":
    main()
