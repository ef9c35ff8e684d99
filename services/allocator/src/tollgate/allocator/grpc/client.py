"""A client of the registration API, as a remote cluster's agent uses it: one channel (TLS with the allocator's CA
in `credentials`), its account's bearer token on every call (`epicctl credentials create ACCOUNT` mints it), a
deadline on every call (gRPC has none by default: a call to a peer that stopped answering would wait
forever).

`python -m tollgate.allocator.grpc.client` is the same client on the command line, as an agent's operator (and
`make dev`'s proof) calls it:

    python -m tollgate.allocator.grpc.client --address 127.0.0.1:19090 --ca-file .dev/allocator/ca.crt \
        --token-file .dev/allocator/root.token tunnels root
    ... register root LOAD_BALANCER ADDRESS PORT [--protocol UDP] [--node-address N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from types import TracebackType

import grpc
from google.protobuf import json_format

from tollgate.allocator.grpc._generated import allocator_pb2 as pb
from tollgate.allocator.grpc._generated import allocator_pb2_grpc as pb_grpc
from tollgate.runtime.tracing import client_interceptors

DEFAULT_TIMEOUT = 30.0


class AllocatorClient:
    """Each call takes `timeout` seconds at most (the client's `timeout` when not given), then raises
    grpc.aio.AioRpcError with DEADLINE_EXCEEDED."""

    def __init__(
        self,
        address: str,
        token: str,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"AllocatorClient timeout: must be greater than 0, got {timeout}")
        self.address = address
        self.timeout = timeout
        interceptors = client_interceptors()  # each call a client span; its trace context goes in the metadata
        self.channel = (
            grpc.aio.secure_channel(address, credentials, interceptors=interceptors)
            if credentials
            else grpc.aio.insecure_channel(address, interceptors=interceptors)
        )
        self.stub = pb_grpc.AllocatorStub(self.channel)  # type: ignore[no-untyped-call]
        self.metadata = (("authorization", f"Bearer {token}"),)

    async def register(
        self,
        account: str,
        load_balancer: str,
        address: str,
        port: int,
        protocol: str = "TCP",
        node_address: str = "",
        timeout: float | None = None,
        port_name: str = "",
        app_protocol: str = "",
        cluster: str = "",
    ) -> pb.RegisterEndpointResponse:
        request = pb.RegisterEndpointRequest(
            account=account,
            load_balancer=load_balancer,
            address=address,
            port=pb.Port(port=port, protocol=protocol, name=port_name, app_protocol=app_protocol),
            node_address=node_address,
            cluster=cluster,
        )
        response: pb.RegisterEndpointResponse = await self.stub.RegisterEndpoint(
            request, metadata=self.metadata, timeout=timeout or self.timeout
        )
        return response

    async def unregister(
        self,
        account: str,
        load_balancer: str,
        address: str,
        port: int = 0,
        protocol: str = "TCP",
        timeout: float | None = None,
    ) -> pb.UnregisterEndpointResponse:
        """Unregister `address:port/protocol`; with port 0, every port of `address`."""
        request = pb.UnregisterEndpointRequest(
            account=account,
            load_balancer=load_balancer,
            address=address,
            port=pb.Port(port=port, protocol=protocol) if port else None,
        )
        response: pb.UnregisterEndpointResponse = await self.stub.UnregisterEndpoint(
            request, metadata=self.metadata, timeout=timeout or self.timeout
        )
        return response

    async def load_balancer(self, account: str, name: str, timeout: float | None = None) -> pb.LoadBalancer:
        request = pb.GetLoadBalancerRequest(account=account, name=name)
        response: pb.LoadBalancer = await self.stub.GetLoadBalancer(
            request, metadata=self.metadata, timeout=timeout or self.timeout
        )
        return response

    async def tunnels(self, account: str, load_balancer: str = "", timeout: float | None = None) -> list[pb.Tunnel]:
        """The tunnels of `account` (the token's own), of one load balancer when given."""
        request = pb.ListTunnelsRequest(account=account, load_balancer=load_balancer)
        response: pb.ListTunnelsResponse = await self.stub.ListTunnels(
            request, metadata=self.metadata, timeout=timeout or self.timeout
        )
        return list(response.tunnels)

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> AllocatorClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="python -m tollgate.allocator.grpc.client", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    main.add_argument("--address", required=True, help="HOST:PORT of the registration API")
    main.add_argument("--ca-file", type=Path, help="CA of the API's serving certificate (without it: plaintext)")
    main.add_argument("--token-file", type=Path, required=True, help="the account's token (epicctl credentials)")
    commands = main.add_subparsers(dest="command", required=True)
    tunnels = commands.add_parser("tunnels", help="list the account's tunnels")
    tunnels.add_argument("account")
    register = commands.add_parser("register", help="register an endpoint of a load balancer")
    register.add_argument("account")
    register.add_argument("load_balancer")
    register.add_argument("endpoint_address", metavar="ADDRESS")
    register.add_argument("port", type=int)
    register.add_argument("--protocol", default="TCP")
    register.add_argument("--node-address", default="")
    return main


async def _run(args: argparse.Namespace) -> str:
    credentials = grpc.ssl_channel_credentials(args.ca_file.read_bytes()) if args.ca_file else None
    async with AllocatorClient(args.address, args.token_file.read_text().strip(), credentials) as api:
        if args.command == "tunnels":
            tunnels = await api.tunnels(args.account)
            return "\n".join(json_format.MessageToJson(t, indent=None) for t in tunnels)
        response = await api.register(
            args.account, args.load_balancer, args.endpoint_address, args.port, args.protocol, args.node_address
        )
        return str(json_format.MessageToJson(response, indent=None))


def main(argv: list[str] | None = None) -> int:
    """Prints each answer as one JSON line; a refused call prints its status and details on stderr (exit 1)."""
    args = parser().parse_args(argv)
    try:
        print(asyncio.run(_run(args)))
    except grpc.aio.AioRpcError as error:
        print(f"{error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
