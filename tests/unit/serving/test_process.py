"""app.serving.process: the master's process tweaks (the allocator's threshold, BLAS pinned to one thread)."""

from __future__ import annotations

import ctypes
import os

import pytest

from app.serving import process


def test_the_allocator_threshold_is_fixed_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        ctypes.CDLL("libc.so.6").mallopt  # noqa: B018
    except (OSError, AttributeError):
        pytest.skip("not glibc")
    assert process.keep_large_buffers_returnable() is True

    def no_glibc(name: str) -> None:
        raise OSError(name)

    monkeypatch.setattr(process.ctypes, "CDLL", no_glibc)
    assert process.keep_large_buffers_returnable() is False


def test_the_master_pins_blas_to_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # an operator's explicit choice is kept
    process.prepare_master()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1" and os.environ["MKL_NUM_THREADS"] == "1"
    assert os.environ["OMP_NUM_THREADS"] == "3"
