"""The fixed problems of the oracle snapshot (conformance.tools.snapshot.oracle), also hashed by
the materialize snapshot: empty and negative-length rows, has_invalid (scattered, tail, leading
tile, all), duplicates, long rows (> 2048 keys), every latent / rope / q distribution, every
writer, scale corruptions, NaN codes, strided q and random shapes.

A recorded snapshot is keyed by these names: a renamed or changed case shows up in `--check` as
NEW / MISSING / DIFFERS lines, so the list only grows."""

from __future__ import annotations

from strategies.recipe import Recipe


def cases() -> list[tuple[str, Recipe]]:
    """(name, recipe) of every problem of the snapshot."""
    out: list[tuple[str, Recipe]] = []

    def add(name: str, **kw: object) -> None:
        out.append((name, Recipe(**kw)))  # type: ignore[arg-type]

    add("prof", seed=3, n_q=16, heads=16, row_lengths=(512,) * 16, cache_rows=4096)
    add("empty_rows", seed=1, n_q=5, heads=4, row_lengths=(0, 7, -3, 20, 0), cache_rows=64, stream_offset=3)
    add("all_empty", seed=2, n_q=3, heads=2, row_lengths=(0, 0, 0), cache_rows=8)
    add("single_key", seed=4, n_q=2, heads=1, row_lengths=(1, 1), cache_rows=8)
    add("mixed_lengths", seed=5, n_q=9, heads=8, row_lengths=(1, 130, 0, 257, 64, 3, 129, 500, 2), cache_rows=2048)
    for n, pattern in enumerate(("scattered", "tail", "leading_tile", "all")):
        add(
            f"invalid_{pattern}",
            seed=10 + n,
            n_q=4,
            heads=3,
            row_lengths=(200, 40, 0, 300),
            cache_rows=1024,
            invalid_pattern=pattern,
            invalid_permille=300,
            has_invalid=True,
        )
    add(
        "invalid_poison",
        seed=15,
        n_q=3,
        heads=5,
        row_lengths=(150, 90, 260),
        cache_rows=700,
        invalid_pattern="scattered",
        invalid_permille=500,
        has_invalid=True,
        poison=True,
    )
    for n, pattern in enumerate(("clustered", "duplicates", "sorted", "reversed", "tail")):
        add(f"pattern_{pattern}", seed=20 + n, n_q=3, heads=6, row_lengths=(300, 129, 64), cache_rows=512, index_pattern=pattern)
    add("long_rows", seed=30, n_q=2, heads=16, row_lengths=(3000, 2200), cache_rows=8192)
    add("long_dup", seed=31, n_q=3, heads=2, row_lengths=(2600, 5, 2049), cache_rows=300, index_pattern="duplicates")
    for n, latent in enumerate(("heavy", "outliers", "zero_blocks", "tiny_blocks", "max57344", "large", "above_cap")):
        add(f"latent_{latent}", seed=40 + n, n_q=3, heads=4, row_lengths=(180, 33, 128), cache_rows=512, latent=latent)
    for n, rope in enumerate(("large", "tiny", "zero")):
        add(f"rope_{rope}", seed=50 + n, n_q=3, heads=4, row_lengths=(100, 260, 7), cache_rows=512, rope=rope)
    for n, q in enumerate(("large", "tiny", "zero_blocks", "tiny_blocks")):
        add(f"q_{q}", seed=60 + n, n_q=3, heads=7, row_lengths=(140, 70, 256), cache_rows=512, q=q)
    for n, scale in enumerate(("peaked", "flat", 0.37, -0.05)):
        add(f"scale_{n}", seed=70 + n, n_q=3, heads=4, row_lengths=(90, 300, 17), cache_rows=512, softmax_scale=scale)
    for n, writer in enumerate(("pow2-floor", "raw")):
        add(f"writer_{writer}", seed=80 + n, n_q=3, heads=4, row_lengths=(120, 60, 250), cache_rows=512, writer=writer)
    add(
        "exact",
        seed=90,
        n_q=4,
        heads=16,
        row_lengths=(256, 100, 1, 0),
        cache_rows=400,
        q="exact",
        latent="exact",
        rope="exact",
        softmax_scale="exact",
    )
    add("strided", seed=91, n_q=3, heads=4, row_lengths=(77, 200, 5), cache_rows=300, q_pad=(5, 3))
    for n, kind in enumerate(("scale_not_pow2", "scale_above_cap", "zero_scale")):
        add(
            f"corrupt_{kind}",
            seed=100 + n,
            n_q=3,
            heads=4,
            row_lengths=(150, 40, 260),
            cache_rows=512,
            corruptions=({"kind": kind, "count": 6},),
        )
    add(
        "corrupt_nan_codes",
        seed=110,
        n_q=2,
        heads=2,
        row_lengths=(50, 20),
        cache_rows=128,
        corruptions=({"kind": "nan_codes", "count": 2},),
    )
    for seed in range(120, 126):
        add(
            f"random_{seed}",
            seed=seed,
            n_q=6,
            heads=1 + seed % 16,
            row_lengths=tuple((seed * 37 + 11 * i) % 700 - 40 for i in range(6)),
            cache_rows=1500,
            has_invalid=seed % 2 == 0,
            invalid_pattern="scattered" if seed % 2 == 0 else "none",
            invalid_permille=100,
        )
    return out
