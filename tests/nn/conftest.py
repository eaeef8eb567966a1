"""Shared fixtures for the nn tests."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Every test builds its modules and data from the same global seed (tests only; the library
    itself never seeds)."""
    torch.manual_seed(0)
