"""The kinds this webhook admits and the one HTTPS path per kind and operation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tollgate.models import ALL_KINDS, CustomResource

Operation = Literal["mutate", "validate"]
OPERATIONS: tuple[Operation, ...] = ("mutate", "validate")

Model = type[CustomResource[Any, Any]]


@dataclass(frozen=True)
class Kind:
    model: Model

    @property
    def group(self) -> str:
        return self.model.resource.group

    @property
    def version(self) -> str:
        return self.model.resource.version

    @property
    def name(self) -> str:
        return self.model.resource.kind

    @property
    def plural(self) -> str:
        return self.model.resource.plural

    @property
    def cluster_scoped(self) -> bool:
        return self.model.resource.scope == "Cluster"

    def path(self, operation: Operation) -> str:
        """`/validate/epic.acnodal.io/v1/loadbalancers`."""
        return f"/{operation}/{self.group}/{self.version}/{self.plural}"

    def webhook_name(self, operation: Operation) -> str:
        """The name the API server quotes in its errors: `validate.loadbalancers.epic.acnodal.io`."""
        prefix = "default" if operation == "mutate" else "validate"
        return f"{prefix}.{self.plural}.{self.group}"

    def describe(self) -> str:
        return f"{self.group}/{self.version} {self.name}"


KINDS: tuple[Kind, ...] = tuple(Kind(model) for model in ALL_KINDS)


def kind_of(model: Model) -> Kind:
    return next(kind for kind in KINDS if kind.model is model)
