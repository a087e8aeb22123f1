"""Plugin-module source shared by the tests that write estimator plugins to a temporary folder
(tests/test_faults_round4.py, tests/test_mutation_registry.py): the imports and one sound trajectory map
(the ``tis`` cap ``min(ℓ, log(1 + ε))``) in its three backends; each test file appends what it breaks or adds."""

SOUND_TRAJECTORY = '''
import math
import sys
import numpy as np
from numba import njit
from asyncgrpo.estimators.registry import Estimator


def lw(ell, eps):
    return np.minimum(ell, math.log1p(eps))


@njit(cache=True)
def lw_nb(ell, eps, out):
    for i in range(ell.shape[0]):
        out[i] = min(ell[i], math.log1p(eps))


def lw_torch(ell, eps, mask):
    import torch
    return torch.clamp(ell, max=math.log1p(eps))
'''
