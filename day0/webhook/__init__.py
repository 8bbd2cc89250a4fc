"""The Hugging Face release webhook receiver (see `day0.webhook.app` for the HTTP contract).

Modules: `payload` (our hub payload model and the start/ignore decision), `settings` (DAY0_WEBHOOK_*
and the watch config), `dedupe` (create-if-absent claims in the artifact store), `metrics`
(Prometheus), `app` (the FastAPI app). Imports Prefect only to trigger a deployment.
"""

from day0.webhook.app import create_app, prefect_trigger
from day0.webhook.payload import Decision, HubPayload, WatchList, decide
from day0.webhook.settings import WatchConfig, WebhookSettings, load_watch

__all__ = [
    "Decision",
    "HubPayload",
    "WatchConfig",
    "WatchList",
    "WebhookSettings",
    "create_app",
    "decide",
    "load_watch",
    "prefect_trigger",
]
