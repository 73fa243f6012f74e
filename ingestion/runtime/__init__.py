"""The one JVM boundary: every py4j handle (`_jvm`, `_jsc`, `_jdf`, `_jo`, `_jsparkSession`) and every JVM class
the project uses lives here. `session` is the one SparkSession factory, `jars` resolves the JVM artifacts with Maven
and builds the helper jar from `data/*.java`; `delta_txn`, `listener`, `hadoop`, `helper` and `session_cache` wrap
one JVM concern each behind typed Python. Imports only the bottom modules (config, errors, paths, limits)."""
