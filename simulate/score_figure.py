"""The scorecard's figure (``simulate score``): performance profiles of the scored map beside gmc and the rival set,
per family and delay. Drawing only: which runs enter and what they are compared by is :mod:`simulate.score`'s and
:mod:`simulate.protocol.aggregate`'s."""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["performance_profiles"]


def performance_profiles(table, proto, name: str, rivals, path: Path) -> None:
    """Per family × delay d > 0: the fraction of ``name``'s and each rival's held-out runs with nAUC > τ (rliable's
    performance profile, :func:`simulate.protocol.aggregate.performance_profile`), ``name`` in black; saved to
    ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simulate.protocol import aggregate as ag
    from simulate.protocol.families import by_family

    eps, G = float(proto.primary["eps"]), int(proto.primary["G"])
    fams = by_family(proto.instances)
    ds = [d for d in proto.delays if d > 0] or list(proto.delays)
    fig, axes = plt.subplots(len(fams), len(ds), figsize=(3.3 * len(ds), 2.6 * len(fams)), squeeze=False)
    taus = np.linspace(-0.25, 1.25, 121)
    for i, (fam, insts) in enumerate(fams.items()):
        for j, d in enumerate(ds):
            ax = axes[i, j]
            for e in (*rivals, name):
                X = ag.score_matrix(table, e, d, insts, proto.eval_seeds, eta_kind=proto.primary_arm, eps=eps, G=G)
                ax.plot(taus, ag.performance_profile(X, taus), lw=2.2 if e == name else 0.9,
                        color="black" if e == name else None, label=e)
            ax.set_title(f"{fam} family, d = {d}", fontsize=8)
            ax.set_xlabel("τ (nAUC)")
    axes[0, 0].set_ylabel("fraction of runs > τ")
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=6, fontsize=6.5)
    fig.subplots_adjust(bottom=0.25, hspace=0.4)
    fig.savefig(path, dpi=120)
    plt.close(fig)
