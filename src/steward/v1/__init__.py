"""Generated code of protos/steward/v1 (messages, gRPC stubs, typing stubs).

Do not edit: run ``make protos``. ``make lint`` fails when these files are stale.
"""
