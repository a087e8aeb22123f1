"""The sympy symbols of docs/THEORY.md, declared once with the sign assumptions the proofs rely on.

Positivity is part of the mathematics, not a convenience: every sign argument in theory/ is
decided by sympy's assumption system from exactly these declarations (ε > 0, G ≥ 1, moments ≥ 0).
"""
import sympy as sp

eps = sp.Symbol("epsilon", positive=True)  # ε, the cap / clip width
G = sp.Symbol("G", positive=True, integer=True)  # group size
sigma2 = sp.Symbol("sigma2", positive=True)  # σ² = Var_μ(ρ) = χ²(π_θ‖μ)
mu4 = sp.Symbol("mu4", positive=True)  # μ₄ = E_μ(ρ−1)⁴
mu3 = sp.Symbol("mu3", real=True)  # μ₃ = E_μ(ρ−1)³ (drops out of every result)
m_tic = sp.Symbol("m_tic", positive=True)  # E_μ[ρ(ρ−1)⁴] (fourth) or E_μ[ρ(ρ−1)²] (second)
x = sp.Symbol("x", real=True)  # generic real argument of a lemma
X = sp.Symbol("X", real=True)  # X = ρ̄ − 1 (gmc) or ρ − 1 (tis, tic)
rho = sp.Symbol("rho", positive=True)  # a trajectory ratio ρ
rhobar = sp.Symbol("rhobar", positive=True)  # group mass ρ̄
t = sp.Symbol("t", positive=True)  # slack: a branch "x > a" is the substitution x = a + t
s = sp.Symbol("s", nonnegative=True)  # slack for a closed branch "x ≥ a"

# C5 / C6: step size, horizon, delay, smoothness, constants
eta = sp.Symbol("eta", positive=True)
K = sp.Symbol("K", positive=True)
d = sp.Symbol("d", positive=True)
L = sp.Symbol("L", positive=True)
dJ = sp.Symbol("DeltaJ", positive=True)  # ΔJ = J* − J(θ_0)
S = sp.Symbol("S", positive=True)  # E_π[A²‖s‖²], so M₂(ε) = (1+ε)·S
C = sp.Symbol("C", positive=True)  # constant of the C4 delay term
c_B = sp.Symbol("c_B", positive=True)
c_G = sp.Symbol("c_G", nonnegative=True)
kappa = sp.Symbol("kappa", positive=True)
M = sp.Symbol("M", positive=True)
