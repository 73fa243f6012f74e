"""One pipeline running: the Kafka source, the foreachBatch writer and its two strategies, the monitor (lag,
MLflow metrics, consumer-group commits), the txnAppId beside the checkpoint. Imports `delta`, `decode`, `kafka`,
`schema`, `runtime` and the bottom modules."""
