"""Writer schemas by id: the `schemas/` folder and Schema Registry sources, and Avro -> Spark/Arrow types. Imports
only the bottom modules."""
