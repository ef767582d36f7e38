"""gRPC server reflection as both ``grpc.reflection.v1`` and ``grpc.reflection.v1alpha``.

Current clients (grpcurl, grpcui, Postman, the Go and Java reflection clients) ask for
``grpc.reflection.v1`` first and fall back to ``v1alpha``; grpcio-reflection serves only
``v1alpha``. The two versions are the same protocol: ``v1`` was ``v1alpha`` renamed, with
every message and field number unchanged. So one servicer answers both: the ``v1``
method reads and writes its messages with the ``v1alpha`` classes, byte for byte the
same on the wire, and the ``v1`` file descriptor (``v1alpha``'s under its new package)
is added to the descriptor pool so that a client can describe the ``v1`` service too.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2

__all__ = ["V1ALPHA_SERVICE_NAME", "V1_SERVICE_NAME", "enable_reflection"]

V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
"""``grpc.reflection.v1alpha.ServerReflection``."""
V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
_V1_PACKAGE = "grpc.reflection.v1"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """Add ``grpc/reflection/v1/reflection.proto`` to ``pool`` (once): ``v1alpha``'s file
    with its package and name changed, its type references following."""
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    v1alpha_pb2.DESCRIPTOR.CopyToProto(proto)
    old = f".{proto.package}."
    proto.name = _V1_FILE
    proto.package = _V1_PACKAGE
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = f".{_V1_PACKAGE}." + field.type_name[len(old) :]
    for service in proto.service:
        for method in service.method:
            method.input_type = f".{_V1_PACKAGE}." + method.input_type[len(old) :]
            method.output_type = f".{_V1_PACKAGE}." + method.output_type[len(old) :]
    proto.options.ClearField("java_package")
    pool.Add(proto)


def enable_reflection(
    service_names: Iterable[str],
    server: grpc.aio.Server,
    pool: descriptor_pool.DescriptorPool | None = None,
) -> None:
    """Serve reflection of ``service_names`` (and of both reflection services) on
    ``server`` as ``grpc.reflection.v1`` and ``grpc.reflection.v1alpha``."""
    pool = pool or descriptor_pool.Default()
    _add_v1_descriptor(pool)
    names = (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    servicer = reflection.aio.ReflectionServicer(names, pool=pool)
    for service in (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME):
        handler = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=v1alpha_pb2.ServerReflectionRequest.FromString,
            response_serializer=v1alpha_pb2.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler}),)
        )
