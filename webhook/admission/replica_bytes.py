"""A review's body less its uid: the bytes two replicas' reviews share (alike but for their uid, as a
controller's pods are), for remembering what is a function of the body alone without serialising anything.

`uid_excised(body, uid)` is the body split around the first occurrence of the uid's JSON string token. Two bodies
with the same split, each decoded to its own uid, decode to the same review but for `request.uid`. Why, for a uid
of letters, digits, `-` and `_` only (a Kubernetes uid is a UUID; any other uid gives no split):

- Both bodies are the same prefix, then `"` + their uid + `"`, then the same suffix. The JSON lexer's state after
  the prefix is the same in both, and the token's characters leave it the same in both: outside a string the
  token is one whole string; inside a string after a backslash that escapes its `"`, it is part of that string
  and ends it. (Inside a string without one, its `"` would end that string and put letters or digits straight
  after it: not JSON.)
- So both decode to the same structure, but for the string the token is, or lies in. That string's position is
  the same in both; the request's uid is found at one position in both (duplicate keys included). If it is not
  that string, its bytes are the same in both: the uids are equal, and so are the bodies. If it is, it is the
  token itself (a string holding the token would hold quotes, which the uid does not), so the bodies differ only
  in the request's uid. No `{` or `[` is in the token either: the bodies hold as many brackets.
"""

from __future__ import annotations

import re

_PLAIN_UID = re.compile("[A-Za-z0-9_-]+")


def uid_excised(body: bytes, uid: str) -> tuple[bytes, bytes] | None:
    """The bytes of `body` before and after the first occurrence of `uid`'s JSON string, or None when `uid` is
    not plain (see the module's docstring) or does not occur as a plain string token."""
    if _PLAIN_UID.fullmatch(uid) is None:
        return None
    before, found, after = body.partition(b'"' + uid.encode() + b'"')
    if not found:
        return None  # the body writes it with escapes
    return before, after
