"""The vendored axe-core (``tests/vendor/axe-core``) is the release its README records: the
version inside ``axe.min.js`` is ``VERSION``, the file's sha256 is ``SHA256``, the licence is
there. Nothing is fetched when the tests run; updating is the README's steps."""

from __future__ import annotations

import base64
import hashlib
import re

from tests.axe_check import AXE_DIR, axe_source, axe_version


def test_the_vendored_axe_is_the_recorded_version() -> None:
    source = axe_source()
    assert source.startswith(f"/*! axe v{axe_version()}\n")
    assert re.findall(r'axe\.version="([^"]+)"', source) == [axe_version()]
    readme = (AXE_DIR / "README.md").read_text(encoding="utf-8")
    assert f"axe-core@{axe_version()}" in readme
    assert re.search(r"`sha512-[A-Za-z0-9+/]{86}==`", readme), "the package's integrity"


def test_the_vendored_file_is_unchanged() -> None:
    digest = hashlib.sha256((AXE_DIR / "axe.min.js").read_bytes()).digest()
    recorded = (AXE_DIR / "SHA256").read_text(encoding="ascii").strip()
    assert f"sha256-{base64.b64encode(digest).decode()}" == recorded
    assert recorded in (AXE_DIR / "README.md").read_text(encoding="utf-8")
    licence = (AXE_DIR / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("Mozilla Public License, version 2.0")
