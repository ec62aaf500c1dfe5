"""The ``eapo`` subcommands, one module per family, each with ``register(app)`` (see :mod:`eapo.cli`).

A command parses its flags, builds the typed settings and calls one recipe or library function; it
holds no logic of its own beyond turning errors into exit codes and messages.
"""
