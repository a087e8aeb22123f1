"""One module per estimator (or small family): its NumPy, Numba and PyTorch forms side by side.

Each module ends with ``MAPS = (Estimator(...), ...)``; :mod:`asyncgrpo.estimators.registry` lists the
modules (one line each) and builds every backend's dispatch from them. The recipe for a new estimator is
in docs/estimators.md ("Add an estimator in one file").

==========================  ==============================================  ============
module                      estimators                                      level
==========================  ==============================================  ============
``onpolicy``                ``onpolicy``                                    trajectory
``importance``              ``is``, ``snis``                                trajectory
``truncation``              ``tis``, ``tic``                                trajectory
``gmc``                     ``gmc``                                         trajectory
``ppo_clip``                ``grpo``, ``gspo``                              token
``cispo``                   ``cispo``                                       token
``m2po``                    ``m2po``                                        token
``verl_rollout_corr``       ``verl_seq_tis``, ``verl_seq_rs`` (trajectory),  both
                            ``verl_tok_tis``, ``verl_geo_rs`` (token)
``trl_opsm``                ``trl_seq_mask``                                token
``sapo``                    ``sapo`` (verl, TRL)                            token
``gpg``                     ``gpg`` (verl)                                  token
``luspo``                   ``luspo`` (TRL)                                 token
==========================  ==============================================  ============
"""
