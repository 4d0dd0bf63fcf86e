"""strategies.rng's building blocks give the same words as its one-stream functions, and the
materializer hashes its three value parts in one chain."""

from __future__ import annotations

import torch

from conformance.tools.op_count import count_ops
from strategies import rng
from strategies.materialize import _values
from strategies.recipe import Recipe

ROWS = torch.tensor([0, 1, 7, 4095, 2**31 + 5, 2**40 + 3, 2**45 - 1], dtype=torch.int64)


def test_row_words_are_the_hash_inputs_of_the_row_ids() -> None:
    for width in (1, 64, 512):
        ids = ROWS.unsqueeze(1) * width + torch.arange(width)
        assert torch.equal(rng.row_words(9, "latent", ROWS, width), rng.hash_input(9, "latent", ids))
        out = torch.empty(ROWS.numel(), width, dtype=torch.int64)
        assert rng.row_words(9, "rope", ROWS, width, out=out) is out
        assert torch.equal(out, rng.hash_input(9, "rope", ids))


def test_keyed_row_words_are_each_recipes_row_words() -> None:
    seeds = (9, 10, 9, 2**31)
    keys = torch.tensor([rng.stream_key(seed, "latent") for seed in seeds] + [rng.stream_key(11, "latent")] * 3)
    for width in (1, 64, 576 * 3):
        out = torch.empty(ROWS.numel(), width, dtype=torch.int64)
        assert rng.keyed_row_words(keys, ROWS, width, out=out) is out
        for i, seed in enumerate((*seeds, 11, 11, 11)):
            assert torch.equal(out[i], rng.row_words(seed, "latent", ROWS[i : i + 1], width)[0])


def test_keyed_values_are_each_seeds_and_streams_values() -> None:
    streams = [(9, "heavy"), (10, "heavy"), (9, "blocks"), (2**31, "peak_at")]
    ids = torch.arange(4 * 5, dtype=torch.int64).view(4, 5) * 131 + 7
    keys = torch.tensor([rng.stream_key(seed, stream) for seed, stream in streams]).unsqueeze(1)
    uniform, integers = rng.keyed_uniform(keys, ids), rng.keyed_integers(keys, ids, 128)
    for i, (seed, stream) in enumerate(streams):
        assert torch.equal(uniform[i], rng.uniform(seed, stream, ids[i]))
        assert torch.equal(integers[i], rng.integers(seed, stream, ids[i], 128))


def test_mixed_words_of_several_streams_are_each_streams_hashes() -> None:
    ids = torch.arange(1000, dtype=torch.int64) * 977
    words = torch.cat((rng.hash_input(3, "a", ids), rng.hash_input(3, "b", ids[:10])))
    mixed = rng.mix64(words)
    assert torch.equal(mixed[:1000], rng.hash64(3, "a", ids)) and torch.equal(mixed[1000:], rng.hash64(3, "b", ids[:10]))
    assert torch.equal(rng.normal_from_hash(mixed[:1000]), rng.normal_like(3, "a", ids))
    assert not torch.equal(mixed[:10], mixed[1000:])  # the stream key separates the streams


def test_the_three_value_parts_are_hashed_in_one_chain() -> None:
    """latent, rope and q drawn from normal values: one splitmix finaliser (3 xors) for all of
    them; an "exact" part has its own stream (integers) and is left out of the chain."""
    recipe = Recipe(seed=4, n_q=3, heads=2, row_lengths=(5, 0, 9), cache_rows=40)
    ops = count_ops(lambda: _values(recipe, torch.tensor([1, 5, 30]), torch.device("cpu"))).ops
    assert ops["bitwise_xor_"] == 3
    exact = Recipe(seed=4, n_q=3, heads=2, row_lengths=(5, 0, 9), cache_rows=40, rope="exact")
    latent, rope, q = _values(exact, torch.tensor([1, 5, 30]), torch.device("cpu"))
    assert set(rope.float().unique().tolist()) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert latent.shape == (3, 512) and q.shape == (3, 2, 576) and rope.dtype == torch.bfloat16
