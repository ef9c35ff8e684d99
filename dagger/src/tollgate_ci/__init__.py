"""tollgate's CI pipeline in containers, calling the same make targets as `.ci/run`.

    dagger call lint --source=.
    dagger call test --source=. --tilt-source=../shared/vendor/tilt/tilt-0.37.6-src.tar.xz
    dagger call build --source=. --service=xds
    dagger call e2e --source=.

The Dagger engine needs a container runtime; this machine has none, so `make test` only type-checks
this module (see docs/operations.md).
"""

from tollgate_ci.main import TollgateCi

__all__ = ["TollgateCi"]
