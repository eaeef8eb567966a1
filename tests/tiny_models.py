"""The tiny models the tests train (conftest's fixtures and the tests that vary them)."""

TRANSFORMER = {"family": "transformer", "layers": 2, "d_model": 16, "heads": 2, "ff_size": 32, "dropout": 0.1,
               "attention_dropout": 0.1}
