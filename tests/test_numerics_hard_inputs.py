""" The numerical code on hard inputs: magnitudes from 1e-150 to 1e150, eigenvalues repeated up to rounding (split by a
few parts in 1e9, as float32 inputs split a sin-cos table's pairs) beside ones apart by more than the clustering
tolerance, and non-convex problems whose line search refuses steps (overshoots, non-finite values). Each property is
the code's own definition restated: a canonical basis depends on the eigenspaces alone and is the one of each closest
to the reference (E^T R symmetric positive definite), a factorization reproduces its input, balanced factors carry
equal column norms, and L-BFGS never accepts a step that does not decrease its function enough, whatever the scale of
that function or the other problems of its batch. """
import math

import pytest
import torch

from timm_structinit.inits.canonical import (CLUSTER_RTOL, _reference, balance_, canonical_basis,
                                             canonical_gram_svd, canonical_row_space)
from timm_structinit.inits.lbfgs import minimize

MAGNITUDES = (1e-150, 1e-8, 1.0, 1e8, 1e150)


def _orthogonal(n, generator):
    return torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))[0]


def _solver_basis(q, values, generator):
    """ Another basis a solver could return for the same eigenspaces: every column's sign flipped at random, and a
    random rotation within each run of values equal within the clustering tolerance. """
    q = q * torch.where(torch.rand(q.shape[1], generator=generator) < 0.5, -1.0, 1.0).double()
    start = 0
    tol = CLUSTER_RTOL * float(values.abs().max())
    for i in range(1, len(values) + 1):
        if i == len(values) or abs(float(values[i] - values[i - 1])) > tol:
            if i - start > 1:
                q[:, start:i] = q[:, start:i] @ _orthogonal(i - start, generator)
            start = i
    return q


# eigenvalues repeated up to rounding (a relative split of 3e-9 and 1e-9) beside simple ones and a pair 1e-4 apart
NEAR = torch.tensor([9.0, 4.0 * (1 + 3e-9), 4.0 * (1 + 1e-9), 4.0, 2.0 * (1 + 1e-4), 2.0, 1.0], dtype=torch.float64)


@pytest.mark.parametrize('magnitude', MAGNITUDES)
def test_a_canonical_basis_depends_on_the_eigenspaces_alone_at_any_magnitude(magnitude):
    """ Values repeated up to rounding form one eigenspace, whatever basis and signs the solver gave it, at any
    scale of the values; the basis spans the same spaces (the matrix is unchanged) and is orthonormal. """
    generator = torch.Generator().manual_seed(0)
    q = _orthogonal(7, generator)
    values = NEAR * magnitude
    first = canonical_basis(q, values)[0]
    for _ in range(4):
        again = canonical_basis(_solver_basis(q, values, generator), values)[0]
        torch.testing.assert_close(again, first, rtol=0, atol=1e-12)
    torch.testing.assert_close(first.T @ first, torch.eye(7, dtype=torch.float64), rtol=0, atol=1e-12)
    unit = canonical_basis(q, NEAR)[0]
    torch.testing.assert_close(first, unit, rtol=0, atol=1e-12)  # the scale of the values changes nothing
    # taken as one space, values split by rounding change the matrix by about their split (here 1.2e-8)
    matrix = q @ torch.diag(NEAR) @ q.T
    torch.testing.assert_close(first @ torch.diag(NEAR) @ first.T, matrix, rtol=0, atol=3e-8)


def test_a_canonical_basis_is_the_one_closest_to_the_reference():
    """ Each eigenspace's basis E meets the reference columns R at its positions with E^T R symmetric positive
    definite (the orthogonal Procrustes solution); a simple value's vector has a positive dot product with its
    reference column; values 1e-4 apart are two spaces, each with its own sign, not rotated into each other. """
    generator = torch.Generator().manual_seed(1)
    q = _orthogonal(7, generator)
    basis = canonical_basis(q, NEAR)[0]
    reference = _reference(7, 7)
    cross = basis[:, 1:4].T @ reference[:, 1:4]
    torch.testing.assert_close(cross, cross.T, rtol=0, atol=1e-12)
    assert bool((torch.linalg.eigvalsh(cross) > 0).all())
    for column in (0, 4, 5, 6):
        assert float(basis[:, column] @ reference[:, column]) > 0
        assert torch.allclose(basis[:, column].abs(), q[:, column].abs(), rtol=0, atol=1e-12)


def test_partners_take_the_same_signs_and_rotations():
    """ The left vectors of an SVD follow the right ones, so that U S V^T is unchanged, near-repeats included. """
    generator = torch.Generator().manual_seed(2)
    v, u = _orthogonal(7, generator), _orthogonal(9, generator)[:, :7]
    a = u @ torch.diag(NEAR) @ v.T
    v2, u2 = canonical_basis(v, NEAR, u)
    torch.testing.assert_close(u2 @ torch.diag(NEAR) @ v2.T, a, rtol=0, atol=3e-8)  # the split, as above
    equal = torch.tensor([9.0, 4.0, 4.0, 4.0, 2.0 * (1 + 1e-4), 2.0, 1.0], dtype=torch.float64)
    v3, u3 = canonical_basis(v, equal, u)  # exact repeats: the product exactly
    torch.testing.assert_close(u3 @ torch.diag(equal) @ v3.T, u @ torch.diag(equal) @ v.T, rtol=0, atol=1e-12)


@pytest.mark.parametrize('magnitude', MAGNITUDES)
@pytest.mark.parametrize('shape', [(12, 7), (7, 12)])
def test_factorizations_reproduce_their_input_at_any_magnitude(magnitude, shape):
    """ A with singular values repeated up to rounding, at 1e-150 to 1e150: the Gram SVD gives A V V^T = A and
    singular values in descending order, the row space X V V^T = X for a full-rank X; the right vectors are those
    of A / magnitude (the scale changes no direction). """
    generator = torch.Generator().manual_seed(3)
    m, n = shape
    k = min(m, n)
    u, v = _orthogonal(m, generator)[:, :k], _orthogonal(n, generator)[:, :k]
    a = u @ torch.diag(NEAR[:k] if k == 7 else NEAR[:k]) @ v.T
    scaled = a * magnitude
    if m >= n:
        us, s, right = canonical_gram_svd(scaled[None])
        us, s, right = us[0], s[0], right[0]
        torch.testing.assert_close(us @ right.T, scaled, rtol=0, atol=1e-12 * magnitude)
        assert bool((s[:-1] >= s[1:]).all())
        torch.testing.assert_close(s / magnitude, NEAR.sort(descending=True).values[:k], rtol=1e-9, atol=0)
        torch.testing.assert_close(right, canonical_gram_svd(a[None])[2][0], rtol=0, atol=1e-8)
    xv, s, right = canonical_row_space(scaled, rtol=1e-6)
    torch.testing.assert_close(xv @ right.T, scaled, rtol=0, atol=1e-12 * magnitude)
    torch.testing.assert_close(right, canonical_row_space(a, rtol=1e-6)[2], rtol=0, atol=1e-8)


@pytest.mark.parametrize('magnitude', MAGNITUDES)
def test_balanced_factors_carry_equal_column_norms_and_the_same_product(magnitude):
    """ balance_(A V, V) for orthonormal V: left @ right^T is A V V^T, and each column of the left factor has the
    norm of the same column of the right one (the square root of its singular value); a zero column stays zero. """
    generator = torch.Generator().manual_seed(4)
    v = _orthogonal(6, generator)[:, :4]
    a = torch.randn(5, 6, generator=generator, dtype=torch.float64) * magnitude
    us = a @ v
    us[:, 2] = 0.0
    product = us @ v.T
    left, right = balance_(us.clone(), v.clone())
    torch.testing.assert_close(left @ right.T, product, rtol=1e-12, atol=1e-12 * magnitude)
    torch.testing.assert_close(left.norm(dim=0), right.norm(dim=0), rtol=1e-12, atol=0)
    torch.testing.assert_close(right.norm(dim=0) ** 2, (a @ v).norm(dim=0).where(
        torch.arange(4) != 2, torch.tensor(0.0, dtype=torch.float64)), rtol=1e-12, atol=0)
    assert bool((left[:, 2] == 0).all()) and bool((right[:, 2] == 0).all())


# --- L-BFGS on non-convex problems --------------------------------------------------------------------------------

def _double_well(z, scale=1.0):
    """ sum (z^2 - 1)^2 + 0.3 z per row: two wells per coordinate, the left one deeper; a long step overshoots into
    the quartic's walls. """
    f = ((z * z - 1) ** 2 + 0.3 * z).sum(-1) * scale
    g = (4 * z * (z * z - 1) + 0.3) * scale
    return f, g


def _logged(fn):
    calls = []

    def value_and_grad(z):
        f, g = fn(z)
        calls.append((z.clone(), f.clone()))
        return f, g
    return value_and_grad, calls


def test_lbfgs_refuses_every_step_without_sufficient_decrease():
    """ From starts whose first step (100 times the point's norm) overshoots far up the quartic: every point
    L-BFGS returns after each evaluation budget decreased f from the start, by Armijo's rule at least once any step
    was taken, and the point it returns is one it evaluated, with that value. """
    start = torch.tensor([[2.0, -1.5], [0.3, 0.9], [-2.0, 2.0]], dtype=torch.float64)
    f0 = _double_well(start)[0]
    for evals in (2, 3, 5, 12):
        value_and_grad, calls = _logged(_double_well)
        z, f = minimize(value_and_grad, start.clone(), evals, first_step=100.0)
        torch.testing.assert_close(f, _double_well(z)[0], rtol=0, atol=0)
        assert bool((f <= f0).all()), (evals, f, f0)
        seen = torch.stack([c[0] for c in calls])  # (evals, rows, 2)
        assert all(bool((seen[:, row] == z[row]).all(-1).any()) for row in range(3))
    # a step is taken eventually, and the wells are found: each coordinate at a root of 4z(z^2 - 1) + 0.3 = 0
    z, f = minimize(_double_well, start.clone(), 30, first_step=100.0)
    assert bool((f < f0).all())
    torch.testing.assert_close(_double_well(z)[1], torch.zeros_like(z), rtol=0, atol=1e-6)


def test_a_non_finite_value_is_a_refused_step():
    """ A function that is NaN beyond |z| > 3: the overshooting first step lands there, is refused, and the search
    goes on from the last finite point to the well. """
    def guarded(z):
        f, g = _double_well(z)
        outside = (z.abs() > 3).any(-1)
        return torch.where(outside, torch.nan, f), torch.where(outside[:, None], torch.nan, g)
    start = torch.tensor([[1.5, 0.5]], dtype=torch.float64)
    z, f = minimize(guarded, start, 30, first_step=50.0)
    assert bool(torch.isfinite(f).all()) and float(f) < float(_double_well(start)[0])
    torch.testing.assert_close(_double_well(z)[1], torch.zeros_like(z), rtol=0, atol=1e-5)


@pytest.mark.parametrize('scale', [1e-100, 1e100])
def test_lbfgs_follows_the_same_path_whatever_the_scale_of_its_function(scale):
    """ c f has the same minimizer and, for L-BFGS (its steps, curvature pairs and tests all scale with f), the same
    path: the same points after every budget, up to rounding. """
    start = torch.tensor([[2.0, -1.5, 0.4], [0.3, 0.9, -0.7]], dtype=torch.float64)
    for evals in (4, 12):
        plain = minimize(_double_well, start.clone(), evals, first_step=3.0)[0]
        scaled = minimize(lambda z: _double_well(z, scale), start.clone(), evals, first_step=3.0)[0]
        torch.testing.assert_close(scaled, plain, rtol=1e-9, atol=1e-12)


def test_a_rows_path_does_not_depend_on_the_rows_beside_it():
    """ Rows whose steps are refused (overshoots, NaN) and rows that converge at once share a batch: each row's
    result is, bit for bit, what it gives alone. """
    def mixed(z):
        f, g = _double_well(z)
        bad = (z.abs() > 4).any(-1)
        return torch.where(bad, torch.inf, f), g
    start = torch.tensor([[3.0, -2.5], [1e-3, 2e-3], [-1.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    together = minimize(mixed, start.clone(), 15, first_step=20.0)[0]
    for row in range(4):
        alone = minimize(mixed, start[row:row + 1].clone(), 15, first_step=20.0)[0]
        assert torch.equal(alone[0], together[row]), row


def test_lbfgs_reaches_rosenbrocks_minimum_through_its_curved_valley():
    """ Rosenbrock's banana (non-convex, steps refused along its curved valley) from the classic (-1.2, 1): the
    minimum (1, 1), in a batch with a row scaled by 1e-80. """
    def rosenbrock(z):
        x, y = z[:, 0], z[:, 1]
        scale = torch.tensor([1.0, 1e-80], dtype=z.dtype)[:z.shape[0]]
        f = ((1 - x) ** 2 + 100 * (y - x * x) ** 2) * scale
        g = torch.stack([-2 * (1 - x) - 400 * x * (y - x * x), 200 * (y - x * x)], -1) * scale[:, None]
        return f, g
    start = torch.tensor([[-1.2, 1.0], [-1.2, 1.0]], dtype=torch.float64)
    z, f = minimize(rosenbrock, start, 70)
    torch.testing.assert_close(z, torch.ones_like(z), rtol=0, atol=1e-6)
    assert math.isclose(float(f[1]) * 1e80, float(f[0]), rel_tol=1e-3, abs_tol=1e-20)


@pytest.mark.parametrize('first_step, moves', [(2.0, False), (2.0 - 5e-5, False), (1.9, True)])
def test_a_step_without_sufficient_decrease_is_refused(first_step, moves):
    """ f = z^2 from z = 1 (gradient 2), whose first trial is z = 1 - first_step: to -1 (the same value), to just
    short of it (a decrease of 1e-4, below Armijo's 1e-4 x alpha x |slope| = 4e-4), or to -0.9 (a decrease of 0.19):
    the step is taken only in the last case. """
    def square(z):
        return (z * z).sum(-1), 2 * z
    start = torch.ones(1, 1, dtype=torch.float64)
    z, f = minimize(square, start, 2, first_step=first_step)
    assert bool((z != start).any()) == moves, (first_step, z)
    assert float(f) <= 1.0 - (4e-4 if moves else 0.0)


@pytest.mark.parametrize('magnitude', MAGNITUDES)
def test_the_fast_solvers_row_space_keeps_the_directions_above_its_cut(magnitude):
    """ The fast solver's row space of X keeps the directions whose singular values lie above rtol x the largest
    (1e-3): of singular values 1, 0.5, 2e-3, 5e-4 and 1e-6 (times any magnitude), three; Y = X V has them as its
    columns' norms, and Y V^T is X without the two directions cut. """
    from timm_structinit.inits.impulse_solver_fast import _row_space
    generator = torch.Generator().manual_seed(5)
    u, v = _orthogonal(40, generator)[:, :5], _orthogonal(8, generator)[:, :5]
    s = torch.tensor([1.0, 0.5, 2e-3, 5e-4, 1e-6], dtype=torch.float64) * magnitude
    x = u @ torch.diag(s) @ v.T
    y, basis = _row_space(x, rtol=1e-3)
    assert basis.shape == (8, 3)
    torch.testing.assert_close(y.norm(dim=0), s[:3], rtol=1e-9, atol=0)
    torch.testing.assert_close(y @ basis.T, u[:, :3] @ torch.diag(s[:3]) @ v[:, :3].T, rtol=0,
                               atol=1e-12 * magnitude)
    kept = canonical_row_space(x, rtol=1e-3)[1]  # the factorization the inits share cuts alike
    torch.testing.assert_close(kept, s[:3], rtol=1e-9, atol=0)
