"""The Admitter between HTTP and the pure decisions: it waits for the cache, never answers from half of it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from tollgate.models import Goop, LoadBalancer
from tollgate.webhook.api.app import Admitter
from tollgate.webhook.cache import store_for
from tollgate.webhook.kinds import kind_of
from tollgate.webhook.validation import INDEXES, Limits

Obj = dict[str, Any]
Sample = Callable[[str], Obj]
MakeReview = Callable[..., Obj]


async def test_validation_waits_until_every_kind_is_listed(sample: Sample, make_review: MakeReview) -> None:
    store = store_for(INDEXES)
    admitter = Admitter(store, Limits(), pending_wait_seconds=0.2)
    body = json.dumps(make_review(sample("Goop"))).encode()
    status, answer = await admitter.handle(kind_of(Goop), "validate", body)
    assert status == 200 and answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 503
    assert answer["response"]["status"]["message"].startswith(
        "the webhook has not listed Account, ClusterRoutedIPClass"
    )
    assert (await admitter.handle(kind_of(Goop), "mutate", body))[1]["response"]["allowed"] is True, "defaulting"
    for kind in store.kinds:
        asyncio.get_running_loop().call_later(0.05, store.replace, kind, [])
    assert (await admitter.handle(kind_of(Goop), "validate", body))[1]["response"]["allowed"] is True


async def test_a_review_waits_for_a_referenced_object_to_reach_the_cache(
    sample: Sample, make_review: MakeReview, store_with: Callable[..., Any]
) -> None:
    """A service group created a moment before its load balancer: the watch event arrives during the review."""
    store = store_with()
    admitter = Admitter(store, Limits(), pending_wait_seconds=3)
    asyncio.get_running_loop().call_later(0.1, store.apply, "LBServiceGroup", "ADDED", sample("LBServiceGroup"))
    body = json.dumps(make_review(sample("LoadBalancer"))).encode()
    _, answer = await admitter.handle(kind_of(LoadBalancer), "validate", body)
    assert answer["response"]["allowed"] is True


async def test_a_referenced_object_that_never_comes_is_refused_after_the_wait(
    sample: Sample, make_review: MakeReview, store_with: Callable[..., Any]
) -> None:
    admitter = Admitter(store_with(), Limits(), pending_wait_seconds=0.1)
    body = json.dumps(make_review(sample("LoadBalancer"))).encode()
    _, answer = await admitter.handle(kind_of(LoadBalancer), "validate", body)
    assert answer["response"]["status"]["message"] == (
        "spec.service-group: LBServiceGroup 'sample' does not exist in the account's namespace epic-root"
    )
