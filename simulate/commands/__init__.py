"""Sub-commands of ``python -m simulate`` (one module each; see simulate/__main__.py)."""
