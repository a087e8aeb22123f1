"""The headline rule lives in :mod:`simulate.protocol.headline` (a decision on protocol results, so that
``simulate score`` applies it without importing the report layer). This name stays because the registered
protocol-v6.toml, whose bytes are hashed, cites ``figures/report/headline.py``: it re-exports the one definition."""
from simulate.protocol.headline import *  # noqa: F401,F403
from simulate.protocol.headline import Decision, decide, line, lines  # noqa: F401
