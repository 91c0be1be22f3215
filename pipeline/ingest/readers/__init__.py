"""One module per trace format; ``pipeline.ingest.registry`` lists them in detection order."""
