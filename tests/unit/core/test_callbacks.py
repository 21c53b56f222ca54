"""core/callbacks.py: which callback URLs and addresses are refused, the allow-list, and the
signature scheme receivers verify."""

from __future__ import annotations

import ast
import hashlib
import hmac
import ipaddress
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from voicelane.common.errors import ConfigError, InvalidInputError
from voicelane.core.callbacks import (
    DEV_SIGNING_SECRET,
    AllowList,
    addresses,
    callback_destination,
    check_callback_url,
    first_refusal,
    forbidden_reason,
    literal_ip,
    master_secret,
    refusal,
    sign,
    tenant_secret,
    verify,
)

ip = ipaddress.ip_address
ROOT = Path(__file__).resolve().parents[3]

# ---- URLs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/voicelane",
        "http://hooks.example.com:8080/a/b?token=x&y=1",
        "HTTPS://Hooks.Example.com/",
        "http://[2606:4700::1]/hook",
        "http://93.184.215.14/hook",
    ],
)
def test_good_urls_pass_unchanged(url: str) -> None:
    assert check_callback_url(url) == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("file:///etc/passwd", "http:// or https://"),
        ("gopher://example.com/", "http:// or https://"),
        ("ftp://example.com/", "http:// or https://"),
        ("example.com/hook", "http:// or https://"),
        ("http:///hook", "no host"),
        ("http://", "no host"),
        ("http://user:pass@example.com/", "credentials"),
        ("http://user@example.com/", "credentials"),
        ("http://:pass@example.com/", "credentials"),
        ("http://example.com\\@127.0.0.1/", "backslash"),
        ("http://example.com/#frag", "fragment"),
        ("http://example.com/#", "fragment"),
        ("http://example.com/ hook", "spaces"),
        ("http://example.com/\nhook", "control"),
        ("http://example.com:99999/", "not a valid URL"),
        ("http://example.com:http/", "not a valid URL"),
        ("http://example.com:0/", "port 0"),
        ("https://example.com/" + "a" * 2048, "longer than 2048"),
    ],
)
def test_bad_urls_are_refused_naming_the_field(url: str, says: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        check_callback_url(url)
    assert caught.value.field == "callback_url"
    assert caught.value.message.startswith("callback_url")
    assert says in caught.value.message
    assert "\n" not in caught.value.message
    assert "pass" not in caught.value.message  # credentials are never echoed


def test_a_url_of_exactly_2048_characters_passes() -> None:
    url = "https://example.com/" + "a" * (2048 - len("https://example.com/"))
    assert check_callback_url(url) == url


def test_destination_is_the_host_and_port() -> None:
    assert callback_destination("https://Example.COM/x") == ("example.com", 443)
    assert callback_destination("http://example.com/x") == ("example.com", 80)
    assert callback_destination("http://example.com.:81/x") == ("example.com", 81)
    assert callback_destination("http://[::1]:9/x") == ("::1", 9)


# ---- addresses -------------------------------------------------------------------------------


FORBIDDEN: list[tuple[str, str]] = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "cloud metadata"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("100.64.0.1", "shared"),
    ("100.127.255.254", "shared"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("192.0.0.8", "reserved"),
    ("192.0.2.1", "reserved"),
    ("198.18.0.1", "reserved"),
    ("fd00:ec2::254", "cloud metadata"),
    ("fc00::1", "unique local"),
    ("fd12:3456::1", "unique local"),
    ("fec0::1", "site-local"),
    ("2001:db8::1", "reserved"),
    ("100::1", "reserved"),
    ("64:ff9b:1::a00:1", "reserved"),
    # IPv4 inside IPv6: judged by the IPv4 address.
    ("::ffff:127.0.0.1", "loopback (IPv4-mapped IPv6)"),
    ("::ffff:7f00:1", "loopback (IPv4-mapped IPv6)"),
    ("::ffff:169.254.169.254", "cloud metadata"),
    ("::ffff:10.0.0.1", "private (IPv4-mapped IPv6)"),
    ("::127.0.0.1", "loopback (IPv4-compatible IPv6)"),
    ("::10.0.0.1", "private (IPv4-compatible IPv6)"),
    ("::ffff:0:127.0.0.1", "loopback (IPv4-translated IPv6)"),
    ("64:ff9b::127.0.0.1", "loopback (NAT64 IPv6)"),
    ("64:ff9b::169.254.169.254", "cloud metadata"),
    ("64:ff9b::192.168.0.1", "private (NAT64 IPv6)"),
    ("2002:7f00:1::", "loopback (6to4 IPv6)"),
    ("2002:a9fe:a9fe::1", "cloud metadata"),
    ("::8.8.8.8", "reserved (IPv4-compatible IPv6)"),
]


@pytest.mark.parametrize(("address", "says"), FORBIDDEN)
def test_every_forbidden_class_is_named(address: str, says: str) -> None:
    reason = forbidden_reason(ip(address))
    assert reason is not None and says in reason, (address, reason)


@pytest.mark.parametrize(
    "address",
    [
        "93.184.215.14",
        "8.8.8.8",
        "1.1.1.1",
        "172.32.0.1",  # just past 172.16/12
        "100.128.0.1",  # just past 100.64/10
        "169.255.0.1",
        "2606:4700:4700::1111",
        "2a00:1450:4001:82b::200e",
        "::ffff:8.8.8.8",  # mapped, of a public address
        "64:ff9b::8.8.8.8",  # NAT64 of a public address
        "2002:808:808::1",  # 6to4 of a public address
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert forbidden_reason(ip(address)) is None


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("0x7f000001", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
        ("::1", "::1"),
    ],
)
def test_numeric_spellings_are_judged_by_the_address_they_spell(
    spelling: str, address: str
) -> None:
    assert literal_ip(spelling) == ip(address)
    # What the system's resolver makes of the spelling (numeric: no DNS query) agrees.
    bare = spelling.strip("[]")
    resolved = addresses(socket.getaddrinfo(bare, 80, type=socket.SOCK_STREAM))
    assert resolved == [ip(address)]
    assert forbidden_reason(resolved[0]) is not None
    assert refusal(spelling, resolved[0], AllowList()) is not None


@pytest.mark.parametrize("host", ["example.com", "1e100.net", "123.example", "deadbeef", ""])
def test_host_names_are_not_literals(host: str) -> None:
    assert literal_ip(host) is None


def test_addresses_of_getaddrinfo_results_are_distinct_and_in_order() -> None:
    infos = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", 80)),
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 80, 0, 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", 80)),
    ]
    assert addresses(infos) == [ip("10.0.0.1"), ip("::1")]


# ---- allow-list ------------------------------------------------------------------------------


def test_the_allow_list_takes_hosts_addresses_and_networks() -> None:
    allow = AllowList.parse(" hooks.internal , 10.1.2.0/24,127.0.0.1, [::1], fd00::/8,,Recv. ")
    assert allow.hosts == {"hooks.internal", "recv"}
    assert {str(n) for n in allow.networks} == {
        "10.1.2.0/24",
        "127.0.0.1/32",
        "::1/128",
        "fd00::/8",
    }
    assert allow.allows("hooks.internal", ip("10.9.9.9"))
    assert allow.allows("HOOKS.internal.", ip("192.168.0.1"))
    assert allow.allows("RECV", ip("127.0.0.2"))
    assert allow.allows("anything", ip("10.1.2.200"))
    assert allow.allows("anything", ip("::ffff:127.0.0.1"))  # mapped form of an allowed one
    assert allow.allows("anything", ip("fd12::1"))
    assert not allow.allows("anything", ip("10.1.3.1"))
    assert not allow.allows("hooks.internal.evil.com", ip("10.9.9.9"))
    assert not allow.allows("anything", ip("127.0.0.2"))


def test_an_empty_allow_list_allows_nothing() -> None:
    allow = AllowList.parse("")
    assert allow == AllowList()
    assert not allow.allows("localhost", ip("127.0.0.1"))


@pytest.mark.parametrize("entry", ["http://hooks.internal", "10.0.0.0/33", "a b", "host:8080"])
def test_a_bad_allow_list_entry_is_a_config_error(entry: str) -> None:
    with pytest.raises(ConfigError, match="callback_allow"):
        AllowList.parse(f"ok.example, {entry}")


def test_refusals_honour_the_allow_list_and_say_why_in_one_line() -> None:
    none = AllowList()
    message = refusal("hooks.example.com", ip("10.0.0.5"), none)
    assert message is not None and "\n" not in message
    assert message.startswith("callback_url: hooks.example.com resolves to 10.0.0.5")
    assert "private" in message and "VOICELANE_CALLBACK_ALLOW" in message
    literal = refusal("169.254.169.254", ip("169.254.169.254"), none)
    assert literal is not None and literal.startswith("callback_url: 169.254.169.254 is")
    mapped = refusal("[::ffff:127.0.0.1]", ip("::ffff:127.0.0.1"), none)
    assert mapped is not None and mapped.startswith("callback_url: [::ffff:127.0.0.1] is")
    spelled = refusal("0x7f000001", ip("127.0.0.1"), none)
    assert spelled is not None and "0x7f000001 resolves to 127.0.0.1, which is loopback" in spelled
    assert refusal("hooks.example.com", ip("8.8.8.8"), none) is None
    allowed = AllowList.parse("10.0.0.0/8")
    assert refusal("hooks.example.com", ip("10.0.0.5"), allowed) is None
    mixed = [ip("8.8.8.8"), ip("127.0.0.1")]
    found = first_refusal("rebind.example", mixed, none)
    assert found is not None and "127.0.0.1" in found
    assert first_refusal("rebind.example", mixed, AllowList.parse("rebind.example")) is None
    assert first_refusal("public.example", [ip("8.8.8.8"), ip("1.1.1.1")], none) is None


# ---- signatures ------------------------------------------------------------------------------

SECRET = "whsec-test-0123456789"
BODY = b'{"job":{"id":"j1","state":"done"}}'
NOW = 1_767_000_000


def test_tenant_secrets_are_derived_per_tenant() -> None:
    expected = hmac.new(b"master", b"voicelane-callback:acme", hashlib.sha256).hexdigest()
    assert tenant_secret("master", "acme") == expected
    assert tenant_secret("master", "acme") != tenant_secret("master", "other")
    assert tenant_secret("master", "acme") != tenant_secret("master2", "acme")
    assert len(tenant_secret("master", "acme")) == 64


def test_the_master_secret_is_the_configured_one_or_the_dev_one_in_dev_mode() -> None:
    assert master_secret("s3cret", dev_mode=False) == "s3cret"
    assert master_secret("s3cret", dev_mode=True) == "s3cret"
    assert master_secret(None, dev_mode=True) == DEV_SIGNING_SECRET
    assert master_secret("", dev_mode=True) == DEV_SIGNING_SECRET
    assert master_secret(None, dev_mode=False) is None


def test_the_signature_is_stripe_like_and_recomputable() -> None:
    header = sign(SECRET, BODY, NOW)
    digest = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert header == f"t={NOW},v1={digest}"


def test_verify_accepts_a_good_signature() -> None:
    header = sign(SECRET, BODY, NOW)
    assert verify(SECRET, BODY, header, now=NOW)
    assert verify(SECRET, BODY, header, now=NOW + 299)
    assert verify(SECRET, BODY, header, now=NOW - 299)  # a receiver's clock a bit behind
    assert verify(SECRET, BODY, f"v1=0000,{header.replace(',', ' , ')}", now=NOW)


@pytest.mark.parametrize(
    "case",
    [
        "tampered body",
        "wrong secret",
        "stale",
        "future",
        "no v1",
        "no t",
        "bad t",
        "non-ASCII v1",
        "garbage",
    ],
)
def test_verify_refuses_anything_else(case: str) -> None:
    header = sign(SECRET, BODY, NOW)
    body, secret, now = BODY, SECRET, float(NOW)
    if case == "tampered body":
        body = BODY.replace(b"done", b"fail")
    elif case == "wrong secret":
        secret = "whsec-other"
    elif case == "stale":
        now = NOW + 301
    elif case == "future":
        now = NOW - 301
    elif case == "no v1":
        header = f"t={NOW}"
    elif case == "no t":
        header = header.split(",")[1]
    elif case == "bad t":
        header = header.replace(f"t={NOW}", "t=１７６７")  # non-ASCII digits
    elif case == "non-ASCII v1":
        header = f"t={NOW},v1=é"
    else:
        header = "t=,v1=é,=,,"
    assert not verify(secret, body, header, now=now)


def test_verify_uses_the_clock_by_default() -> None:
    now = int(time.time())
    assert verify(SECRET, BODY, sign(SECRET, BODY, now))
    assert not verify(SECRET, BODY, sign(SECRET, BODY, now - 3600))
    assert verify(SECRET, BODY, sign(SECRET, BODY, now - 3600), tolerance_s=7200)


def documented_verify() -> Callable[[str, bytes, str], bool]:
    """The receivers' snippet of docs/api.md (Callbacks), run as written."""
    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Callbacks") :]
    snippet = section[section.index("```python\n") + len("```python\n") :]
    namespace: dict[str, object] = {}
    exec(snippet[: snippet.index("```")], namespace)
    function = namespace["verify"]
    assert callable(function)
    return cast(Callable[[str, bytes, str], bool], function)


def test_the_documented_receiver_snippet_verifies_like_the_module() -> None:
    check = documented_verify()
    now = int(time.time())
    header = sign(SECRET, BODY, now)
    assert check(SECRET, BODY, header)
    assert not check(SECRET, BODY + b" ", header)
    assert not check("whsec-other", BODY, header)
    assert not check(SECRET, BODY, sign(SECRET, BODY, now - 301))
    assert not check(SECRET, BODY, f"t={now}")
    assert not check(SECRET, BODY, f"t={now},v1=é")


def test_the_module_imports_the_standard_library_and_core_errors_only() -> None:
    tree = ast.parse((ROOT / "core" / "callbacks.py").read_text(encoding="utf-8"))
    modules = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    modules |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    ours = {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names}
    assert ours == {"voicelane.common.errors"}, ours
