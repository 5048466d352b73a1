"""Errors raised by gitops-gpu.

GitopsGpuError            every error we raise on purpose; carries a one-line fix
├── BuildError            building the testbed binaries failed
├── TestbedError          starting/stopping the local control plane failed
├── FleetError            the fleet repo cannot be read (file, line, column, field)
├── SourceError           a git remote cannot be reached or was rewritten
├── KubeError             the Kubernetes API refused or failed a request
└── StatusBackendError    a commit-status backend failed
"""

from __future__ import annotations


class GitopsGpuError(Exception):
    """Base error: ``str()`` is the message, ``fix`` says what to do about it."""

    def __init__(self, message: str, *, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix

    def __str__(self) -> str:
        msg = super().__str__()
        return f"{msg}\n  fix: {self.fix}" if self.fix else msg


class BuildError(GitopsGpuError):
    pass


class TestbedError(GitopsGpuError):
    __test__ = False  # not a pytest test class


class FleetError(GitopsGpuError):
    def __init__(
        self,
        message: str,
        *,
        file: str = "",
        line: int = 0,
        column: int = 0,
        field: str = "",
        fix: str = "",
    ) -> None:
        self.file, self.line, self.column, self.field = file, line, column, field
        where = file
        if line:
            where += f":{line}" + (f":{column}" if column else "")
        prefix = f"{where}: " if where else ""
        fld = f"{field}: " if field else ""
        super().__init__(f"{prefix}{fld}{message}", fix=fix)


class SourceError(GitopsGpuError):
    pass


class KubeError(GitopsGpuError):
    pass


class StatusBackendError(GitopsGpuError):
    pass
