"""What the registry refuses or gives up with: the gRPC and REST APIs turn each into their own status."""

from __future__ import annotations


class NotFoundError(LookupError):
    pass


class FailedPreconditionError(RuntimeError):
    pass


class AlreadyExistsError(RuntimeError):
    """The endpoint is registered already, with a different spec."""


class AbortedError(RuntimeError):
    pass


class NotShareableError(FailedPreconditionError):
    """The load balancer serves another client cluster, and its service group cannot be shared."""


class LimitExceededError(FailedPreconditionError):
    """The load balancer or GWProxy is beyond its Account's limit: not served."""
