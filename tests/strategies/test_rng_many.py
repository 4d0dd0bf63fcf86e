"""strategies.rng's batched draws (integers_many, keyed_inputs + one mix64) give each draw the
values its own call gives; uniform_below is uniform_from_hash(h) < p exactly."""

from __future__ import annotations

import math

import pytest
import torch

from strategies import rng


def test_integers_many_gives_each_draw_its_own_values() -> None:
    ids_a = torch.arange(37, dtype=torch.int64)
    ids_b = torch.arange(12, dtype=torch.int64).view(3, 4) * 1000 + 5
    ids_c = torch.zeros(0, dtype=torch.int64)
    draws = [("filler", ids_a, 1000), ("index", ids_b, 7), ("invalid", ids_c, 3), ("pick", ids_a, 2**40)]
    got = rng.integers_many(11, draws)
    assert [t.shape for t in got] == [ids.shape for _, ids, _ in draws]
    for (stream, ids, high), values in zip(draws, got, strict=True):
        assert torch.equal(values, rng.integers(11, stream, ids, high))
    assert rng.integers_many(11, []) == []


def test_keyed_inputs_hashed_together_are_each_draws_hashes() -> None:
    rows = torch.tensor([3, 9, 2**33], dtype=torch.int64)
    per_row = torch.tensor([rng.stream_key(1, "a"), rng.stream_key(2, "a"), rng.stream_key(3, "a")], dtype=torch.int64)
    block_ids = rows.unsqueeze(1) * 4 + torch.arange(4)
    draws = [(per_row.view(-1, 1), block_ids), (rng.stream_key(5, "b"), rows), (per_row, rows)]
    words = torch.empty(sum(ids.numel() for _, ids in draws) + 3, dtype=torch.int64)  # longer than needed: the tail is left alone
    words[-3:] = 7
    sections = rng.keyed_inputs(draws, words)
    rng.mix64(words[:-3])
    for (keys, ids), hashes in zip(draws, sections, strict=True):
        assert hashes.shape == ids.shape
        assert torch.equal(hashes, rng.keyed_hash64(keys, ids))
    assert words[-3:].tolist() == [7, 7, 7]


@pytest.mark.parametrize("p", [0.3, 0.5, 1.0, 2.0**-60, 0.1])
def test_uniform_below_is_the_float_comparison(p: float) -> None:
    generator = torch.Generator().manual_seed(4)
    random = torch.randint(-(2**62), 2**62, (200_000,), generator=generator, dtype=torch.int64) * 2
    k = math.ceil(p * 2.0**53)  # the hashes whose uniform is at the threshold's edge, with any low 11 bits
    edges = torch.tensor([k - 1, k, k + 1, 0, 2**53 - 1], dtype=torch.int64).clamp(0, 2**53 - 1)
    at_edges = (edges.unsqueeze(1) << 11) | torch.tensor([0, 1, 2**10, 2**11 - 1], dtype=torch.int64)
    h = torch.cat((random, at_edges.flatten(), torch.tensor([-1, -(2**63)], dtype=torch.int64)))
    assert torch.equal(rng.uniform_below(h, p), rng.uniform_from_hash(h) < p)


def test_uniform_below_refuses_p_outside_the_unit_interval() -> None:
    for p in (0.0, -0.5, 1.5, math.nan):
        with pytest.raises(ValueError, match="p in"):
            rng.uniform_below(torch.zeros(2, dtype=torch.int64), p)


def test_host_integers_many_gives_the_torch_draws_bits() -> None:
    generator = torch.Generator().manual_seed(9)
    wide = torch.randint(0, 2**62, (500,), generator=generator, dtype=torch.int64)
    draws = [
        ("filler", torch.arange(41, dtype=torch.int64), 1000),
        ("index", wide, 2**40),
        ("pick", torch.arange(12, dtype=torch.int64).view(3, 4) * (1 << 24) + 5, 7),
        ("invalid", torch.zeros(0, dtype=torch.int64), 3),
        ("pool", wide, 1),
    ]
    expected = rng.integers_many(3, draws)
    got = rng.host_integers_many(3, [(stream, ids.numpy(), high) for stream, ids, high in draws])
    for want, values in zip(expected, got, strict=True):
        assert values.dtype == want.numpy().dtype and values.shape == tuple(want.shape)
        assert (values == want.numpy()).all()
    assert rng.host_integers_many(3, []) == []
