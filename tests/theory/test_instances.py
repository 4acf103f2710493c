"""The seeded generators against the notebooks' own ``data_generator`` code (theory.md §3)."""

import numpy as np
import pytest
import torch

from attnsvm.theory.instances import (
    multi_token_instances,
    paper_instances,
    visualization1,
    visualization2,
)


def _local_converge_generator(seed, n, T, d):  # local_converge.ipynb, cell 2
    generator = torch.Generator()
    generator.manual_seed(seed)
    v = torch.randn((d), generator=generator)
    v /= torch.norm(v)
    Y = 2 * torch.ones(n) * (torch.randn(n, generator=generator) > 0) - 1
    X = torch.randn((n, T, d), generator=generator)
    X /= torch.norm(X, dim=-1, keepdim=True)
    Z = torch.randn((n, d), generator=generator)
    Z /= torch.norm(Z, dim=-1, keepdim=True)
    best_ids = ((X @ v) * Y.view(-1, 1)).argmax(dim=-1)
    return X, Y, Z, v, best_ids


def _multi_token_generator(seed, n, T, d):  # multi_token_converge.ipynb, mode 'relu'
    generator = torch.Generator()
    generator.manual_seed(seed)
    V = torch.randn((d, d), generator=generator)
    V /= torch.norm(V)
    X = torch.randn((n, T, d), generator=generator)
    X /= torch.norm(X, dim=-1, keepdim=True)
    Y = 2 * torch.ones(n) * (torch.randn(n, generator=generator) > 0) - 1
    Z = torch.randn((n, d), generator=generator)
    Z /= torch.norm(Z, dim=-1, keepdim=True)
    best_ids = (torch.relu(X @ V).sum(-1) * Y.view(-1, 1)).argmax(dim=-1)
    return X, Y, Z, V, best_ids


@pytest.mark.parametrize(
    ("generator", "ours"),
    [
        (_local_converge_generator, paper_instances),
        (_multi_token_generator, multi_token_instances),
    ],
)
def test_bit_identical_to_the_notebook_generators(generator, ours):
    seeds = [0, 1, 17, 99]
    inst = ours(seeds, 6, 8, 10)
    assert inst.X.shape == (4, 6, 8, 10) and inst.X.dtype == np.float64
    for k, seed in enumerate(seeds):
        X, Y, Z, p, best = (
            a.double().numpy() if a.is_floating_point() else a.numpy()
            for a in generator(seed, 6, 8, 10)
        )
        head = inst.v[k] if inst.head == "linear" else inst.V[k]
        for a, b in [(inst.X[k], X), (inst.Y[k], Y), (inst.Z[k], Z), (head, p)]:
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(inst.optimal()[k], best)


def test_visualization_instances():
    one, two = visualization1(), visualization2()
    assert one.shape == (1, 2, 3, 2) and two.shape == (1, 2, 5, 2)
    np.testing.assert_array_equal(one.Y, 1.0)
    np.testing.assert_array_equal(two.X[0, :, 0], [[1.0, 0.5], [1.0, -0.5]])
    np.testing.assert_allclose(np.linalg.norm(one.Z[0], axis=-1), 1.0)
    # theory.md §3.1 and §3.2 measured opt = (0, 2) and (0, 0)
    np.testing.assert_array_equal(one.optimal()[0], [0, 2])
    np.testing.assert_array_equal(two.optimal()[0], [0, 0])


def test_select_and_bad_sizes():
    inst = paper_instances(5, 2, 3, 4)
    part = inst.select(np.array([True, False, True, False, False]))
    np.testing.assert_array_equal(part.seeds, [0, 2])
    np.testing.assert_array_equal(part.X[1], inst.X[2])
    with pytest.raises(ValueError, match="T >= 2"):
        paper_instances(1, 2, 1, 4)
    with pytest.raises(ValueError, match="seeds"):
        paper_instances([], 2, 3, 4)
