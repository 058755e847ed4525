"""The real web server refuses an oversized upload from its headers, before the body is sent."""
from __future__ import annotations

import socket
from urllib.parse import urlparse

import pytest

pytestmark = [pytest.mark.e2e]


def test_it_answers_413_before_reading_the_body(live_stack):
    url = urlparse(live_stack.url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as s:
        s.sendall(
            b"POST /api/corpora/ HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 30000000000\r\n\r\n"
        )
        # Not one byte of the 30 GB body is sent: the answer must come from the headers alone.
        reply = b""
        while chunk := s.recv(4096):  # the server closes the connection after its answer
            reply += chunk
        reply = reply.decode()
    assert reply.startswith("HTTP/1.1 413"), reply
    assert "largest accepted" in reply


def test_a_chunked_upload_is_refused_once_its_bytes_pass_the_limit(live_stack):
    """No Content-Length (chunked transfer): the server counts the bytes as they arrive and
    answers 413 at the limit (20 MB in the test stack), before the rest is sent."""
    url = urlparse(live_stack.url)
    piece = b"a" * 1_000_000
    sent = 0
    with socket.create_connection((url.hostname, url.port), timeout=20) as s:
        s.sendall(b"POST /api/corpora/ HTTP/1.1\r\nHost: localhost\r\n"
                  b"Content-Type: multipart/form-data; boundary=x\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            while sent < 60_000_000:  # three times the limit: the answer must come before the end
                s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
                sent += len(piece)
        except OSError:
            pass  # the server closed the connection after its answer
        reply = b""
        try:
            while chunk := s.recv(4096):
                reply += chunk
        except OSError:
            pass
    text = reply.decode(errors="replace")
    assert text.startswith("HTTP/1.1 413"), text[:300]
    assert "refused at that point" in text and sent < 60_000_000
