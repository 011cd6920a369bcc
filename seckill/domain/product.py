"""What the sale page shows of an activity's product: a description, an image and a price.

Optional and never used by a sale decision. Validated strictly because the page puts them in
front of shoppers: the image is an https URL or a path on the same site (never ``javascript:``,
``data:`` or another site's plain http), the price is whole cents in an ISO 4217 currency.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from seckill.domain import errors

MAX_DESCRIPTION = 2000
MAX_IMAGE_URL = 2048
MAX_PRICE = 1_000_000_000_00  # cents: a billion in any currency

# The active ISO 4217 codes (2026), so that a typo ("EUT") is refused rather than shown.
_CODES = """
AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP
BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP
GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR
KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK
MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR
SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS
UAH UGX USD UYU UZS VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG
"""
CURRENCIES = frozenset(_CODES.split())

# The same patterns are in the OpenAPI document (seckill/web/openapi.json), so that a client
# can check a body before sending it. URLs: printable ASCII but space " ' < > \ (anything else
# is percent-encoded); the host a plain DNS name or address.
DESCRIPTION = re.compile(r"[^\x00-\x08\x0b-\x1f\x7f]*")
_URL_CHAR = r"""[!#-&(-;=?-\[\]-~]"""
IMAGE_URL = re.compile(
    rf"https://[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{{1,5}})?(?:[/?#]{_URL_CHAR}*)?"
    rf"|/(?:[!#-&(-.0-;=?-\[\]-~]{_URL_CHAR}*)?")

@dataclasses.dataclass(frozen=True, slots=True)
class Product:
    """The shopper-facing fields of an activity; every one optional."""

    description: str | None = None
    image_url: str | None = None
    price_amount: int | None = None  # cents
    price_currency: str | None = None

    def body(self) -> dict[str, Any]:
        """The fields an activity view adds (only those that are set)."""
        body: dict[str, Any] = {}
        if self.description is not None:
            body["description"] = self.description
        if self.image_url is not None:
            body["image_url"] = self.image_url
        if self.price_amount is not None:
            body["price"] = {"amount": self.price_amount, "currency": self.price_currency}
        return body


FIELDS = frozenset({"description", "image_url", "price"})


def parse(body: dict[str, Any]) -> Product:
    """The product fields of an operator's activity body; BadRequest naming the field."""
    amount, currency = _price(body["price"]) if body.get("price") is not None else (None, None)
    return Product(
        description=_description(body.get("description")),
        image_url=_image_url(body.get("image_url")),
        price_amount=amount,
        price_currency=currency,
    )


def _description(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_DESCRIPTION \
            or not DESCRIPTION.fullmatch(value):
        raise errors.BadRequest(
            f"description must be a string of at most {MAX_DESCRIPTION} characters, without "
            "control characters (new lines and tabs are fine)", field="description")
    return value


def _image_url(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_IMAGE_URL \
            or not IMAGE_URL.fullmatch(value):
        raise errors.BadRequest(
            f"image_url must be an https:// URL or a path on this site starting with / (at "
            f"most {MAX_IMAGE_URL} characters; no spaces, quotes, < > or \\)",
            field="image_url")
    return value


def _price(value: Any) -> tuple[int, str]:
    if not isinstance(value, dict) or set(value) != {"amount", "currency"}:
        raise errors.BadRequest('price must be {"amount": cents, "currency": "EUR"}',
                                field="price")
    amount, currency = value["amount"], value["currency"]
    if not isinstance(amount, int) or isinstance(amount, bool) or not 0 <= amount <= MAX_PRICE:
        raise errors.BadRequest(f"price.amount must be whole cents between 0 and {MAX_PRICE}",
                                field="price")
    if not isinstance(currency, str) or currency not in CURRENCIES:
        raise errors.BadRequest("price.currency must be an ISO 4217 code such as EUR or USD",
                                field="price")
    return amount, currency
