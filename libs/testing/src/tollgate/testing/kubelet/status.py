"""Container and pod status as the kubelet reports them, and its restart rules (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tollgate.testing.pods import JSON, condition


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def waiting(reason: str, message: str = "") -> JSON:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def terminated(exit_code: int, started_at: str, finished_at: str) -> JSON:
    return {
        "terminated": {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": started_at,
            "finishedAt": finished_at,
        }
    }


@dataclass
class ContainerView:
    """What the pod's status says about one container; its runner keeps it current."""

    name: str
    image: str
    restart_count: int = 0
    state: JSON = field(default_factory=lambda: waiting("ContainerCreating"))
    last_state: JSON = field(default_factory=dict)
    ready: bool = False
    started: bool = False
    finished: bool = False  # terminated for good: the restart policy does not restart it

    def status(self) -> JSON:
        return {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }


def pod_status(containers: list[ContainerView], previous: list[JSON], now: str) -> JSON:
    """phase, the Ready and ContainersReady conditions (lastTransitionTime kept while the status holds) and the
    containerStatuses. `previous` are the pod's current conditions."""
    unready = [c.name for c in containers if not c.ready]
    reason, message = (
        ("", "") if not unready else ("ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]")
    )
    since = {c["type"]: (c["status"], c.get("lastTransitionTime", now)) for c in previous}
    conditions = []
    for kind in ("Ready", "ContainersReady"):
        status = "True" if not unready else "False"
        held = since.get(kind, ("", now))
        conditions.append(condition(kind, not unready, reason, message, held[1] if held[0] == status else now))
    if containers and all(c.finished for c in containers):
        failed = any(c.state.get("terminated", {}).get("exitCode") for c in containers)
        phase = "Failed" if failed else "Succeeded"
    elif all("waiting" in c.state and not c.last_state for c in containers):
        phase = "Pending"  # no container has run yet: its image, config or volumes are not there
    else:
        phase = "Running"
    return {"phase": phase, "conditions": conditions, "containerStatuses": [c.status() for c in containers]}
