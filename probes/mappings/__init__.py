"""Built-in flavour mappings (TOML), shipped as package data; see ``probes.mapping``."""
