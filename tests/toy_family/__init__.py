"""A third model family, made in the tests to show that a family is one folder plus one registry
line: config.py (its FamilyConfig), model.py (the model and its builder), family.py (its Family).
tests/nn/test_family_contract.py registers it with heed.nn.families.register_family and runs the
contract suite on it, from the model up to heed train and heed serve."""
