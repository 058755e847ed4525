"""Model servers: a checkpoint served over an OpenAI-compatible HTTP API (`python -m trainer serve`),
started and stopped from its page or the API, each as a job of its own on the `serve` queue.

- models.py: ServedModel, one row per server started (its status, address, worker, why it ended).
- services.py: the web side: start (the same server when one is live), stop, what a page or the
  API reads (a server whose worker died is marked failed as it is read), the periodic reaper.
- supervisor.py: the worker side: the task's body, which spawns the server as a subprocess with
  the owner's API token in a key file, waits for it to listen, records its address and supervises
  it until it is asked to stop, its worker shuts down or it dies.
- endpoints.py: which endpoints a checkpoint answers, from its family and task (no torch), until
  the server's own /v1/capabilities replaces them; snippets.py: the page's curl and openai code.
"""
from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "webapp.serving"
    label = "serving"
