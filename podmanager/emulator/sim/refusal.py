"""A request an emulated Google service refuses, with the gRPC status it answers (the Cloud
TPU API's malformed names, Secret Manager's missing secrets, ...)."""

from __future__ import annotations

import grpc


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
