"""The Click command-line interface: one module per command, shared options in ``options``."""
