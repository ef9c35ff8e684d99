from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Port(_message.Message):
    __slots__ = ("port", "protocol", "app_protocol", "name")
    PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    APP_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    port: int
    protocol: str
    app_protocol: str
    name: str
    def __init__(self, port: _Optional[int] = ..., protocol: _Optional[str] = ..., app_protocol: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Tunnel(_message.Message):
    __slots__ = ("account", "load_balancer", "endpoint_address", "endpoint_port", "node_address", "tunnel_id", "epic_address", "epic_port", "remote_endpoint")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    LOAD_BALANCER_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_PORT_FIELD_NUMBER: _ClassVar[int]
    NODE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TUNNEL_ID_FIELD_NUMBER: _ClassVar[int]
    EPIC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPIC_PORT_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    account: str
    load_balancer: str
    endpoint_address: str
    endpoint_port: Port
    node_address: str
    tunnel_id: int
    epic_address: str
    epic_port: Port
    remote_endpoint: str
    def __init__(self, account: _Optional[str] = ..., load_balancer: _Optional[str] = ..., endpoint_address: _Optional[str] = ..., endpoint_port: _Optional[_Union[Port, _Mapping]] = ..., node_address: _Optional[str] = ..., tunnel_id: _Optional[int] = ..., epic_address: _Optional[str] = ..., epic_port: _Optional[_Union[Port, _Mapping]] = ..., remote_endpoint: _Optional[str] = ...) -> None: ...

class RegisterEndpointRequest(_message.Message):
    __slots__ = ("account", "load_balancer", "address", "port", "node_address", "cluster")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    LOAD_BALANCER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    NODE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    account: str
    load_balancer: str
    address: str
    port: Port
    node_address: str
    cluster: str
    def __init__(self, account: _Optional[str] = ..., load_balancer: _Optional[str] = ..., address: _Optional[str] = ..., port: _Optional[_Union[Port, _Mapping]] = ..., node_address: _Optional[str] = ..., cluster: _Optional[str] = ...) -> None: ...

class RegisterEndpointResponse(_message.Message):
    __slots__ = ("tunnel", "created")
    TUNNEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    tunnel: Tunnel
    created: bool
    def __init__(self, tunnel: _Optional[_Union[Tunnel, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class UnregisterEndpointRequest(_message.Message):
    __slots__ = ("account", "load_balancer", "address", "port")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    LOAD_BALANCER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    account: str
    load_balancer: str
    address: str
    port: Port
    def __init__(self, account: _Optional[str] = ..., load_balancer: _Optional[str] = ..., address: _Optional[str] = ..., port: _Optional[_Union[Port, _Mapping]] = ...) -> None: ...

class UnregisterEndpointResponse(_message.Message):
    __slots__ = ("deleted", "removed")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    removed: int
    def __init__(self, deleted: _Optional[bool] = ..., removed: _Optional[int] = ...) -> None: ...

class GetLoadBalancerRequest(_message.Message):
    __slots__ = ("account", "name")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    account: str
    name: str
    def __init__(self, account: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ("type", "status", "reason", "message")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    type: str
    status: str
    reason: str
    message: str
    def __init__(self, type: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class LoadBalancer(_message.Message):
    __slots__ = ("account", "name", "service_id", "public_address", "public_ports", "service_group", "tunnels", "conditions")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_PORTS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_GROUP_FIELD_NUMBER: _ClassVar[int]
    TUNNELS_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    account: str
    name: str
    service_id: int
    public_address: str
    public_ports: _containers.RepeatedCompositeFieldContainer[Port]
    service_group: str
    tunnels: _containers.RepeatedCompositeFieldContainer[Tunnel]
    conditions: _containers.RepeatedCompositeFieldContainer[Condition]
    def __init__(self, account: _Optional[str] = ..., name: _Optional[str] = ..., service_id: _Optional[int] = ..., public_address: _Optional[str] = ..., public_ports: _Optional[_Iterable[_Union[Port, _Mapping]]] = ..., service_group: _Optional[str] = ..., tunnels: _Optional[_Iterable[_Union[Tunnel, _Mapping]]] = ..., conditions: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ...) -> None: ...

class ListTunnelsRequest(_message.Message):
    __slots__ = ("account", "load_balancer")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    LOAD_BALANCER_FIELD_NUMBER: _ClassVar[int]
    account: str
    load_balancer: str
    def __init__(self, account: _Optional[str] = ..., load_balancer: _Optional[str] = ...) -> None: ...

class ListTunnelsResponse(_message.Message):
    __slots__ = ("tunnels",)
    TUNNELS_FIELD_NUMBER: _ClassVar[int]
    tunnels: _containers.RepeatedCompositeFieldContainer[Tunnel]
    def __init__(self, tunnels: _Optional[_Iterable[_Union[Tunnel, _Mapping]]] = ...) -> None: ...
