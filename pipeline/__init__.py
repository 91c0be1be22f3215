"""Pipeline stages as plain Python over Arrow/Polars. Nothing in here imports Prefect."""
