"""Decoder limits, declared once for both decode paths.

The JVM path reads them as Apache Avro's system properties (set on the driver and executors by the session
factory), so a malformed length or count fails the record instead of allocating gigabytes; larger legitimate
values are left to the Python decoder.
"""

from __future__ import annotations

MAX_STRING_BYTES = 8 * 1024 * 1024
MAX_BYTES_LENGTH = 8 * 1024 * 1024
MAX_COLLECTION_ITEMS = 8 * 1024 * 1024

# Apache Avro's Java decoder reads these system properties once per JVM.
AVRO_JAVA_LIMITS = {
    "org.apache.avro.limits.string.maxLength": MAX_STRING_BYTES,
    "org.apache.avro.limits.bytes.maxLength": MAX_BYTES_LENGTH,
    "org.apache.avro.limits.collectionItems.maxLength": MAX_COLLECTION_ITEMS,
}
