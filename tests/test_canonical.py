""" Every factorization the inits use gives one answer for one input, whatever basis its solver returns.

An eigendecomposition or SVD fixes each vector up to its sign, and the vectors of a repeated value up to a rotation
of their eigenspace; kernel paths (AVX2, AVX-512, the scalar kernels, CUDA) choose differently. Here the solver
itself is replaced by one that chooses differently (every vector's sign flipped at random, every exactly repeated
eigenspace turned by a random rotation: an equally valid answer of the same factorization) and every init must
write the same weights to float precision. """
import pytest
import timm
import torch

from kernel_path_builds import TOLERANCE, build_every_model, largest_difference
from timm_structinit.inits.canonical import canonical_basis, canonical_gram_svd, canonical_row_space, canonical_svd

SMALL_VIT = dict(embed_dim=64, depth=2, num_heads=2)


def random_orthogonal(n, generator, dtype=torch.float64):
    q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).to(dtype)


def other_basis(vectors, values, generator):
    """ The same eigenspaces in another valid basis: random signs, and a random rotation within each run of values
    equal to float precision (a solver's own choice there). Returns (vectors, the transform applied). """
    count = vectors.shape[-1]
    flat, flat_values = vectors.reshape(-1, *vectors.shape[-2:]), values.reshape(-1, count)
    transforms = []
    for b in range(flat.shape[0]):
        t = torch.diag(torch.randint(0, 2, (count,), generator=generator).double() * 2 - 1)
        v = flat_values[b].double()
        start = 0
        while start < count:
            stop = start + 1
            while stop < count and abs(v[stop] - v[start]) <= 1e-12 * float(v.abs().max()):
                stop += 1
            if stop - start > 1:
                t[start:stop, start:stop] = t[start:stop, start:stop] @ random_orthogonal(stop - start, generator)
            start = stop
        transforms.append(t.to(vectors.dtype))
    t = torch.stack(transforms).reshape(*vectors.shape[:-2], count, count)
    return vectors @ t, t


def use_other_solver(monkeypatch, seed: int) -> None:
    """ torch.linalg.eigh and svd answering in another valid basis than the library's (`other_basis`). """
    eigh, svd = torch.linalg.eigh, torch.linalg.svd
    generator = torch.Generator().manual_seed(seed)

    def other_eigh(a, *args, **kwargs):
        values, vectors = eigh(a, *args, **kwargs)
        return torch.return_types.linalg_eigh((values, other_basis(vectors, values, generator)[0]))

    def other_svd(a, *args, **kwargs):
        u, s, vh = svd(a, *args, **kwargs)
        width = s.shape[-1]
        v, t = other_basis(vh[..., :width, :].mT, s, generator)
        return torch.return_types.linalg_svd((torch.cat([u[..., :width] @ t, u[..., width:]], -1),
                                              s, torch.cat([v.mT, vh[..., width:, :]], -2)))
    monkeypatch.setattr(torch.linalg, 'eigh', other_eigh)
    monkeypatch.setattr(torch.linalg, 'svd', other_svd)


@pytest.fixture
def other_solver(monkeypatch):
    use_other_solver(monkeypatch, 123)


def test_the_other_solver_answers_differently_and_validly(other_solver):
    """ The stand-in solver is a real change: its vectors differ from the library's, and still factor the input. """
    a = torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    gram = a.T @ a
    values, vectors = torch.linalg.eigh(gram)
    torch.testing.assert_close(vectors @ torch.diag(values) @ vectors.T, gram)
    u, s, vh = torch.linalg.svd(a)
    torch.testing.assert_close(u @ torch.diag(s) @ vh, a)
    flips = [bool((torch.linalg.svd(a)[2] != vh).any()) for _ in range(5)]
    assert any(flips)


def test_canonical_basis_ignores_signs_and_rotations_within_a_repeated_value():
    generator = torch.Generator().manual_seed(1)
    q = random_orthogonal(7, generator)
    values = torch.tensor([5.0, 3.0, 3.0, 3.0, 2.0, 1.0, 1.0], dtype=torch.float64)
    first = canonical_basis(q, values)[0]
    for _ in range(3):
        turned, _ = other_basis(q, values, generator)
        torch.testing.assert_close(canonical_basis(turned, values)[0], first, rtol=0, atol=1e-12)
    # still a basis of the same eigenspaces: the matrix they factor is unchanged
    matrix = q @ torch.diag(values) @ q.T
    torch.testing.assert_close(first @ torch.diag(values) @ first.T, matrix, rtol=0, atol=1e-12)
    torch.testing.assert_close(first.T @ first, torch.eye(7, dtype=torch.float64), rtol=0, atol=1e-12)


def test_canonical_basis_is_continuous_in_the_space():
    """ A space computed a little differently comes out a little different, never with a flipped vector. """
    generator = torch.Generator().manual_seed(2)
    q = random_orthogonal(9, generator)
    values = torch.linspace(9, 1, 9, dtype=torch.float64)
    nudged = torch.linalg.qr(q + 1e-9 * torch.randn(9, 9, generator=generator, dtype=torch.float64))[0]
    assert (canonical_basis(q, values)[0] - canonical_basis(nudged, values)[0]).abs().max() < 1e-7


def test_canonical_svd_factors_its_input_with_left_and_right_vectors_together(other_solver):
    a = torch.randn(4, 12, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    u, s, vh = canonical_svd(a)
    torch.testing.assert_close(u @ torch.diag_embed(s) @ vh, a)
    u2, s2, vh2 = canonical_svd(a)  # the stand-in solver answered in another basis
    torch.testing.assert_close(u2, u, rtol=0, atol=1e-12)
    torch.testing.assert_close(vh2, vh, rtol=0, atol=1e-12)


def test_the_gram_svd_is_the_svd_and_its_product_is_exact(other_solver):
    """ From the eigendecomposition of A^T A: the right vectors canonical_svd gives, A V = U S, and A V V^T = A. """
    a = torch.randn(5, 10, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    us, s, v = canonical_gram_svd(a)
    u_ref, s_ref, vh_ref = canonical_svd(a)
    torch.testing.assert_close(s, s_ref, rtol=1e-10, atol=0)
    torch.testing.assert_close(v, vh_ref.mT, rtol=0, atol=1e-10)
    torch.testing.assert_close(us, u_ref * s_ref[..., None, :], rtol=0, atol=1e-10)
    torch.testing.assert_close(us @ v.mT, a, rtol=0, atol=1e-12)


@pytest.mark.parametrize('shape', [(30, 12), (12, 30)])
def test_the_row_space_is_the_leading_part_of_the_canonical_svd(other_solver, shape):
    """ Tall or wide, from the smaller Gram matrix: the directions above rtol x the largest singular value, in the
    basis canonical_svd gives them, with X V = U S; a sin-cos-like pair of equal values is one eigenspace. """
    generator = torch.Generator().manual_seed(5)
    rows, cols = shape
    u = torch.linalg.qr(torch.randn(rows, 6, dtype=torch.float64, generator=generator))[0]
    v = torch.linalg.qr(torch.randn(cols, 6, dtype=torch.float64, generator=generator))[0]
    values = torch.tensor([9.0, 4.0, 4.0, 2.0, 0.05, 0.01], dtype=torch.float64)
    x = (u * values) @ v.T
    y, s, basis = canonical_row_space(x, rtol=0.1)
    u_ref, s_ref, vh_ref = canonical_svd(x)
    assert s.shape == (4,)
    torch.testing.assert_close(s, values[:4], rtol=1e-10, atol=0)
    torch.testing.assert_close(basis, vh_ref[:4].T, rtol=0, atol=1e-10)
    torch.testing.assert_close(y, u_ref[:, :4] * s_ref[:4], rtol=0, atol=1e-10)


def test_every_init_writes_the_same_weights_whatever_basis_the_solver_returns(monkeypatch):
    """ Every registered model, and every init on every family it supports, from seed 0: the weights written with the
    library's solver and with a solver that answers in other valid bases agree to the suite's tolerance (a sign
    left to the solver differs by the size of the weights themselves). """
    torch.set_num_threads(1)
    library = build_every_model()
    use_other_solver(monkeypatch, 7)
    other = build_every_model()
    assert sorted(other) == sorted(library)
    worst = {label: largest_difference(library[label], other[label]) for label in library}
    assert max(worst.values()) <= TOLERANCE, sorted(worst.items(), key=lambda kv: -kv[1])[:3]


def test_a_noise_free_mimetic_target_takes_one_basis_of_its_repeated_eigenvalue(monkeypatch):
    """ Without noise, A = b1 I: every singular value is repeated, and the rank-k truncation is one choice among
    many; the init makes the same one whatever the solver returns, and its products stay b1 times a projection. """
    def build():
        torch.manual_seed(0)
        model = timm.create_model('vit_tiny_patch2_32_gap_sincos', embed_dim=32, depth=1, num_heads=2,
                                  struct_init='mimetic', struct_init_seed=0,
                                  struct_init_kwargs=dict(qk_noise=0.0, vproj_noise=0.0))
        return {k: v.clone() for k, v in model.state_dict().items()}
    library = build()
    use_other_solver(monkeypatch, 11)
    other = build()
    assert largest_difference(library, other) <= TOLERANCE
    wq_wk = other['blocks.0.attn.qkv.weight'].double()
    q, k = wq_wk[:16].T, wq_wk[32:48].T  # head 0: W_q, W_k (D x 16)
    product = q @ k.T
    torch.testing.assert_close(product @ product, 0.7 * product, rtol=0, atol=1e-6)  # 0.7 x a projection
    assert abs(float(torch.trace(product)) - 0.7 * 16) < 1e-5
