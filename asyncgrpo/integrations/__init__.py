"""Run the toolkit's trajectory-level estimators inside the trainers people use.

- :mod:`asyncgrpo.integrations.trl` — :class:`~asyncgrpo.integrations.trl.AsyncGRPOTrainer`, a TRL
  ``GRPOTrainer`` whose loss is :func:`asyncgrpo.estimators.token_level.policy_loss` with weights
  ``w_i`` of any registry estimator (``gmc``, ``tic``, ``tis``, ``snis``, ``is``, ``onpolicy``).
  Needs the ``trl`` extra.
- :mod:`asyncgrpo.integrations.verl` — trainer-side weights grouped by verl's ``uid`` (shaped for
  ``rollout_is_weights``) and policy losses registered with verl's ``register_policy_loss``. The
  weight computation is pure torch; only registration needs verl (GPU machines, ``verl`` extra).

Neither submodule is imported here, so ``import asyncgrpo.integrations`` never needs TRL or verl.
See ``docs/integrations.md``.
"""

__all__: list[str] = []
