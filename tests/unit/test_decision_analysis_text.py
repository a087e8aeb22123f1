"""The LM analysis's text outputs (simulate/llm/analysis.py: ``table``, ``turning_points`` + ``turning_table``,
``c9_verdict``) on one small synthetic results table, pinned character for character (issue 55): two step-size arms
(one with a single seed: ``(n=1)`` cells), d = 0 one shared run per seed, per-estimator differences at d = 8 and 32,
failed ``is`` runs at d = 32 and one failed d = 0 run. A change of any number, interval, verdict or word shows here.
Regenerate only after checking the change is intended."""
import pandas as pd

from simulate.llm import analysis as an
from simulate.llm.protocol import PROTOCOL_V7  # the golden texts pin v7's six estimators (v8: test_llm_v8.py)


def golden_table():
    rows = []
    ests = ["onpolicy", "is", "tis", "tic", "gmc", "grpo"]
    for k, e in enumerate(ests):
        for d in (0, 8, 32):
            if d == 0 and e != "onpolicy":
                continue  # d = 0 is one shared run per seed
            for s in range(4):
                base = 0.6 - 0.004 * d * (k % 3) + 0.02 * (e == "gmc") * (d > 0)
                auc = base + 0.013 * ((s * (k + 3)) % 4)
                fail = int(e == "is" and d == 32 and s < 3) + int(e == "onpolicy" and d == 0 and s == 0)
                rows.append(dict(estimator=e, d=d, seed=s, auc=auc, final_acc=auc + 0.05, initial_acc=0.3 + 0.01 * s,
                                 lr_factor=1.0, skipped_steps=fail, collapsed=False, locked_in=False,
                                 chi2_learn_med=0.5, gain=auc + 0.05 - 0.3 - 0.01 * s))
    df = pd.DataFrame(rows)
    arm = df[df.seed < 1].assign(lr_factor=3.0)  # a second arm with one seed: n=1 cells
    return pd.concat([df, arm], ignore_index=True)


TABLE = '== step-size arm η×1 ==\nwarm-start held-out accuracy per seed: 0.300, 0.310, 0.320, 0.330\nauc, mean [95% t-interval] over 4 seeds:\n                            d=0                   d=8                  d=32\nestimator                                                                  \ngmc                           —  0.607 [0.581, 0.634]  0.512 [0.485, 0.538]\ngrpo                          —  0.536 [0.536, 0.536]  0.344 [0.344, 0.344]\nis                            —  0.568 [0.568, 0.568]  0.472 [0.472, 0.472]\nonpolicy   0.619 [0.593, 0.646]  0.619 [0.593, 0.646]  0.619 [0.593, 0.646]\ntic                           —  0.613 [0.589, 0.637]  0.613 [0.589, 0.637]\ntis                           —  0.555 [0.529, 0.582]  0.363 [0.337, 0.390]\nfinal_acc, mean [95% t-interval] over 4 seeds:\n                            d=0                   d=8                  d=32\nestimator                                                                  \ngmc                           —  0.657 [0.631, 0.684]  0.562 [0.535, 0.588]\ngrpo                          —  0.586 [0.586, 0.586]  0.394 [0.394, 0.394]\nis                            —  0.618 [0.618, 0.618]  0.522 [0.522, 0.522]\nonpolicy   0.669 [0.643, 0.696]  0.669 [0.643, 0.696]  0.669 [0.643, 0.696]\ntic                           —  0.663 [0.639, 0.687]  0.663 [0.639, 0.687]\ntis                           —  0.606 [0.579, 0.632]  0.413 [0.387, 0.440]\nfinal accuracy gain over the warm start (paired), mean [95% t-interval]:\n                               d=0                      d=8                     d=32\nestimator                                                                           \ngmc                              —  +0.343 [+0.312, +0.373]  +0.247 [+0.216, +0.277]\ngrpo                             —  +0.271 [+0.250, +0.292]  +0.079 [+0.058, +0.100]\nis                               —  +0.303 [+0.282, +0.324]  +0.207 [+0.186, +0.228]\nonpolicy   +0.355 [+0.324, +0.385]  +0.355 [+0.324, +0.385]  +0.355 [+0.324, +0.385]\ntic                              —  +0.348 [+0.324, +0.372]  +0.348 [+0.324, +0.372]\ntis                              —  +0.291 [+0.284, +0.297]  +0.098 [+0.092, +0.105]\nd=0 is one shared run per seed (onpolicy): at d=0 every map coincides (protocol docstring)\n== step-size arm η×3 ==\nwarm-start held-out accuracy per seed: 0.300\nauc, mean [95% t-interval] over 1 seeds:\n                   d=0          d=8         d=32\nestimator                                       \ngmc                  —  0.588 (n=1)  0.492 (n=1)\ngrpo                 —  0.536 (n=1)  0.344 (n=1)\nis                   —  0.568 (n=1)  0.472 (n=1)\nonpolicy   0.600 (n=1)  0.600 (n=1)  0.600 (n=1)\ntic                  —  0.600 (n=1)  0.600 (n=1)\ntis                  —  0.536 (n=1)  0.344 (n=1)\nfinal_acc, mean [95% t-interval] over 1 seeds:\n                   d=0          d=8         d=32\nestimator                                       \ngmc                  —  0.638 (n=1)  0.542 (n=1)\ngrpo                 —  0.586 (n=1)  0.394 (n=1)\nis                   —  0.618 (n=1)  0.522 (n=1)\nonpolicy   0.650 (n=1)  0.650 (n=1)  0.650 (n=1)\ntic                  —  0.650 (n=1)  0.650 (n=1)\ntis                  —  0.586 (n=1)  0.394 (n=1)\nfinal accuracy gain over the warm start (paired), mean [95% t-interval]:\n                    d=0           d=8          d=32\nestimator                                          \ngmc                   —  +0.338 (n=1)  +0.242 (n=1)\ngrpo                  —  +0.286 (n=1)  +0.094 (n=1)\nis                    —  +0.318 (n=1)  +0.222 (n=1)\nonpolicy   +0.350 (n=1)  +0.350 (n=1)  +0.350 (n=1)\ntic                   —  +0.350 (n=1)  +0.350 (n=1)\ntis                   —  +0.286 (n=1)  +0.094 (n=1)\nd=0 is one shared run per seed (onpolicy): at d=0 every map coincides (protocol docstring)'
TURNS = "smallest d at which each sub-claim holds / is refuted (per-d test at the protocol's α, no multiplicity correction: a map, not a verdict):\n  η×1 gmc not worse than onpolicy: holds from d=8, refuted from d=32 — d=8: -0.012 [-0.012, -0.012] holds; d=32: -0.108 [-0.108, -0.108] refuted\n  η×1 gmc not worse than is: holds from d=8, refuted from d=None — d=8: +0.040 [+0.020, +0.059] holds; d=32: +0.040 [+0.020, +0.059] holds\n  η×1 gmc not worse than tis: holds from d=8, refuted from d=None — d=8: +0.052 [+0.027, +0.077] holds; d=32: +0.148 [+0.123, +0.173] holds\n  η×1 gmc not worse than tic: holds from d=None, refuted from d=32 — d=8: -0.006 [-0.025, +0.014] inconclusive; d=32: -0.101 [-0.121, -0.082] refuted\n  η×1 gmc not worse than grpo: holds from d=8, refuted from d=None — d=8: +0.071 [+0.052, +0.091] holds; d=32: +0.168 [+0.148, +0.187] holds\n  η×1 onpolicy degrades from d=0: holds from d=None, refuted from d=8 — d=8: +0.000 [+0.000, +0.000] refuted; d=32: +0.000 [+0.000, +0.000] refuted\n  η×1 tis degrades from d=0: holds from d=8, refuted from d=None — d=8: +0.064 [+0.039, +0.089] holds; d=32: +0.256 [+0.231, +0.281] holds\n  η×1 tic degrades from d=0: holds from d=None, refuted from d=None — d=8: +0.007 [-0.013, +0.026] inconclusive; d=32: +0.007 [-0.013, +0.026] inconclusive\n  η×1 is unstable: holds from d=None, refuted from d=None — d=8: +0.000 [+0.000, +0.527] inconclusive; d=32: +0.750 [+0.249, +0.987] inconclusive\n  η×1 gmc stable: holds from d=None, refuted from d=None — d=8: +0.000 [+0.000, +0.527] inconclusive; d=32: +0.000 [+0.000, +0.527] inconclusive"
TURNS_ARM3 = "smallest d at which each sub-claim holds / is refuted (per-d test at the protocol's α, no multiplicity correction: a map, not a verdict):\n  η×3 gmc not worse than onpolicy: holds from d=None, refuted from d=None — \n  η×3 gmc not worse than is: holds from d=None, refuted from d=None — \n  η×3 gmc not worse than tis: holds from d=None, refuted from d=None — \n  η×3 gmc not worse than tic: holds from d=None, refuted from d=None — \n  η×3 gmc not worse than grpo: holds from d=None, refuted from d=None — \n  η×3 onpolicy degrades from d=0: holds from d=None, refuted from d=None — \n  η×3 tis degrades from d=0: holds from d=None, refuted from d=None — \n  η×3 tic degrades from d=0: holds from d=None, refuted from d=None — \n  η×3 is unstable: holds from d=None, refuted from d=None — d=8: +0.000 [+0.000, +0.950] out of scope; d=32: +1.000 [+0.050, +1.000] out of scope\n  η×3 gmc stable: holds from d=None, refuted from d=None — d=8: +0.000 [+0.000, +0.950] out of scope; d=32: +0.000 [+0.000, +0.950] out of scope"
C9 = 'gmc not worse than onpolicy at d=32: Δauc = -0.108, 98.8% t-interval [-0.108, -0.108] vs threshold -0.020 (noninferiority, n=4, power 1.00) → refuted\ngmc not worse than is at d=32: Δauc = +0.040, 98.0% t-interval [+0.001, +0.078] vs threshold -0.020 (noninferiority, n=4, power 0.19) → holds\ngmc not worse than tis at d=32: Δauc = +0.148, 98.3% t-interval [+0.096, +0.200] vs threshold -0.020 (noninferiority, n=4, power 0.11) → holds\ngmc not worse than tic at d=32: Δauc = -0.101, 98.3% t-interval [-0.142, -0.061] vs threshold -0.020 (noninferiority, n=4, power 0.17) → refuted\ngmc not worse than grpo at d=32: Δauc = +0.168, 98.8% t-interval [+0.122, +0.213] vs threshold -0.020 (noninferiority, n=4, power 0.13) → holds\nonpolicy degrades from d=0 to d=32: Δauc = +0.000, 98.6% t-interval [+0.000, +0.000] vs threshold +0.020 (superiority, n=4, power 1.00) → refuted\ntis degrades from d=0 to d=32: Δauc = +0.256, 98.6% t-interval [+0.201, +0.311] vs threshold +0.020 (superiority, n=4, power 0.09) → holds\ntic degrades from d=0 to d=32: Δauc = +0.007, 98.0% t-interval [-0.032, +0.045] vs threshold +0.020 (superiority, n=4, power 0.19) → inconclusive\nis unstable at d=32: 3/4 failed (divergence, collapse or lock-in), 90% Clopper–Pearson [0.249, 0.987] vs rate > 0.25 (power 0.00) → inconclusive\ngmc stable at d=32: 0/4 failed (divergence, collapse or lock-in), 90% Clopper–Pearson [0.000, 0.527] vs rate < 0.25 (power 0.00) → inconclusive\nC9 at LM scale (d=32, 4 seeds, metric auc, protocol 000b4e0e75dc9b00): refuted'


def test_table_text():
    assert an.table(golden_table()) == TABLE


def test_turning_points_text():
    df = golden_table()
    assert an.turning_table(an.turning_points(df, PROTOCOL_V7)) == TURNS
    assert an.turning_table(an.turning_points(df, PROTOCOL_V7, lr_factor=3.0)) == TURNS_ARM3


def test_c9_verdict_text():
    assert an.c9_verdict(golden_table(), PROTOCOL_V7) == C9


def test_single_arm_table_has_no_arm_header():
    df = golden_table()
    one = an.table(df[df.lr_factor == 1.0])
    assert one == TABLE.split("\n== step-size arm")[0].removeprefix("== step-size arm η×1 ==\n")
