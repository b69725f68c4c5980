"""Model definitions, chosen by the `architectures` field of config.json."""
