"""When the operator issues, renews and retires certificates: pure decisions on what the
certificates say and the clock (no I/O, no cryptography; `certificates.describe` feeds them).

The trust state of a cluster (`Authority`) is the CA that signs (`current`), any CA still in the
trust bundle beside it (`previous`, during a CA renewal), and when `current` joined the bundle.
A pod reads its certificate and the bundle from Secrets mounted as files; the kubelet refreshes
them within about a minute, so every step that needs the others to have seen the last one waits
`Policy.propagation` after it.

A CA is renewed one of two ways (`Policy.ca_expiration`, or a renewal the user asks for):
`renew-certificate` makes the CA certificate again with the same key, so whoever trusts the old
certificate (a running Kafka client reads its truststore once) verifies every certificate signed
before or after, until the old certificate expires; `replace-key` makes a CA with a new key, which
a client trusts only once it has re-read the bundle. `Certificate.issuer` names the first CA of
the bundle that verifies a certificate: callers put the signing CA first, so after a
`renew-certificate` every certificate reads as the current CA's, and `Authority.current_since`
tells those signed before the renewal.

Guarantees (a renewal never leaves a pod presenting a certificate its peers do not trust yet):
* `ca_action` creates a CA when there is none (the operator's own CA only); renews it
  `ca_renew_before` before it expires, or when `requested`, by adding the new CA certificate beside
  the old one (the user's CA is the user's to renew); drops the old one only once every leaf
  certificate is signed by the current CA after it was made and was issued `propagation` ago (or
  once the old CA has expired: nothing signed by it is valid any more).
* `leaf_reason` re-issues a certificate that is missing, names other DNS names, is signed by no
  CA of the bundle, is signed by a previous CA's key once the new one has been in the bundle for
  `propagation`, was signed before the current CA certificate was made (a `renew-certificate`:
  at once, as every peer already verifies it), or expires within `renew_before` (unless a new one
  would expire no later, as when a user's CA caps it). None: keep it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

# kubelet's sync period (1 min by default) plus its Secret cache, with a margin.
PROPAGATION: Final = dt.timedelta(minutes=3)
# A renewal that would not extend a certificate by at least this much is not worth a new key.
MIN_EXTENSION: Final = dt.timedelta(hours=1)

CaRenewal = Literal["renew-certificate", "replace-key"]
CaAction = Literal["create", "renew-certificate", "replace-key", "drop-previous"]


@dataclass(frozen=True)
class Certificate:
    """What the decisions need of an X.509 certificate."""

    fingerprint: str
    issuer: str  # fingerprint of the bundle's CA that signed it, "" when none did
    not_before: dt.datetime
    not_after: dt.datetime
    dns_names: frozenset[str] = frozenset()
    issued_at: dt.datetime | None = None  # when the operator made it (not_before may be backdated)

    @property
    def made_at(self) -> dt.datetime:
        return self.issued_at or self.not_before


@dataclass(frozen=True)
class Policy:
    validity: dt.timedelta = dt.timedelta(days=365)
    renew_before: dt.timedelta = dt.timedelta(days=30)
    ca_validity: dt.timedelta = dt.timedelta(days=1825)
    ca_renew_before: dt.timedelta = dt.timedelta(days=180)
    operator_ca: bool = True  # the operator makes and renews the CA (issuer: operator)
    ca_expiration: CaRenewal = "renew-certificate"  # how the CA is renewed when it nears its end
    propagation: dt.timedelta = PROPAGATION


@dataclass(frozen=True)
class Authority:
    current: Certificate | None
    previous: tuple[Certificate, ...] = ()
    current_since: dt.datetime | None = None  # when `current` joined the trust bundle

    def predates_current(self, leaf: Certificate) -> bool:
        """`leaf` was signed before `current` joined the bundle (certificate times are whole
        seconds: so is the comparison)."""
        return self.current_since is not None and leaf.made_at < self.current_since.replace(microsecond=0)

    def settled(self, now: dt.datetime, propagation: dt.timedelta) -> bool:
        """Every pod has had time to see `current` in its trust bundle."""
        return self.current_since is None or now >= self.current_since + propagation


def ca_action(
    authority: Authority,
    leaves: Iterable[Certificate | None],
    policy: Policy,
    now: dt.datetime,
    requested: CaRenewal | None = None,
) -> CaAction | None:
    """What to do with the CA now; `requested` is a renewal the user asked for (waits for a
    renewal under way to finish)."""
    current = authority.current
    if current is None:
        return "create" if policy.operator_ca else None
    if authority.previous:
        return "drop-previous" if _previous_retires(authority, current, leaves, policy, now) else None
    if not policy.operator_ca:
        return None
    if requested is not None:
        return requested
    if now >= current.not_after - policy.ca_renew_before:
        return policy.ca_expiration
    return None


def _previous_retires(
    authority: Authority,
    current: Certificate,
    leaves: Iterable[Certificate | None],
    policy: Policy,
    now: dt.datetime,
) -> bool:
    """The previous CAs may leave the bundle: expired, or every leaf is from the current CA
    certificate and has reached its pod."""
    if any(ca.not_after <= now for ca in authority.previous):
        return True
    return all(
        leaf is not None
        and leaf.issuer == current.fingerprint
        and not authority.predates_current(leaf)
        and now >= leaf.made_at + policy.propagation
        for leaf in leaves
    )


def leaf_reason(  # noqa: PLR0911  one return per reason, in the order they are checked
    leaf: Certificate | None,
    dns_names: frozenset[str],
    authority: Authority,
    policy: Policy,
    now: dt.datetime,
) -> str | None:
    """Why the certificate must be issued again, or None to keep it."""
    current = authority.current
    if current is None:
        return None  # nothing to sign with yet
    if leaf is None:
        return "there is none"
    if leaf.dns_names != dns_names:
        return "its DNS names changed"
    if not leaf.issuer:
        return "no CA of the trust bundle signed it"
    if leaf.issuer != current.fingerprint:
        if authority.settled(now, policy.propagation):
            return "the previous CA signed it (CA renewal)"
        return None
    if authority.predates_current(leaf):
        return "the CA certificate was renewed after it was signed"
    if now >= leaf.not_after - policy.renew_before:
        renewed_until = min(now + policy.validity, current.not_after)
        if renewed_until >= leaf.not_after + MIN_EXTENSION:
            return f"it expires at {leaf.not_after:%Y-%m-%dT%H:%M:%SZ}"
    return None
