"""Bounds on sizes a user gives, in one place for the CLI, the server and the library. Imports
nothing, so the CLI can name them in `--help` without loading torch."""
from __future__ import annotations

# Integrated gradients' integration points at most: Sundararajan et al. 2017 (section 3) find 20 to
# 300 enough to come within 5% of completeness; each point is a forward and backward pass per output
# token, and a run's memory grows with them (`--steps 100000` asked for 74.5 GiB).
MAX_ATTRIBUTION_STEPS = 200

# Tokens the logit lens lists per layer and position at most: each is a row of every answer
# (layers x positions x top), and past a few dozen a list says nothing a probability would not.
MAX_LENS_TOP = 50

# Encoder or decoder layers at most: DeepNet (Wang et al. 2022), the deepest published translator,
# has 1,000. Checked before anything is built, as a million-layer stack takes minutes to count.
MAX_LAYERS = 1000
MAX_THREADS = 1024  # CPU threads at most: far above any machine heed runs on (train.threads, --threads)
