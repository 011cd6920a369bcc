"""The shop's identity provider (``SECKILL_JWT_JWKS_*``) as the edge's identity filter uses it:
its keys (``edge.jwks``), saved in Redis for a restart while it is down, followed from start."""

from __future__ import annotations

from edge.issuer import Issuer
from edge.jwks import IssuerKeys
from seckill.config import Settings
from seckill.services import Services
from seckill.store.sale.admission.issuer_keys import IssuerKeyCopy


def buyers_issuer(settings: Settings, services: Services) -> Issuer | None:
    """The identity provider whose keys verify buyers' tokens, its set being fetched from now
    on (the first token waits for the first reading); None when none is configured."""
    found = settings.issuer
    if found is None:
        return None
    keys = IssuerKeys(found.jwks_url, found.jwks_file, found.algorithms,
                      IssuerKeyCopy(services.client, services.keys), found.refresh_min)
    services.closers.append(keys.close)
    keys.follow(wait=0)
    return Issuer(keys, found.issuer, found.audience, frozenset(found.algorithms),
                  found.user_claim)
