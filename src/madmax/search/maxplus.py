"""Max-plus (tropical) matrices, vectorized over candidates: the step maps of `search.pipeline`.

A clock state is x = (c, d_1 .. d_j, 0): the compute stream's and the data-parallel streams' free
times (one per state group: the dense parameters, and the routed experts of an MoE model) and a
constant; within a step the expert exchange streams add clocks of their own. A unit of work is
x' = U (x) x with (A (x) B)_ij = max_k (A_ik + B_kj); a step is the product of its units' maps.
-inf marks "no dependency". Without experts the state is (c, d, 0): 3 x 3 matrices.
"""

from __future__ import annotations

import numpy as np

NONE = -np.inf


def identity(n: int, dim: int = 3) -> np.ndarray:
    eye = np.full((n, dim, dim), NONE)
    eye[:, np.arange(dim), np.arange(dim)] = 0.0
    return eye


def matrix(n: int, cc=NONE, cd=NONE, c1=NONE, dc=NONE, dd=0.0, d1=NONE) -> np.ndarray:
    """The map c' = max(c + cc, d + cd, c1), d' = max(c + dc, d + dd, d1), 0' = 0 (entries [n] or scalars)."""
    u = np.full((n, 3, 3), NONE)
    u[:, 0, 0], u[:, 0, 1], u[:, 0, 2] = cc, cd, c1
    u[:, 1, 0], u[:, 1, 1], u[:, 1, 2] = dc, dd, d1
    u[:, 2, 2] = 0.0
    return u


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a (x) b)_ij = max_k a_ik + b_kj over [n, D, D] stacks: apply b, then a."""
    return (a[:, :, :, None] + b[:, None, :, :]).max(axis=2)


def power(u: np.ndarray, count: int) -> np.ndarray:
    """u applied `count` times (repeated squaring)."""
    result = None
    base = u
    while count:
        if count & 1:
            result = base if result is None else mul(base, result)
        count >>= 1
        if count:
            base = mul(base, base)
    return identity(u.shape[0], u.shape[1]) if result is None else result
