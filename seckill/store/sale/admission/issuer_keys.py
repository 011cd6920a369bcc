"""The last good key set of the shop's identity provider, kept in Redis for the deployment.

Each gateway process fetches the provider's JWKS itself (``edge.jwks``); what it fetched last
is saved here, so that a gateway that starts while the provider is down verifies buyers' tokens
with the keys every instance had (the edge's ``KeyCopy``). One hash under the deployment's
prefix, field = the JWKS URL: a changed URL never starts from another provider's keys.
"""

from __future__ import annotations

from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace


class IssuerKeyCopy:
    """The saved key sets, by JWKS URL (``edge.jwks.KeyCopy``)."""

    def __init__(self, client: Client, keys: KeySpace) -> None:
        self.client = client
        self.key = keys.issuer_keys()

    def load(self, source: str) -> str | None:
        """The key set last saved for ``source``; None when there is none."""
        found = self.client.hget(self.key, source)
        return None if found is None else str(found)

    def save(self, source: str, document: str) -> None:
        """Keep ``document`` as the last good key set of ``source``."""
        self.client.hset(self.key, source, document)
