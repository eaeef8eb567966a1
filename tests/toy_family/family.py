"""The toy family as heed meets it: what tests/nn/test_family_contract.py's one register_family
line names (with toy_family.config:ToyConfig)."""
from __future__ import annotations

from heed.nn.build import Family
from toy_family.config import describe, sizes
from toy_family.model import build_toy

FAMILY = Family(build=build_toy, describe=describe, sizes=sizes)
