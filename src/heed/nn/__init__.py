"""The models: the contract search, training and export read them by (protocol.py), the registry of
families (families.py: one torch-free line each, naming its config class and its build.Family), their
configs (model_config.py: the `model:` union on family_config.FamilyConfig), the builder (build.py),
the parts both families share (masks, loss, layout, intervention), the ensemble, and one folder per
family (rnn/, transformer/)."""
