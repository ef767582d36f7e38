"""The service account controller's decisions, without I/O: which accounts a namespace is
missing, the body each is created with, which refusals of a create are no failure, and
the names the ``--service-accounts`` flag accepts."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable
from typing import Any

from steward.kube import NAMESPACE_TERMINATING, ApiError, ApiStatusError

DEFAULT_ACCOUNTS = ("default",)
"""The accounts ensured in every namespace unless ``--service-accounts`` says otherwise
(upstream's ``DefaultServiceAccountsControllerOptions``)."""
ACTIVE = "Active"
"""The only namespace phase in which accounts are created (``v1.NamespaceActive``)."""

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def missing(phase: str | None, wanted: Iterable[str], exists: Callable[[str], bool]) -> list[str]:
    """The accounts of ``wanted`` to create in a namespace of ``phase``: none unless the
    namespace is ``Active`` (one being deleted, or without a phase yet, gets nothing), else
    those ``exists`` does not find, in ``wanted``'s order."""
    if phase != ACTIVE:
        return []
    return [name for name in wanted if not exists(name)]


def account(name: str, namespace: str) -> dict[str, Any]:
    """The ServiceAccount created: its name and namespace, nothing else (upstream creates
    the bare object of its options; defaults are the API server's)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace},
    }


def ignored(err: ApiError) -> bool:
    """Whether a refused create is no failure: the account exists already
    (``AlreadyExists``), or the namespace is being deleted (a ``NamespaceTerminating``
    cause), as upstream's ``syncNamespace`` lets both pass."""
    if not isinstance(err, ApiStatusError):
        return False
    return err.reason == "AlreadyExists" or err.has_cause(NAMESPACE_TERMINATING)


def account_names(text: str) -> list[str]:
    """One ``--service-accounts`` value: comma-separated ServiceAccount names (DNS
    subdomains, as the API server requires of them).

    Raises:
        argparse.ArgumentTypeError: a name is empty or not a DNS subdomain.
    """
    names = [part.strip() for part in text.split(",")]
    for name in names:
        if not name or len(name) > 253 or not _SUBDOMAIN.match(name):
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a valid ServiceAccount name (a DNS subdomain: lowercase "
                "letters, digits, '-' and '.', at most 253 characters)"
            )
    return names


def wanted_accounts(values: Iterable[Iterable[str]] | None) -> tuple[str, ...]:
    """The accounts to ensure from the parsed flag (a list per occurrence): the defaults
    when the flag was not given, else every name given, once each, in order."""
    if values is None:
        return DEFAULT_ACCOUNTS
    return tuple(dict.fromkeys(name for group in values for name in group))
