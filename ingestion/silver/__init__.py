"""Current-state (silver) tables kept from bronze: a change per bronze row, folded by key and sequence, merged with
Delta's idempotent DML; each commit records the bronze version it reached (docs/cdc.md)."""
