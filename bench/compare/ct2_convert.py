"""Convert the OpenNMT-py column's checkpoint with CTranslate2's own converter (run in the OpenNMT-py
venv, where both are installed).

    python bench/compare/ct2_convert.py ONMT_CHECKPOINT.pt OUTPUT_DIR

OpenNMT-py 3.5 trains with `self_attn_type: scaled-dot-flash` by default (torch's fused attention
kernel), which the converter refuses although the arithmetic is scaled dot-product attention either
way: the checkpoint's options are copied with `scaled-dot` before converting, its weights untouched.
The checkpoint pickles argparse.Namespace, so it is loaded with weights_only=False: it is this run's own.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from ctranslate2.converters import OpenNMTPyConverter


def main() -> None:
    checkpoint_path, output = Path(sys.argv[1]), Path(sys.argv[2])
    checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
    checkpoint["opt"].self_attn_type = "scaled-dot"
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / checkpoint_path.name
        torch.save(checkpoint, copy)
        OpenNMTPyConverter(str(copy), unsafe_deserialization=True).convert(str(output), force=True)
    print(f"converted {checkpoint_path} -> {output}")


if __name__ == "__main__":
    main()
