"""A third model family, made in the tests to show that a family is one folder plus one registry
line (tests/nn/test_family_contract.py registers it and runs the contract suite on it)."""
