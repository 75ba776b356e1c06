"""Amazon Bedrock: the bearer token that stands in for an API key (ModelProvider=bedrock).

bedrock-runtime serves the OpenAI Responses API at https://bedrock-runtime.{region}.amazonaws.com
/openai/v1 and authenticates it with a short-term Bedrock API key: a SigV4-presigned URL for
`POST https://bedrock.amazonaws.com/?Action=CallWithBearerToken`, signed with the caller's own
credentials (here the function role's) for the region it is used in, base64-encoded behind the
prefix `bedrock-api-key-`. It carries the role's permissions, nothing more, and stops working at
the end of its X-Amz-Expires or of the credentials that signed it, whichever comes first.

AWS's `aws-bedrock-token-generator` builds exactly this string (tests/unit/test_bedrock.py
compares the two byte for byte). It is not used here: the layer ships only what the brief names
(its one dependency, botocore, comes with the runtime), and a token made here knows when it was
signed and for how long, which renewing it before it expires needs.
"""

from __future__ import annotations

import base64
import re
import threading
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from botocore import auth
from botocore.awsrequest import AWSRequest

TOKEN_HOST = "bedrock.amazonaws.com"  # noqa: S105 (the presign's host)
TOKEN_PREFIX = "bedrock-api-key-"  # noqa: S105 (a prefix, not a secret)
SIGNING_NAME = "bedrock"
# What we sign for (AWS allows up to 12 hours): a token that leaks is worthless within the hour.
TOKEN_SECONDS = 3600
# A token with less left than this is signed again: past any model call's timeout and its retries
# (the consumer's budget is minutes), so no request ever leaves with a token about to lapse.
RENEW_BEFORE = timedelta(minutes=15)


# bedrock-runtime's hosts: the regional endpoint, its FIPS twin, an interface VPC endpoint's
# names (vpce-...bedrock-runtime.<region>.vpce.amazonaws.com), the China partition's domain
RUNTIME_HOST = re.compile(
    r"^(?:[a-z0-9-]+\.)*bedrock-runtime(?:-fips)?\.[a-z0-9-]+\.(?:vpce\.)?amazonaws\.com(?:\.cn)?$"
)


def is_bedrock_runtime(url: str) -> bool:
    """True for an https URL on a bedrock-runtime host (where a bearer token may go)."""
    parts = urlsplit(url)
    return parts.scheme == "https" and bool(RUNTIME_HOST.match(parts.hostname or ""))


def runtime_url(region: str) -> str:
    """The Responses API's base URL on bedrock-runtime in `region` (commercial partition)."""
    return f"https://bedrock-runtime.{region}.amazonaws.com/openai/v1"


def bearer_token(credentials: Any, region: str, *, expires: int = TOKEN_SECONDS) -> str:
    """A short-term Bedrock API key signed with `credentials` (access_key, secret_key, token)."""
    request = AWSRequest(
        method="POST",
        url=f"https://{TOKEN_HOST}/",
        headers={"host": TOKEN_HOST},
        params={"Action": "CallWithBearerToken"},
    )
    auth.SigV4QueryAuth(credentials, SIGNING_NAME, region, expires=expires).add_auth(request)
    assert request.url  # the request's, presigned by add_auth
    presigned = request.url.removeprefix("https://") + "&Version=1"
    return TOKEN_PREFIX + base64.b64encode(presigned.encode()).decode()


class BearerToken:
    """The function role's bearer token for one region: signed on first use, reused while it has
    more than RENEW_BEFORE left, signed again after that, when asked `fresh` (the service refused
    it), or after `renew` (a SnapStart restore: new environment, new credentials). Signing is
    local (no call), so the first model call pays microseconds, not a round trip."""

    def __init__(self, region: str, *, credentials: Any = None):
        self.region = region
        self._given = credentials  # tests pass their own; else botocore's chain, on first use
        self._credentials: Any = credentials
        self._token: str | None = None
        self._renew_at = datetime.min
        self._lock = threading.Lock()

    def get(self, *, fresh: bool = False) -> str:
        # botocore's clock: the one the signature carries (botocore-stubs lack it)
        now = auth.get_current_datetime()  # type: ignore[attr-defined]
        with self._lock:
            if fresh or self._token is None or now >= self._renew_at:
                frozen = self._frozen(fresh=fresh)
                seconds = TOKEN_SECONDS
                expiry = getattr(self._credentials, "_expiry_time", None)  # refreshable ones
                if expiry is not None:  # never sign past the credentials themselves
                    left = (expiry.replace(tzinfo=None) - now).total_seconds()
                    seconds = max(1, min(seconds, int(left)))
                self._token = bearer_token(frozen, self.region, expires=seconds)
                self._renew_at = now + max(timedelta(seconds=seconds) - RENEW_BEFORE, timedelta())
            return self._token

    def _frozen(self, *, fresh: bool) -> Any:
        if self._credentials is None or (fresh and self._given is None):
            from memagent.aws import resolve_credentials  # botocore's chain, one reader of it

            self._credentials = resolve_credentials()
        if self._credentials is None:
            from memagent.errors import TransientError

            raise TransientError("no AWS credentials to sign the Bedrock token with")
        # Credentials or RefreshableCredentials: a refreshable set renews itself here
        return self._credentials.get_frozen_credentials()

    def renew(self) -> None:
        """Forget the token and the credentials (after a SnapStart restore)."""
        with self._lock:
            self._token, self._renew_at = None, datetime.min
            self._credentials = self._given
