"""The field selectors the allocator's narrow lists send."""

from __future__ import annotations

from tollgate.allocator.k8s import field_is


def test_a_field_selector_escapes_what_the_api_server_would_parse_as_syntax() -> None:
    assert field_is("spec.service-id", 7) == "spec.service-id=7"
    assert field_is("spec.load-balancer", "lb-1") == "spec.load-balancer=lb-1"
    # A load-balancer field naming `a,b=c\d` selects that value, not two requirements.
    assert field_is("spec.load-balancer", "a,b=c\\d") == "spec.load-balancer=a\\,b\\=c\\\\d"
