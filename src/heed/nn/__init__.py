"""The models: the contract search, training and export read them by (protocol.py), the registry of
families (build.py: FAMILIES) and their configs (model_config.py: the `model:` union on
family_config.FamilyConfig), the parts both families share (masks, loss, layout, intervention), the
ensemble, and one folder per family (rnn/, transformer/)."""
