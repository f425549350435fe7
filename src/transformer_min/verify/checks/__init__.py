"""The check modules, one per stage group. Importing this package loads none of them: the registry
(`transformer_min.verify.registry.CHECK_MODULES`) names them in running order and imports them on first use."""
