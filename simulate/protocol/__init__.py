"""The pre-registered training-claims protocol for C5 and C9 (docs/protocol.md).

- :mod:`~simulate.protocol.instances` — the named training instances (and :func:`from_mdp` for yours);
- ``protocol-v5.toml`` (current; v1–v4 kept) + :mod:`~simulate.protocol.spec` — the committed, hashed protocol;
- :mod:`~simulate.protocol.cells` — one cell: η tuned on the tuning seeds, evaluated on held-out seeds;
- :mod:`~simulate.protocol.c9`, :mod:`~simulate.protocol.c5` — the pre-declared comparisons and verdicts;
- :mod:`~simulate.protocol.run` — :func:`run_protocol`, :func:`run_c9`, :func:`run_c5`.

Verdict words and statistics come from :mod:`simulate.verdicts`.
"""
from simulate.protocol.catalog import get_instance
from simulate.protocol.instances import INSTANCES, TrainingInstance, from_mdp
from simulate.protocol.run import ProtocolResult, run_c5, run_c9, run_protocol
from simulate.protocol.spec import Protocol, load_protocol

__all__ = ["INSTANCES", "TrainingInstance", "from_mdp", "get_instance", "Protocol", "load_protocol",
           "ProtocolResult", "run_protocol", "run_c9", "run_c5"]
