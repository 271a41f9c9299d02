"""The real Cloud TPU backend: the API client, its error mapping, the Ray token secret and the
TPU VM startup script."""
