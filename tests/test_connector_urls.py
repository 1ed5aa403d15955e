"""Connector URLs: http(s) only, never link-local or a cloud metadata service (``kernel.urls``;
PluginRegistry SPEC, URLs). A table of spellings of the same few addresses, each refused in a
registry constant, in a template's literal host, and as a deployment's base URL setting — the
last allowed only when the policy's ``allow_hosts`` names the host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from countersign.api.stack import check_base_urls
from countersign.kernel import (
    InputError,
    Policy,
    RegistryFileError,
    source_registry_dir,
    url_refusal,
)
from countersign.registry import registry_from_documents
from countersign.registry.loader import read_documents

REFUSED = [
    "file:///etc/passwd",
    "FILE://localhost/etc/passwd",
    "gopher://h:70/_x",
    "ftp://h/x",
    "javascript:alert(1)",
    "//169.254.169.254/",
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.169.254./",
    "http://2852039166/",
    "http://0xa9fea9fe/",
    "http://0xA9.0xFE.0xA9.0xFE/",
    "http://0251.0376.0251.0376/",
    "http://169.254.43518/",
    "http://169.16689662/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[::a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::]/",
    "http://[fd00:ec2::254]/latest/",
    "http://[FD00:EC2:0:0:0:0:0:254]/",
    "http://100.100.100.200/latest/meta-data/",
    "http://169.254.170.2/v2/credentials",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.GOOGLE.INTERNAL./",
    "http://metadata/",
    "http://169.254.1.1:8080/",
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://user:pw@169.254.169.254/",
    "http://example.com\\@169.254.169.254/",
    "http://169.254.169.254\t/",
    "http://%31%36%39.254.169.254/",
    "http:///path-only",
]
ALLOWED = [
    "http://127.0.0.1:5232",
    "https://calendar.example.com/dav/",
    "http://[::1]:8080/x",
    "http://169.254.169.254.nip.io.example/",  # a name: the network's to block (no DNS here)
    "http://metadata.google.internal@example.com/",  # the host is example.com
]


@pytest.mark.parametrize("url", REFUSED)
def test_refused_urls(url: str) -> None:
    assert url_refusal(url) is not None


@pytest.mark.parametrize("url", ["http://[::1", "http://[fe80::1/x", "https://[169.254.169.254]/"])
def test_a_host_that_cannot_be_read_is_a_refusal_not_an_exception(url: str) -> None:
    assert url_refusal(url) == "its host cannot be read"


@pytest.mark.parametrize("url", ALLOWED)
def test_allowed_urls(url: str) -> None:
    assert url_refusal(url) is None


def _with_url(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str]:
    connectors, intents = read_documents(source_registry_dir())
    source = next(s for s in connectors if Path(s).stem == "caldav")
    doc = {**connectors[source], "ops": {**connectors[source]["ops"]}}
    op = {**doc["ops"]["list_free_busy"]}
    op["params"] = {**op["params"], "url": spec}
    doc["ops"]["list_free_busy"] = op
    return {**connectors, source: doc}, intents, source


@pytest.mark.parametrize(
    "spec",
    [{"const": u} for u in REFUSED]
    + [{"template": u.rstrip("/") + "/{user}/calendar/"} for u in REFUSED if "://" in u]
    + [{"template": "ftp://{@caldav_base_url}/x"}, {"template": "http://{user}.evil/x"}],
)
def test_a_registry_url_constant_or_template_is_refused_naming_file_op_and_field(
    spec: dict[str, Any],
) -> None:
    connectors, intents, source = _with_url(spec)
    with pytest.raises(RegistryFileError) as e:
        registry_from_documents(connectors, intents)
    assert e.value.file == source
    assert e.value.field == "ops.list_free_busy.params.url"
    assert "caldav.list_free_busy: URL" in e.value.message


@pytest.mark.parametrize(
    "spec",
    [{"template": "{@caldav_base_url}/{user}/calendar/"}, {"arg": "user"}]
    + [{"const": u} for u in ALLOWED]
    + [{"template": "https://dav.example.com/{user}/"}],
)
def test_registry_urls_that_pass(spec: dict[str, Any]) -> None:
    connectors, intents, _ = _with_url(spec)
    registry_from_documents(connectors, intents)


def test_base_url_settings_need_the_policy_to_name_the_host() -> None:
    for url in REFUSED:
        with pytest.raises(InputError, match="connector setting caldav_base_url"):
            check_base_urls({"caldav_base_url": url}, Policy())
    check_base_urls({"caldav_base_url": "http://127.0.0.1:5232", "smtp_host": "x"}, Policy())
    named = Policy(allow_hosts=("169.254.169.254", "metadata.google.internal"))
    check_base_urls({"a_url": "http://169.254.169.254/", "b_url": "http://0xa9fea9fe/"}, named)
    check_base_urls({"c_url": "http://metadata.google.internal./x"}, named)
    with pytest.raises(InputError):
        check_base_urls({"a_url": "file:///etc/passwd"}, named)  # a scheme is never allowed
    with pytest.raises(InputError):
        check_base_urls({"a_url": "http://100.100.100.200/"}, named)  # not named


def test_allow_hosts_stays_out_of_the_signed_policy_while_empty() -> None:
    assert "allow_hosts" not in Policy().to_json()
    assert Policy().version == Policy(allow_hosts=()).version
    named = Policy(allow_hosts=("169.254.10.10",))
    assert named.to_json()["allow_hosts"] == ["169.254.10.10"]
    assert named.version != Policy().version
