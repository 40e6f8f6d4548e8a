#!/usr/bin/env python3
"""Independent reference values for the privacy accountant (algorithms/diloco/privacy.h).

For T rounds of the Gaussian mechanism with noise multiplier z and every site in every round
(q = 1), prints per (z, T, delta):
  rdp      eps of Balle et al. 2020's RDP conversion (Opacus get_privacy_spent) over Opacus's
           default orders, in 50-digit arithmetic (mpmath), written from the formulas, not from
           the C++ code;
  classic  eps of the classic conversion min_a T*a/(2z^2) + log(1/delta)/(a-1);
  exact    the exact eps of the composed mechanism: T Gaussian mechanisms of sensitivity 1 and
           std z compose to one of std z/sqrt(T), whose tight (eps, delta) curve is Balle & Wang
           2018's  delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu),  mu = sqrt(T)/z.
Every RDP bound must be >= exact. tests/coordinator/privacy_test.cc holds these numbers.

  python3 bench/privacy/reference.py
"""
import mpmath as mp

mp.mp.dps = 50
ORDERS = [1 + mp.mpf(x) / 10 for x in range(1, 100)] + [mp.mpf(a) for a in range(12, 64)]


def eps_rdp(z, t, delta):
    z, t, delta = mp.mpf(z), mp.mpf(t), mp.mpf(delta)
    best = mp.inf
    for a in ORDERS:
        rdp = t * a / (2 * z * z)  # Mironov 2017, Prop. 7, composed over t rounds
        e = rdp + mp.log1p(-1 / a) - (mp.log(delta) + mp.log(a)) / (a - 1)
        best = min(best, e)
    return best


def eps_classic(z, t, delta):
    z, t, delta = mp.mpf(z), mp.mpf(t), mp.mpf(delta)
    return min(t * a / (2 * z * z) - mp.log(delta) / (a - 1) for a in ORDERS)


def eps_exact(z, t, delta):
    mu = mp.sqrt(mp.mpf(t)) / mp.mpf(z)
    phi = lambda x: mp.ncdf(x)
    d = lambda e: phi(mu / 2 - e / mu) - mp.exp(e) * phi(-mu / 2 - e / mu)
    lo, hi = mp.mpf(0), mp.mpf(1)
    while d(hi) > delta:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if d(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


if __name__ == "__main__":
    cases = [(1.0, 1, 1e-5), (1.0, 10, 1e-5), (0.5, 10, 1e-5), (2.0, 100, 1e-6),
             (5.0, 1000, 1e-5), (0.8, 3, 1e-3), (10.0, 50, 1e-5)]
    print(f"{'z':>5} {'T':>5} {'delta':>7} {'rdp':>22} {'classic':>22} {'exact':>22}")
    for z, t, delta in cases:
        r, c, x = eps_rdp(z, t, delta), eps_classic(z, t, delta), eps_exact(z, t, delta)
        assert x <= r <= c, (z, t, delta)
        print(f"{z:>5} {t:>5} {delta:>7} {mp.nstr(r, 17):>22} {mp.nstr(c, 17):>22} "
              f"{mp.nstr(x, 17):>22}")
