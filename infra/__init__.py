"""The thin Kafka layer: local broker, topic catalogue, producer and consumer helpers."""
