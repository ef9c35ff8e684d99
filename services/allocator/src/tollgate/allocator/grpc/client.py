"""A client of the registration API, as a remote cluster's agent uses it: one channel, the bearer token on every
call, a deadline on every call (gRPC has none by default: a call to a peer that stopped answering would wait
forever)."""

from __future__ import annotations

from types import TracebackType

import grpc

from tollgate.allocator.grpc._generated import allocator_pb2 as pb
from tollgate.allocator.grpc._generated import allocator_pb2_grpc as pb_grpc

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
        self.channel = (
            grpc.aio.secure_channel(address, credentials) if credentials else grpc.aio.insecure_channel(address)
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

    async def tunnels(
        self, account: str = "", load_balancer: str = "", timeout: float | None = None
    ) -> list[pb.Tunnel]:
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
