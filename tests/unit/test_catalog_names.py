"""What counts as the same location when a catalog name is registered again (no JVM: pure functions)."""

from __future__ import annotations

from ingestion.delta.catalog import quoted, same_location


def test_a_location_is_the_same_whatever_scheme_prefix_or_slashes_the_catalog_shows() -> None:
    assert same_location("file:/data/tables/orders", "/data/tables/orders")
    assert same_location("file:///data/tables/orders/", "/data//tables/orders")
    assert same_location("s3a://lake/tables/orders/", "s3a://lake/tables/orders")
    assert not same_location("file:/data/tables/orders", "/data/tables/orders_quarantine")
    assert not same_location("s3a://lake/tables/orders", "s3a://other/tables/orders")


def test_names_are_quoted_part_by_part() -> None:
    assert quoted("bronze.orders") == "`bronze`.`orders`"
    assert quoted("orders") == "`orders`"
