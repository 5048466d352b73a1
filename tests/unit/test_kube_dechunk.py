"""The watch de-chunker (kube._body) against crafted chunk boundaries: whatever way the bytes of
a chunked body arrive (a chunk split mid-size line, mid-CRLF, many chunks in one read), the
pieces it yields join to the body, and the last chunk ends the stream."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import urllib3
from hypothesis import given, settings
from hypothesis import strategies as st

from gitops_gpu import kube


class _Reads:
    """A buffered reader whose read1 hands out the given pieces, then b"" (closed)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = iter(pieces)
        self.raw = SimpleNamespace(_sock=None)  # nothing more waiting: one piece per read

    def read1(self, _n: int) -> bytes:
        return next(self._pieces, b"")


def _raw(pieces: list[bytes]) -> SimpleNamespace:
    return SimpleNamespace(chunked=True, _fp=SimpleNamespace(fp=_Reads(pieces)))


def _chunked(events: list[bytes], extension: bool) -> bytes:
    ext = b";name=value" if extension else b""
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(e), ext, e) for e in events)
    return body + b"0\r\n\r\n"


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


def _drain(gen: Iterator[bytes]) -> bytes:
    return b"".join(gen)


events = st.lists(st.binary(min_size=1, max_size=300).map(lambda b: b + b"\n"), max_size=12)


@settings(max_examples=400, deadline=None)
@given(events=events, cuts=st.lists(st.integers(0, 10_000), max_size=30), ext=st.booleans())
def test_any_split_of_the_body_yields_its_events(
    events: list[bytes], cuts: list[int], ext: bool
) -> None:
    pieces = _split(_chunked(events, ext), cuts)
    assert _drain(kube._body(_raw(pieces), 0)) == b"".join(events)


def test_many_chunks_in_one_read_come_out_as_one_piece() -> None:
    events = [b'{"type":"MODIFIED","n":%d}\n' % i for i in range(50)]
    out = list(kube._body(_raw([_chunked(events, False)]), 0))
    assert out == [b"".join(events)]


def test_a_body_cut_before_its_last_chunk_is_an_error() -> None:
    data = _chunked([b"one\n", b"two\n"], False)[:-5]  # the last chunk never arrives
    with pytest.raises(urllib3.exceptions.ProtocolError, match="closed mid-stream"):
        _drain(kube._body(_raw([data]), 0))


@settings(max_examples=200, deadline=None)
@given(events=events, cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_a_burst_read_in_many_pieces_yields_its_events(
    events: list[bytes], cuts: list[int]
) -> None:
    """Pieces already waiting are read together before chunks are cut (kube._readable)."""
    pieces = _split(_chunked(events, False), cuts)
    raw = _raw(pieces)
    left = list(pieces)
    reads = raw._fp.fp

    def read1(_n: int) -> bytes:
        return left.pop(0) if left else b""

    reads.read1 = read1
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kube, "_readable", lambda _sock: bool(left))
        assert _drain(kube._body(raw, 0)) == b"".join(events)
