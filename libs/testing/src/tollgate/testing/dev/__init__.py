"""`make dev`: the whole system on the embedded cluster (`python -m tollgate.testing.dev`, whose __main__ says how
`make dev`, `make dev-up`, `make dev-down` and Tilt's local mode run it).

    system.py        DevSystem: start and stop, in the order of deploy/local/resources.yaml
    steps.py         the resources of deploy/local/resources.yaml and the one-shot steps they name
    certificates.py  the webhook's and the allocator's CA and serving pairs, root's token
    data_path.py     the data-path step: traffic through Envoy containers, to a load balancer's public address
    supervisor.py    the services kept running (restarts after a back-off), one log per run
    summary.py       the summary it prints once the system is up
    progress.py      what it says while it works, and how `make dev-up` follows the detached system's log
    ports.py         the ports it needs, free before it starts; services a killed `make dev` left behind
"""

from tollgate.testing.dev.data_path import LB_CLIENT_NODE
from tollgate.testing.dev.system import DevSystem

__all__ = ["LB_CLIENT_NODE", "DevSystem"]
