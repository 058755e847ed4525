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
