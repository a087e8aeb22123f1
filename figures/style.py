"""One look for every figure: a colour-blind-safe colour and a marker per estimator, fonts, sizes.

Colours are the Okabe–Ito palette (distinguishable under the common colour-vision deficiencies),
extended with two of Paul Tol's "muted" colours for the token-level baselines; every estimator also
has its own marker so figures stay readable in greyscale. The same estimator has the same colour in
every figure of the project (the LLM figure included: import :func:`color`).
"""
from __future__ import annotations

import contextlib

import matplotlib as mpl

#: estimator name → hex colour (Okabe–Ito + Tol muted).
PALETTE: dict[str, str] = {
    "gmc": "#D55E00",  # vermillion: the estimator the project argues for stands out
    "tic": "#0072B2",  # blue
    "tis": "#56B4E9",  # sky blue
    "is": "#000000",  # black
    "snis": "#CC79A7",  # reddish purple
    "onpolicy": "#999999",  # grey
    "grpo": "#009E73",  # bluish green
    "gspo": "#E69F00",  # orange
    "cispo": "#882255",  # Tol wine
    "m2po": "#44AA99",  # Tol teal
    # the peers' corrections and losses (verl, TRL; docs/estimators.md): Tol's remaining muted colours
    "verl_seq_tis": "#332288",  # indigo
    "verl_seq_rs": "#117733",  # green
    "verl_tok_tis": "#999933",  # olive
    "verl_geo_rs": "#DDCC77",  # sand
    "trl_seq_mask": "#CC6677",  # rose
    "sapo": "#AA4499",  # purple
    "gpg": "#661100",  # brown
    "luspo": "#6699CC",  # steel blue
    "vespo": "#88CCEE",  # cyan
    "clip_cov": "#117755",  # dark teal
    "kl_cov": "#777711",  # dark olive
}
MARKERS: dict[str, str] = {
    "gmc": "o", "tic": "s", "tis": "^", "is": "x", "snis": "D", "onpolicy": "v",
    "grpo": "P", "gspo": "*", "cispo": "h", "m2po": "<",
    "verl_seq_tis": ">", "verl_seq_rs": "p", "verl_tok_tis": "d", "verl_geo_rs": "H", "trl_seq_mask": "X",
    "sapo": "8", "gpg": "1", "luspo": "2", "vespo": "3", "clip_cov": "4", "kl_cov": "+",
}
#: Order in legends: trajectory-level (THEORY §2), then token-level baselines, then the peers' maps.
ORDER: tuple[str, ...] = ("onpolicy", "is", "tis", "tic", "gmc", "snis", "grpo", "gspo", "cispo", "m2po",
                          "verl_seq_tis", "verl_seq_rs", "verl_tok_tis", "verl_geo_rs", "trl_seq_mask", "sapo", "gpg",
                          "luspo", "vespo", "clip_cov", "kl_cov")
#: Neutral colours for references (bounds drawn in the estimator colour, dashed).
REFERENCE = "#444444"
#: Figure widths in inches: one journal column, two columns.
WIDTH_1COL, WIDTH_2COL = 3.4, 7.0

RC: dict = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 7.5,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "font.family": "DejaVu Sans",  # ships with matplotlib, so every machine renders the same glyphs (ρ, ε, 𝔅)
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "lines.linewidth": 1.4,
    "lines.markersize": 4.5,
    "legend.frameon": False,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,  # TrueType in PDFs: editable text, accepted by publishers
    "image.cmap": "viridis",  # perceptually uniform and colour-blind safe
}


def color(name: str) -> str:
    """The estimator's colour; unknown names get the reference grey rather than an error."""
    return PALETTE.get(name, REFERENCE)


def marker(name: str) -> str:
    """The estimator's marker (``"."`` for unknown names)."""
    return MARKERS.get(name, ".")


def ordered(names) -> list[str]:
    """``names`` in legend order (known estimators first, in :data:`ORDER`)."""
    names = list(dict.fromkeys(names))
    rank = {n: i for i, n in enumerate(ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(ORDER)), n))


def apply() -> None:
    """Set the project's rcParams globally (the figure scripts call this once)."""
    mpl.rcParams.update(RC)


@contextlib.contextmanager
def context():
    """The project's rcParams inside a ``with`` block only (for notebooks and tests)."""
    with mpl.rc_context(RC):
        yield
