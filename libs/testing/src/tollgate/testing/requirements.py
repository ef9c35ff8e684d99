"""What a test needs of the machine, said in one place, so that a suite never passes in CI by skipping.

Where the machine lacks it (Tilt, root, the real node's Debian packages), a developer's run skips the test and says
why; a CI run (the environment variable `CI` set and not empty, as `.ci/run` and the Dagger pipeline set it) fails
it instead: CI is where every test must have run. Only for what the environment lacks; a skip that is part of what
a test means stays a plain `pytest.skip`.

    requirements.require(shutil.which("ip") is not None, "needs iproute2's ip")
    requirements.require_real_node("tests/e2e/node")     # in a fixture: node.unsupported_reason()
    TILT = requirements.require_tool(tilt_binary, "Tilt tests")

Call them from a fixture or a test, not at a module's top level: there, a failure in CI is a collection error that
stops the whole session before any test runs. `nonempty` is the exception: it guards a parameter list built from
the files of the checkout, and an empty one is an error of the checkout, reported at collection.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import NoReturn, TypeVar

import pytest

from tollgate.testing import node
from tollgate.testing.tools import ToolsMissingError

T = TypeVar("T")
CI_VARIABLE = "CI"


def in_ci() -> bool:
    """Whether this run is CI's: `CI` set to anything but the empty string."""
    return bool(os.environ.get(CI_VARIABLE))


def unavailable(reason: str) -> NoReturn:
    """The test cannot run here, because of `reason`: skipped, or failed when in CI."""
    if in_ci():
        pytest.fail(f"{reason} ({CI_VARIABLE} is set: what a test needs must be there in CI)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(condition: bool, reason: str) -> None:
    """Go on when `condition` holds; otherwise `unavailable(reason)`."""
    if not condition:
        unavailable(reason)


def require_tool(find: Callable[[], T], what: str) -> T:
    """What `find` returns (a tool's path, from tollgate.testing.tools); its ToolsMissingError, which says how to
    get the tool, makes `what` unavailable."""
    try:
        return find()
    except ToolsMissingError as missing:
        unavailable(f"{what}: {missing}")


def require_real_node(what: str) -> None:
    """The real node's prerequisites (Linux, root, containerd and the rest: tollgate.testing.node), for `what`."""
    reason = node.unsupported_reason()
    if reason is not None:
        unavailable(f"{what} needs the real node: {reason}")


def nonempty(items: Iterable[T], what: str) -> list[T]:
    """`items` as a list, for pytest.mark.parametrize; none is a collection error naming `what`. An empty parameter
    list would otherwise collect one skipped test (or none) and let the run pass having checked nothing, as when a
    glob's directory moved."""
    listed = list(items)
    if not listed:
        pytest.fail(f"{what}: found none, so the tests parametrized by it would check nothing", pytrace=False)
    return listed
