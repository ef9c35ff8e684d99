"""Comparing what was written with what came back, where defaults may have been added."""

from __future__ import annotations

from typing import Any


def assert_contains(expected: Any, actual: Any, path: str = "") -> None:
    """Every field of `expected` is in `actual` with the same value; `actual` may have more (defaults)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{path}.{key}: missing"
            assert_contains(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{path}: expected a list, got {actual!r}"
        assert len(actual) == len(expected), f"{path}: {len(expected)} items became {len(actual)}"
        for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
            assert_contains(want, got, f"{path}[{index}]")
    else:
        assert expected == actual, f"{path}: {expected!r} became {actual!r}"
