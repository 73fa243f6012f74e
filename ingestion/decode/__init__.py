"""From Kafka rows to decoded rows: the wire format, the decode spec and its error classes, the Python decoder
(fastavro in Arrow batches), the JVM decoder (Spark's from_avro and the Avro body check), the reader-schema resolver,
and the pure DataFrame functions that shape bronze and quarantine rows. Imports `schema`, `runtime` and the bottom
modules."""
