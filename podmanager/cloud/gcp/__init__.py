"""The real Cloud TPU backend: the API client, its error mapping and the Ray token secret.
(The TPU VM startup script is the hosts' business: `controller/startup.py`.)"""
