"""The Delta side: the offsets ledger in commit metadata, table creation and properties, idempotent appends,
reads, background log checkpoints and Parquet dictionary tuning. Imports `runtime` and the bottom modules."""
