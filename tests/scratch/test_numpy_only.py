"""heed.scratch imports only NumPy: importing every module (the bridge included, which imports
torch inside its functions) leaves torch unloaded."""
from __future__ import annotations

import subprocess
import sys


def test_importing_heed_scratch_does_not_import_torch():
    code = ("import sys; import heed.scratch, heed.scratch.model, heed.scratch.train, heed.scratch.bridge, "
            "heed.scratch.gradcheck, heed.scratch.optim; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'heed') and "
            "not (m in ('heed', 'heed.version') or m.startswith('heed.scratch'))); print(bad); "
            "sys.exit(1 if bad else 0)")  # heed.version: the root's __version__, a constant (no imports)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
