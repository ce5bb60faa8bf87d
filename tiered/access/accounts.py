"""The accounts of both ports: the broker's ``plain_acl.yml`` format.

With ``tieredAclEnable=true`` every replay request must carry ``AccessKey`` and ``Signature``
extFields, signed as RocketMQ's ``AclClientRPCHook`` signs: the values of all extFields except
``Signature``, sorted by key and concatenated, then the body; HMAC-SHA1 with the account's
``secretKey``, base64. An HTTP request carries ``Authorization: Basic`` of
``accessKey:secretKey`` (:meth:`Acl.authenticate`). A request that names a topic needs ``SUB``
on it (``topicPerms`` entry, else ``defaultTopicPerm``), one that names a consumer group ``SUB``
on the group (``groupPerms``, else ``defaultGroupPerm``); ``admin: true`` accounts may read
everything. IP allow-lists (``globalWhiteRemoteAddresses``, ``whiteRemoteAddress``) are not
honoured: every request must be signed, which is stricter than the broker. Secrets are compared
in constant time, and an unknown access key costs the same comparison as a known one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import yaml

from tiered.errors import AclError
from tiered.errors import ConfigError

log = logging.getLogger(__name__)

ACCESS_KEY, SIGNATURE = "AccessKey", "Signature"
RETRY_PREFIX = "%RETRY%"
NO_CREDENTIALS, BAD_CREDENTIALS, FORBIDDEN = "no_credentials", "bad_credentials", "forbidden"
"""Why a request was refused (``AclError.reason``, the ``access_denied_total`` label)."""
_PERMS = {"DENY": set(), "ANY": {"PUB", "SUB"}, "PUB": {"PUB"}, "SUB": {"SUB"},
          "PUB|SUB": {"PUB", "SUB"}, "SUB|PUB": {"PUB", "SUB"}}  # fmt: skip


@dataclass(frozen=True)
class Account:
    """One ``accounts`` entry (``repr`` leaves the secret out)."""

    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    default_topic_perm: frozenset[str] = frozenset()
    default_group_perm: frozenset[str] = frozenset()
    topic_perms: tuple[tuple[str, frozenset[str]], ...] = ()
    group_perms: tuple[tuple[str, frozenset[str]], ...] = ()

    def may_read_topic(self, topic: str) -> bool:
        """SUB on ``topic``; a retry topic (``%RETRY%group``) is the group's, as the broker
        reads it (a consumer reads its group's retry topic with the group's permission)."""
        if topic.startswith(RETRY_PREFIX):
            return self.may_read_group(topic.removeprefix(RETRY_PREFIX))
        return self.admin or "SUB" in dict(self.topic_perms).get(topic, self.default_topic_perm)

    def may_read_group(self, group: str) -> bool:
        return self.admin or "SUB" in dict(self.group_perms).get(group, self.default_group_perm)


_NOBODY = Account("", secrets.token_hex(32))
"""Compared against when an access key is unknown, so that costs what a wrong secret costs."""


def sign(content: bytes, secret_key: str) -> str:
    """``AclSigner.calSignature``: base64 of HMAC-SHA1 over ``content``."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def request_content(ext_fields: dict[str, str], body: bytes) -> bytes:
    """``AclUtils.combineRequestContent``: the sorted extFields' values (not the signature's),
    then the body."""
    text = "".join(v for k, v in sorted(ext_fields.items()) if k != SIGNATURE)
    return text.encode("utf-8") + body


def _perm(value: object, where: str) -> frozenset[str]:
    name = str(value).strip().upper() if value is not None else "DENY"
    if name not in _PERMS:
        raise ConfigError(f"{where}={value!r} is not one of DENY, PUB, SUB, PUB|SUB, ANY")
    return frozenset(_PERMS[name])


def _entries(items: object, where: str) -> tuple[tuple[str, frozenset[str]], ...]:
    out = []
    for item in items or []:  # type: ignore[attr-defined]
        name, sep, perm = str(item).partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{where} entry {item!r} is not name=PERM (e.g. TopicA=SUB)")
        out.append((name.strip(), _perm(perm, f"{where} {name.strip()}")))
    return tuple(out)


class Acl:
    """The accounts of one ``plain_acl.yml``."""

    def __init__(self, accounts: dict[str, Account], source: str = "") -> None:
        self.accounts = accounts
        self.source = source

    @classmethod
    def load(cls, path: Path) -> Acl:
        """Parse ``path``.

        Raises:
            ConfigError: the file is missing, not YAML, or an account is malformed (named).
        """
        try:
            document: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(
                f"tieredAclFile={str(path)!r} cannot be read ({e.strerror or e}): point it "
                "at the broker's plain_acl.yml"
            ) from e
        except yaml.YAMLError as e:
            raise ConfigError(f"tieredAclFile={str(path)!r} is not YAML: {e}") from e
        if not isinstance(document, dict) or not isinstance(document.get("accounts"), list):
            raise ConfigError(
                f"tieredAclFile={str(path)!r} has no 'accounts' list (plain_acl.yml format)"
            )
        accounts: dict[str, Account] = {}
        for i, raw in enumerate(document["accounts"]):
            where = f"{path} accounts[{i}]"
            if not isinstance(raw, dict) or not raw.get("accessKey") or not raw.get("secretKey"):
                raise ConfigError(f"{where} needs accessKey and secretKey")
            key = str(raw["accessKey"])
            accounts[key] = Account(
                access_key=key,
                secret_key=str(raw["secretKey"]),
                admin=str(raw.get("admin", False)).lower() == "true",
                default_topic_perm=_perm(raw.get("defaultTopicPerm"), f"{where} defaultTopicPerm"),
                default_group_perm=_perm(raw.get("defaultGroupPerm"), f"{where} defaultGroupPerm"),
                topic_perms=_entries(raw.get("topicPerms"), f"{where} topicPerms"),
                group_perms=_entries(raw.get("groupPerms"), f"{where} groupPerms"),
            )
        if document.get("globalWhiteRemoteAddresses") or any(
            isinstance(a, dict) and a.get("whiteRemoteAddress") for a in document["accounts"]
        ):
            log.warning(
                "%s: IP allow-lists are not honoured by the sidecar; every request must "
                "carry an account's credentials",
                path,
            )
        return cls(accounts, str(path))

    def check(
        self, ext_fields: dict[str, str], body: bytes, topic: str | None, group: str | None
    ) -> Account:
        """The account that signed the request, allowed to read ``topic`` and ``group``.

        Raises:
            AclError: unsigned, unknown access key, bad signature, or no SUB permission (named).
        """
        access_key = ext_fields.get(ACCESS_KEY)
        signature = ext_fields.get(SIGNATURE)
        if not access_key or not signature:
            raise AclError(
                "the replay endpoint requires signed requests (AccessKey and Signature): "
                "configure the client with an AclClientRPCHook / accessKey and secretKey",
                reason=NO_CREDENTIALS,
            )
        account = self.accounts.get(access_key)
        expected = sign(request_content(ext_fields, body), (account or _NOBODY).secret_key)
        matches = hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace"))
        if not matches or account is None:
            raise AclError(
                f"AccessKey {access_key!r} is not an account, or its signature does not match: "
                "check the accessKey and secretKey",
                reason=BAD_CREDENTIALS,
                access_key=access_key,
            )
        self.authorize(account, topic, group)
        return account

    def authenticate(self, access_key: str, secret_key: str) -> Account:
        """The account of an HTTP Basic ``accessKey:secretKey``.

        Raises:
            AclError: unknown access key or wrong secret (one message for both).
        """
        account = self.accounts.get(access_key)
        expected = (account or _NOBODY).secret_key.encode("utf-8")
        matches = hmac.compare_digest(expected, secret_key.encode("utf-8", "replace"))
        if not matches or account is None:
            raise AclError(
                f"accessKey {access_key!r} is not an account, or its secretKey does not match",
                reason=BAD_CREDENTIALS,
                access_key=access_key,
            )
        return account

    @staticmethod
    def authorize(account: Account, topic: str | None, group: str | None) -> None:
        """Raises :class:`AclError` (``forbidden``) unless ``account`` may read ``topic`` and
        ``group`` (either may be None: not named by the request)."""
        who = account.access_key
        if topic and not account.may_read_topic(topic):
            raise AclError(
                f"AccessKey {who!r} has no SUB permission on topic {topic!r}",
                reason=FORBIDDEN,
                access_key=who,
            )
        if group and not account.may_read_group(group):
            raise AclError(
                f"AccessKey {who!r} has no SUB permission on group {group!r}",
                reason=FORBIDDEN,
                access_key=who,
            )
