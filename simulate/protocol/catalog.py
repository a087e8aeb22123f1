"""Every instance a protocol may name: the registered ones (:data:`simulate.protocol.instances.INSTANCES`) and the
family draws ``<family>-<seed>`` of protocol v6 (:mod:`simulate.protocol.families`), each built once per process.
The one place that knows both, so that neither module imports the other."""
from __future__ import annotations

from simulate.protocol import families
from simulate.protocol.instances import INSTANCES, TrainingInstance
from simulate.protocol.instances import get_instance as _registered

__all__ = ["get_instance", "is_registered"]

_DRAWN: dict[str, TrainingInstance] = {}


def is_registered(name) -> bool:
    """Whether ``name`` is a registered instance or a family draw ``<family>-<seed>``."""
    return isinstance(name, str) and (name in INSTANCES or families.is_family_name(name))


def get_instance(name: str | TrainingInstance) -> TrainingInstance:
    """The registered instance or family draw ``name`` (built once per process), or ``name`` itself if it is an
    instance; anything else raises ``ValueError`` naming the valid forms."""
    if isinstance(name, TrainingInstance) or (isinstance(name, str) and name in INSTANCES):
        return _registered(name)
    if not is_registered(name):
        raise ValueError(f"instance must be one of {', '.join(INSTANCES)}, a family draw <family>-<seed> "
                         f"(simulate.protocol.families), or a TrainingInstance, got {name!r}")
    if name not in _DRAWN:
        _DRAWN[name] = families.draw(*families.parse_name(name))
    return _DRAWN[name]
