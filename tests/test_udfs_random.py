"""Tests for udfs.random: the CSPRNG source, the test-only seeded source, and its refusal."""

from __future__ import annotations

import os
import pathlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.random import RandomSource, SeededRandom, SystemRandom

UDFS_DIR = pathlib.Path(__file__).resolve().parent.parent / "udfs"


def test_seeded_random_refused_without_insecure_flag() -> None:
    with pytest.raises(ValueError, match="insecure=True"):
        SeededRandom(1)
    with pytest.raises(ValueError, match="insecure=True"):
        SeededRandom(1, insecure=False)
    with pytest.raises(ValueError, match="insecure=True"):
        SeededRandom(1, insecure="yes")  # type: ignore[arg-type]  # only the literal True


def test_seeded_random_is_deterministic_and_marked_insecure() -> None:
    a = SeededRandom(1234, insecure=True)
    b = SeededRandom(1234, insecure=True)
    c = SeededRandom(1235, insecure=True)
    seq_a = [a.randbelow(1000) for _ in range(50)]
    assert seq_a == [b.randbelow(1000) for _ in range(50)]
    assert seq_a != [c.randbelow(1000) for _ in range(50)]
    assert SeededRandom.secure is False and a.secure is False
    assert SystemRandom.secure is True and SystemRandom().secure is True
    with pytest.raises(TypeError):
        SeededRandom(1.5, insecure=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("source", [SystemRandom(), SeededRandom(5, insecure=True)])
def test_values_in_range(source: RandomSource) -> None:
    for n in (1, 2, 3, 7, 2**63, 2**64, 2**64 + 1, 2**100 + 3):
        for _ in range(200):
            assert 0 <= source.randbelow(n) < n
    for k in (0, 1, 5, 63, 64, 65, 200):
        for _ in range(200):
            assert 0 <= source.randbits(k) < 2**k
    assert source.randbits(0) == 0
    assert source.randbelow(1) == 0
    with pytest.raises(ValueError):
        source.randbelow(0)
    with pytest.raises(ValueError):
        source.randbits(-1)


def test_system_random_uses_top_bits_of_all_sizes() -> None:
    rng = SystemRandom()
    # Every bit position of a 200-bit and a 64-bit request gets set at some point.
    for k in (64, 200):
        seen = 0
        for _ in range(64):
            seen |= rng.randbits(k)
        assert seen == 2**k - 1


def test_system_random_is_roughly_uniform() -> None:
    # 6 cells (not a power of two: exercises rejection). Each count is within 6 standard
    # deviations of n/6; a correct source fails this with probability < 1e-8.
    rng = SystemRandom(buffer_bytes=64)  # small buffer: many refills
    n = 60_000
    counts = [0] * 6
    for _ in range(n):
        counts[rng.randbelow(6)] += 1
    sd = (n * (1 / 6) * (5 / 6)) ** 0.5
    assert all(abs(c - n / 6) < 6 * sd for c in counts), counts


def test_system_random_buffer_size_validated() -> None:
    with pytest.raises(ValueError):
        SystemRandom(buffer_bytes=12)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_does_not_reuse_parent_buffer() -> None:
    rng = SystemRandom()
    rng.randbits(64)  # fill the buffer before forking
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next word and exit immediately
        try:
            os.write(write_fd, rng.randbits(64).to_bytes(8, "little"))
        finally:
            os._exit(0)
    os.close(write_fd)
    child_word = int.from_bytes(os.read(read_fd, 8), "little")
    os.close(read_fd)
    os.waitpid(pid, 0)
    assert child_word != rng.randbits(64)  # equal with probability 2**-64


@settings(max_examples=200, deadline=None, database=None)
@given(n=st.integers(min_value=1, max_value=2**130), seed=st.integers(0, 2**32))
def test_randbelow_range_property(n: int, seed: int) -> None:
    rng = SeededRandom(seed, insecure=True)
    assert 0 <= rng.randbelow(n) < n


def test_production_code_has_no_textbook_noise() -> None:
    """No float Laplace, numpy RNG or stdlib floats in the release path."""
    forbidden = [
        r"numpy\.random",
        r"np\.random",
        r"random\.random\(",
        r"\.laplace\(",
        r"\.uniform\(",
        r"math\.log\(\s*(rng|random|u\b)",
    ]
    for path in UDFS_DIR.glob("*.py"):
        text = path.read_text()
        for pattern in forbidden:
            assert not re.search(pattern, text), f"{path.name} matches {pattern}"
