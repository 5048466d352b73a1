"""One GPU of a NodeGPUReport as decisions read it: a frozen record, not a dict.

At 10,000 nodes of 8 GPUs the cache holds 80,000 of these. As a dict each was 272 bytes
(a 6-key table plus its object); this record is 72, decoded by msgspec straight from the watch
event (``sync/slim.py``) with the telemetry fields skipped. Reports read without the cache (the
CLI's one LIST, a test's dict) are converted once by :func:`of_status`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import msgspec

# NVML's GPU UUID: kept as its 128-bit number (44 bytes, not a 89-byte string: 80,000 GPUs at
# 10,000 nodes) and written back exactly; any other form is kept as the string it was.
_UUID = re.compile(r"GPU-([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})")


class Ecc(TypedDict, total=False):
    volatile: int  # since the driver loaded; the aggregate counter is not read


class Gpu(msgspec.Struct, frozen=True, gc=False, rename="camel", omit_defaults=True):
    """``index``, ``uuid``, ``state`` (ok, lost, error) and ``error`` as the agent wrote them;
    ``mig_mode`` {current, pending}, ``ecc_uncorrected`` {volatile} and ``page_retirement``
    {mechanism, pending, failed} are small read-only mappings, shared between equal GPUs.
    The uuid is held as ``uid`` (:func:`compact`); read it as ``uuid``."""

    index: int | None = None
    uid: int | str | None = msgspec.field(default=None, name="uuid")
    state: str | None = None
    error: str | None = None
    mig_mode: Mapping[str, Any] | None = None
    ecc_uncorrected: Ecc | None = None
    page_retirement: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # Decoded or built, the uuid is held compact: a heartbeat's GPUs then compare equal
        # to the cached ones (sync/slim.report_heartbeat) without a copy.
        if type(self.uid) is str:
            msgspec.structs.force_setattr(self, "uid", compact(self.uid))

    @property
    def uuid(self) -> str | None:
        if type(self.uid) is int:
            h = f"{self.uid:032x}"
            return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        return self.uid if isinstance(self.uid, str) else None

    def plain(self) -> dict[str, Any]:
        """As the agent wrote it (JSON-ready), the uuid as text."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        if self.uid is not None:
            out["uuid"] = self.uuid
        return out

    @property
    def name(self) -> str:
        """How a message names it: ``GPU 3 (GPU-8a1c...)``."""
        index = "?" if self.index is None else self.index
        return f"GPU {index}" + (f" ({self.uuid})" if self.uuid else "")

    @property
    def mig_current(self) -> Any:
        return (self.mig_mode or {}).get("current")

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def compact(uuid: object) -> int | str | None:
    """An NVML GPU UUID as its number; another string as it is; anything else None."""
    if type(uuid) is int:
        return uuid
    if not isinstance(uuid, str):
        return None
    m = _UUID.fullmatch(uuid)
    return int("".join(m.groups()), 16) if m else uuid


def _typed(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def from_mapping(gpu: Mapping[str, Any]) -> Gpu:
    """A GPU entry read as plain JSON: each field kept where its type fits (a field that does
    not is read as absent, as the dict reads did: ``get`` of a wrong type found nothing useful)."""
    ecc = gpu.get("eccUncorrected")
    volatile = ecc.get("volatile") if isinstance(ecc, Mapping) else None
    return Gpu(
        index=_typed(gpu.get("index"), int),
        uid=_typed(gpu.get("uuid"), str),
        state=_typed(gpu.get("state"), str),
        error=_typed(gpu.get("error"), str),
        mig_mode=_typed(gpu.get("migMode"), Mapping),
        ecc_uncorrected=None if volatile is None else Ecc(volatile=volatile),
        page_retirement=_typed(gpu.get("pageRetirement"), Mapping),
    )


def of_status(status: Mapping[str, Any] | None) -> Sequence[Gpu]:
    """A report status's GPUs as records, whether it came from the cache or as plain JSON."""
    gpus = (status or {}).get("gpus") or []
    if not isinstance(gpus, list | tuple):
        return ()
    if all(type(g) is Gpu for g in gpus):
        return gpus
    out: list[Gpu] = []
    for gpu in gpus:
        if isinstance(gpu, Gpu):
            out.append(gpu)
        elif isinstance(gpu, Mapping):
            out.append(from_mapping(gpu))
    return out
